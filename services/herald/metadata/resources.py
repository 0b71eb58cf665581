"""What Herald keeps in the metadata store besides ledgers and cursors, and where: tenants,
namespaces with their policies, per-topic policy overrides and partitioned-topic metadata. Lookup and
brokers both read these, so the key layout lives here, in one place.

    /admin/tenants/<tenant>                     tenant (JSON)
    /admin/policies/<tenant>/<namespace>        namespace policies (JSON); the namespace exists
                                                while this key does
    /admin/topic-policies/<topic>               a topic's policy overrides (JSON; full topic name)
    /admin/permissions/<tenant>/<namespace>      grants on a namespace (herald.metadata.authorization);
                                                deleted with the namespace
    /admin/topic-permissions/<topic>            grants on a topic (full name); deleted with the topic
    /admin/dead-letter-policies/<topic>/<subscription>   a subscription's dead-letter policy (JSON;
                                                the partitioned topic's name for its partitions)
    /partitioned-topics/<topic>                 {"partitions": n} for a partitioned topic
    /managed-ledgers/<tenant>/<ns>/persistent/<name>   a persistent topic's ledger list (the broker's)
    /non-persistent-topics/<tenant>/<ns>/<name>        a non-persistent topic while a broker serves it

Changes are compare-and-set, so two admins racing on one namespace never lose an update silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from herald.common.bounded import Pacer
from herald.common.codec.names import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    TopicName,
    parse_namespace,
    validate_tenant_name,
)
from herald.common.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    PreconditionFailedError,
)
from herald.metadata.policies import Policies
from herald.metadata.store import NOT_EXISTS, MetadataStore

TENANTS_PREFIX = "/admin/tenants/"
NAMESPACE_POLICIES_PREFIX = "/admin/policies/"
TOPIC_POLICIES_PREFIX = "/admin/topic-policies/"
DEAD_LETTER_POLICIES_PREFIX = "/admin/dead-letter-policies/"
NAMESPACE_PERMISSIONS_PREFIX = "/admin/permissions/"
TOPIC_PERMISSIONS_PREFIX = "/admin/topic-permissions/"
PARTITIONED_PREFIX = "/partitioned-topics/"
MANAGED_LEDGERS_PREFIX = "/managed-ledgers/"
NON_PERSISTENT_PREFIX = "/non-persistent-topics/"
DEFAULT_NAMESPACE_NAME = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"
# Retries of a read-modify-write that lost its compare-and-set to a concurrent admin.
_CAS_ATTEMPTS = 10


@dataclass(slots=True)
class Tenant:
    name: str
    admin_roles: list[str] = field(default_factory=list)
    allowed_clusters: list[str] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        doc = {"admin_roles": list(self.admin_roles), "allowed_clusters": list(self.allowed_clusters)}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, name: str, raw: bytes) -> Tenant:
        doc = json.loads(raw)
        return cls(name, list(doc.get("admin_roles", [])), list(doc.get("allowed_clusters", [])))


def partitioned_key(topic: str) -> str:
    """The metadata key of a partitioned topic (`topic` is its full name, without partition)."""
    return PARTITIONED_PREFIX + topic


@dataclass(frozen=True, slots=True)
class StoredDeadLetterPolicy:
    """A subscription's dead-letter policy as an admin set it ("" topics: the default names), with
    the role of that admin: the dlq-worker moves its letters on that role's authority ("" with
    authorization off, and in policies kept from before the role was recorded)."""

    max_redeliver_count: int
    dead_letter_topic: str = ""
    retry_letter_topic: str = ""
    role: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps({"max_redeliver_count": self.max_redeliver_count,
                           "dead_letter_topic": self.dead_letter_topic,
                           "retry_letter_topic": self.retry_letter_topic, "role": self.role}).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> StoredDeadLetterPolicy:
        doc = json.loads(raw)
        return cls(int(doc["max_redeliver_count"]), str(doc.get("dead_letter_topic", "")),
                   str(doc.get("retry_letter_topic", "")), str(doc.get("role", "")))


def dead_letter_policy_key(topic: str, subscription: str) -> str:
    """Kept under the partitioned topic's name: its partitions share their subscriptions' policies."""
    return f"{DEAD_LETTER_POLICIES_PREFIX}{_topic(topic).base}/{subscription}"


def topic_policies_key(topic: str) -> str:
    return TOPIC_POLICIES_PREFIX + topic


def namespace_policies_key(namespace: str) -> str:
    return NAMESPACE_POLICIES_PREFIX + namespace


def managed_ledger_key(topic: TopicName) -> str:
    """Where a persistent topic's ledger list lives (the managed ledger's name, as Pulsar spells it)."""
    return f"{MANAGED_LEDGERS_PREFIX}{topic.tenant}/{topic.namespace}/persistent/{topic.local_name}"


def non_persistent_key(topic: TopicName) -> str:
    return f"{NON_PERSISTENT_PREFIX}{topic.tenant}/{topic.namespace}/{topic.local_name}"


async def get_partitions(store: MetadataStore, topic: str) -> int:
    """How many partitions a topic has (its full name); 0 when it is not partitioned."""
    found = await store.get(partitioned_key(topic))
    return int(json.loads(found.value)["partitions"]) if found is not None else 0


def _namespace(namespace: str) -> str:
    tenant, local = parse_namespace(namespace)
    return f"{tenant}/{local}"


def _topic(topic: str) -> TopicName:
    return TopicName.parse(topic)


class Resources:
    """Tenants, namespaces, policies and partitioned topics in one metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # ---- tenants ----

    async def list_tenants(self) -> list[str]:
        found = await self.store.list(TENANTS_PREFIX)
        return sorted(key[len(TENANTS_PREFIX):] for key in found)

    async def get_tenant(self, name: str) -> Tenant:
        validate_tenant_name(name)
        found = await self.store.get(TENANTS_PREFIX + name)
        if found is None:
            raise NotFoundError(f"Tenant {name} does not exist")
        return Tenant.from_bytes(name, found.value)

    async def create_tenant(self, tenant: Tenant) -> Tenant:
        validate_tenant_name(tenant.name)
        try:
            await self.store.put(TENANTS_PREFIX + tenant.name, tenant.to_bytes(), expected_version=NOT_EXISTS)
        except BadVersionError:
            raise AlreadyExistsError(f"Tenant {tenant.name} already exists") from None
        return tenant

    async def update_tenant(self, tenant: Tenant) -> Tenant:
        validate_tenant_name(tenant.name)
        key = TENANTS_PREFIX + tenant.name
        for _ in range(_CAS_ATTEMPTS):
            found = await self.store.get(key)
            if found is None:
                raise NotFoundError(f"Tenant {tenant.name} does not exist")
            try:
                await self.store.put(key, tenant.to_bytes(), expected_version=found.version)
                return tenant
            except BadVersionError:
                continue
        raise BadVersionError(f"tenant {tenant.name} keeps changing while being updated: retry")

    async def delete_tenant(self, name: str) -> None:
        """Delete a tenant; refused while it has namespaces."""
        await self.get_tenant(name)
        namespaces = await self.list_namespaces(name)
        if namespaces:
            raise PreconditionFailedError(
                f"Tenant {name} has namespaces ({', '.join(namespaces)}): delete them first")
        await self.store.delete(TENANTS_PREFIX + name)

    # ---- namespaces ----

    async def list_namespaces(self, tenant: str) -> list[str]:
        """The namespaces of a tenant, as "tenant/namespace"."""
        await self.get_tenant(tenant)
        prefix = f"{NAMESPACE_POLICIES_PREFIX}{tenant}/"
        found = await self.store.list(prefix)
        return sorted(f"{tenant}/{key[len(prefix):]}" for key in found)

    async def check_namespace(self, namespace: str) -> None:
        """NotFoundError naming the tenant or the namespace when either does not exist."""
        await self.get_namespace_policies(namespace)

    async def create_namespace(self, namespace: str, policies: Policies | None = None) -> Policies:
        namespace = _namespace(namespace)
        tenant = namespace.split("/", 1)[0]
        await self.get_tenant(tenant)
        policies = (policies or Policies()).validate()
        try:
            await self.store.put(namespace_policies_key(namespace), policies.to_bytes(), expected_version=NOT_EXISTS)
        except BadVersionError:
            raise AlreadyExistsError(f"Namespace {namespace} already exists") from None
        return policies

    async def delete_namespace(self, namespace: str) -> None:
        """Delete a namespace, its grants (a namespace made again under the name starts with none),
        and the topic policies and grants left by its deleted topics; refused while it has topics."""
        namespace = _namespace(namespace)
        topics = await self.list_topics(namespace)
        if topics:
            shown = ", ".join(topics[:5]) + (", ..." if len(topics) > 5 else "")
            raise PreconditionFailedError(
                f"Namespace {namespace} has {len(topics)} topics ({shown}): delete them first")
        await self.store.delete(namespace_policies_key(namespace))
        await self.store.delete(NAMESPACE_PERMISSIONS_PREFIX + namespace)
        for prefix in (TOPIC_POLICIES_PREFIX, TOPIC_PERMISSIONS_PREFIX):
            for domain in ("persistent", "non-persistent"):
                for key in await self.store.list(f"{prefix}{domain}://{namespace}/"):
                    await self.store.delete(key)

    async def get_namespace_policies(self, namespace: str) -> Policies:
        namespace = _namespace(namespace)
        found = await self.store.get(namespace_policies_key(namespace))
        if found is None:
            await self.get_tenant(namespace.split("/", 1)[0])
            raise NotFoundError(f"Namespace {namespace} does not exist")
        return Policies.from_bytes(found.value)

    async def set_namespace_policies(
        self, namespace: str, policies: Policies, clear: Iterable[str] = (),
    ) -> Policies:
        """Set the fields given in `policies`, clear those named in `clear`; returns the result."""
        namespace = _namespace(namespace)
        key = namespace_policies_key(namespace)
        clear = list(clear)
        for _ in range(_CAS_ATTEMPTS):
            found = await self.store.get(key)
            if found is None:
                await self.get_namespace_policies(namespace)  # raises the precise NotFoundError
                continue
            result = policies.merged_over(Policies.from_bytes(found.value)).without(clear).validate()
            try:
                await self.store.put(key, result.to_bytes(), expected_version=found.version)
                return result
            except BadVersionError:
                continue
        raise BadVersionError(f"policies of namespace {namespace} keep changing while being set: retry")

    async def ensure_default_namespace(self) -> None:
        """Create tenant "public" and namespace "public/default" unless they exist (idempotent, and
        safe when several services start at once)."""
        try:
            await self.create_tenant(Tenant(DEFAULT_TENANT))
        except AlreadyExistsError:
            pass
        try:
            await self.create_namespace(DEFAULT_NAMESPACE_NAME)
        except AlreadyExistsError:
            pass

    # ---- topic policies ----

    async def get_topic_policies(self, topic: str) -> Policies:
        """A topic's own overrides (empty when it has none); NotFoundError for an unknown namespace."""
        name = _topic(topic)
        await self.check_namespace(name.namespace_name)
        found = await self.store.get(topic_policies_key(str(name)))
        return Policies.from_bytes(found.value) if found is not None else Policies()

    async def set_topic_policies(self, topic: str, policies: Policies, clear: Iterable[str] = ()) -> Policies:
        name = _topic(topic)
        for namespace_only in ("max_topics", "max_partitions_per_topic"):
            if getattr(policies, namespace_only) is not None:
                raise InvalidArgumentError(f"{namespace_only} is a namespace policy: set it on namespace "
                                           f"{name.namespace_name}, not on topic {name}")
        await self.check_namespace(name.namespace_name)
        key = topic_policies_key(str(name))
        clear = list(clear)
        for _ in range(_CAS_ATTEMPTS):
            found = await self.store.get(key)
            current = Policies.from_bytes(found.value) if found is not None else Policies()
            result = policies.merged_over(current).without(clear).validate()
            try:
                await self.store.put(key, result.to_bytes(),
                                     expected_version=found.version if found is not None else NOT_EXISTS)
                return result
            except BadVersionError:
                continue
        raise BadVersionError(f"policies of topic {name} keep changing while being set: retry")

    async def delete_topic_policies(self, topic: str) -> None:
        """The topic's policy overrides, and (not for one partition: partitions share their
        partitioned topic's) its grants and its subscriptions' dead-letter policies; every topic
        delete path calls this, so a topic made again under the name inherits none of them."""
        name = _topic(topic)
        await self.store.delete(topic_policies_key(str(name)))
        if name.partition_index < 0:
            await self.store.delete(TOPIC_PERMISSIONS_PREFIX + str(name))
            for key in await self.store.list(f"{DEAD_LETTER_POLICIES_PREFIX}{name}/"):
                await self.store.delete(key)

    # ---- subscriptions' dead-letter policies ----

    async def get_dead_letter_policy(self, topic: str, subscription: str) -> StoredDeadLetterPolicy | None:
        found = await self.store.get(dead_letter_policy_key(topic, subscription))
        return StoredDeadLetterPolicy.from_bytes(found.value) if found is not None else None

    async def set_dead_letter_policy(
        self, topic: str, subscription: str, policy: StoredDeadLetterPolicy | None,
    ) -> None:
        """Store a subscription's policy; None removes it. NotFoundError for an unknown namespace."""
        name = _topic(topic)
        await self.check_namespace(name.namespace_name)
        key = dead_letter_policy_key(str(name), subscription)
        if policy is None:
            await self.store.delete(key)
        else:
            await self.store.put(key, policy.to_bytes())

    # ---- partitioned topics ----

    async def get_partitions(self, topic: str) -> int:
        return await get_partitions(self.store, str(_topic(topic)))

    async def check_partition(self, topic: str) -> None:
        """NotFoundError when `topic` names a partition past its partitioned topic's count (a
        `<x>-partition-<i>` whose `x` is not partitioned is a topic of its own, as in Pulsar)."""
        name = _topic(topic)
        if name.partition_index < 0:
            return
        partitions = await get_partitions(self.store, str(name.base))
        if name.partition_index >= partitions > 0:
            raise NotFoundError(
                f"Topic {name} does not exist: {name.base} has {partitions} partitions (0 to {partitions - 1})")

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        name = _topic(topic)
        if partitions < 1:
            raise InvalidArgumentError(f"a partitioned topic needs at least 1 partition, not {partitions}")
        if name.partition_index >= 0:
            raise InvalidArgumentError(
                f"topic {name} names a partition: a partitioned topic's name cannot end in -partition-<n>")
        await self.check_namespace(name.namespace_name)
        if name.persistent and await self.store.get(managed_ledger_key(name)) is not None:
            raise AlreadyExistsError(f"Topic {name} already exists (it is not partitioned)")
        try:
            await self.store.put(partitioned_key(str(name)), _partitions_doc(partitions),
                                 expected_version=NOT_EXISTS)
        except BadVersionError:
            raise AlreadyExistsError(f"Topic {name} already exists") from None

    async def update_partitions(self, topic: str, partitions: int) -> int:
        """Grow a partitioned topic to `partitions` (the same count changes nothing); returns it."""
        name = _topic(topic)
        key = partitioned_key(str(name))
        for _ in range(_CAS_ATTEMPTS):
            found = await self.store.get(key)
            if found is None:
                await self.check_namespace(name.namespace_name)
                raise NotFoundError(f"Partitioned topic {name} does not exist")
            current = int(json.loads(found.value)["partitions"])
            if partitions < current:
                raise NotAllowedError(
                    f"cannot shrink from {current} to {partitions} partitions: topic {name} can only grow")
            if partitions == current:
                return current
            try:
                await self.store.put(key, _partitions_doc(partitions), expected_version=found.version)
                return partitions
            except BadVersionError:
                continue
        raise BadVersionError(f"partitions of {name} keep changing while being updated: retry")

    async def delete_partitioned_topic(self, topic: str) -> None:
        name = _topic(topic)
        if not await self.store.delete(partitioned_key(str(name))):
            raise NotFoundError(f"Partitioned topic {name} does not exist")

    # ---- listing topics ----

    async def list_topics(self, namespace: str) -> list[str]:
        """Every topic of a namespace, sorted: partitioned topics by their base name (their
        partitions left out), persistent topics that have a managed ledger, and non-persistent
        topics being served. NotFoundError for an unknown tenant or namespace."""
        namespace = _namespace(namespace)
        await self.check_namespace(namespace)
        tenant, local = namespace.split("/", 1)
        topics: set[str] = set()
        partitioned: set[str] = set()
        for domain in ("persistent", "non-persistent"):
            prefix = f"{PARTITIONED_PREFIX}{domain}://{namespace}/"
            partitioned.update(key[len(PARTITIONED_PREFIX):] for key in await self.store.list(prefix))
        topics.update(partitioned)
        sources = (
            (f"{MANAGED_LEDGERS_PREFIX}{tenant}/{local}/persistent/", "persistent"),
            (f"{NON_PERSISTENT_PREFIX}{tenant}/{local}/", "non-persistent"),
        )
        pacer = Pacer()  # a namespace may hold thousands of partitions' ledgers
        for prefix, domain in sources:
            for key in await self.store.list(prefix):
                await pacer.pace()
                name = TopicName.parse(f"{domain}://{namespace}/{key[len(prefix):]}")
                if name.partition_index >= 0 and str(name.base) in partitioned:
                    continue
                topics.add(str(name))
        return sorted(topics)

    async def count_topics(self, namespace: str) -> int:
        """How many topics a namespace holds, as its max_topics policy counts them: a partitioned
        topic counts its partitions (created or not), every other topic one."""
        count = 0
        pacer = Pacer()
        for topic in await self.list_topics(namespace):
            partitions = await get_partitions(self.store, topic)
            count += partitions if partitions > 0 else 1
            await pacer.pace()  # a store answering from memory never suspends
        return count


def _partitions_doc(partitions: int) -> bytes:
    return json.dumps({"partitions": partitions}).encode()
