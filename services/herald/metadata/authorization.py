"""Authorization, as Pulsar decides it: who may produce to, consume from, look up and administer
what. Super-user roles may do everything; a tenant's admin_roles administer the tenant (its
namespaces, topics, subscriptions, grants) and may also produce and consume there; other roles get
the actions granted to them on a namespace or on one topic (a partition takes its partitioned
topic's grants). The grants live in the metadata store (keys in herald.metadata.resources, which
deletes them with their namespace or topic):

    /admin/permissions/<tenant>/<namespace>      {"role": ["produce", "consume"], ...}
    /admin/topic-permissions/<topic>             the same, for one topic (full name)

Here because brokers and lookup both decide (neither may import the other); no gRPC: the servicers
pass the role of the call (herald.common.security.authentication) and turn refusals into PERMISSION_DENIED.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterable

from herald.common.codec.names import TopicName, parse_namespace
from herald.common.errors import AuthorizationError, BadVersionError, InvalidArgumentError, NotFoundError
from herald.metadata.resources import (
    NAMESPACE_PERMISSIONS_PREFIX,
    NAMESPACE_POLICIES_PREFIX,
    TENANTS_PREFIX,
    TOPIC_PERMISSIONS_PREFIX,
    Tenant,
)
from herald.metadata.store import NOT_EXISTS, MetadataStore

PRODUCE = "produce"
CONSUME = "consume"
ACTIONS = (PRODUCE, CONSUME)
_CAS_ATTEMPTS = 10

Grants = dict[str, list[str]]


def check_actions(actions: Iterable[str]) -> list[str]:
    wanted = sorted({action.strip().lower() for action in actions if action.strip()})
    unknown = [action for action in wanted if action not in ACTIONS]
    if unknown or not wanted:
        raise InvalidArgumentError(f"actions {list(actions)!r} are invalid: give one or more of produce, consume")
    return wanted


def permissions_key(namespace: str = "", topic: str = "") -> str:
    """The key of a namespace's (`tenant/namespace`) or a topic's grants; exactly one is given."""
    if bool(namespace) == bool(topic):
        raise InvalidArgumentError("permissions are on a namespace or on a topic: give exactly one")
    if namespace:
        tenant, name = parse_namespace(namespace)
        return f"{NAMESPACE_PERMISSIONS_PREFIX}{tenant}/{name}"
    return TOPIC_PERMISSIONS_PREFIX + str(TopicName.parse(topic).base)


class Permissions:
    """The grants, read and changed by compare-and-set (two admins granting at once both count)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def get(self, namespace: str = "", topic: str = "") -> Grants:
        found = await self.store.get(permissions_key(namespace, topic))
        return {} if found is None else dict(json.loads(found.value))

    async def grant(self, role: str, actions: Iterable[str], namespace: str = "", topic: str = "") -> None:
        if not role:
            raise InvalidArgumentError("a grant needs a role")
        wanted = check_actions(actions)
        await self._require_namespace(namespace or TopicName.parse(topic).namespace_name)
        await self._change(permissions_key(namespace, topic), lambda grants: grants.__setitem__(role, wanted))

    async def revoke(self, role: str, namespace: str = "", topic: str = "") -> None:
        key = permissions_key(namespace, topic)
        if role not in await self.get(namespace, topic):
            raise NotFoundError(f"role {role!r} has no permission on {namespace or topic}")
        await self._change(key, lambda grants: grants.pop(role, None))

    async def _require_namespace(self, namespace: str) -> None:
        tenant, name = parse_namespace(namespace)
        if await self.store.get(f"{NAMESPACE_POLICIES_PREFIX}{tenant}/{name}") is None:
            raise NotFoundError(f"Namespace {tenant}/{name} does not exist")

    async def _change(self, key: str, change: object) -> None:
        for _ in range(_CAS_ATTEMPTS):
            found = await self.store.get(key)
            grants: Grants = {} if found is None else dict(json.loads(found.value))
            change(grants)  # type: ignore[operator]
            try:
                if not grants and found is not None:
                    await self.store.delete(key, expected_version=found.version)
                elif grants:
                    await self.store.put(key, json.dumps(grants, sort_keys=True).encode(),
                                         expected_version=NOT_EXISTS if found is None else found.version)
                return
            except BadVersionError:
                continue
        raise BadVersionError(f"permissions at {key} kept changing under this update: try again")


class Authorizer:
    """Decides for a role (None: the call was not authenticated, which authorization refuses).
    What it reads from the store is remembered for `cache_seconds`, so a grant or revoke takes
    effect within that time and opening streams costs no store reads."""

    def __init__(self, store: MetadataStore, *, superuser_roles: Collection[str] = (),
                 broker_roles: Collection[str] = (), dlq_worker_roles: Collection[str] = (),
                 cache_seconds: float = 1.0) -> None:
        self.store = store
        self.permissions = Permissions(store)
        self.superusers = frozenset(superuser_roles)
        self.brokers = frozenset(broker_roles)
        self.dlq_workers = frozenset(dlq_worker_roles)
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, bytes | None]] = {}

    async def _read(self, key: str) -> bytes | None:
        now = time.monotonic()
        known = self._cache.get(key)
        if known is not None and known[0] > now:
            return known[1]
        found = await self.store.get(key)
        value = None if found is None else found.value
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (now + self._cache_seconds, value)
        return value

    @staticmethod
    def _role(role: str | None) -> str:
        if role is None:
            raise AuthorizationError("authorization is on but the call is not authenticated: turn "
                                     "authentication on (authentication_enabled) and send credentials")
        return role

    def is_superuser(self, role: str | None) -> bool:
        return role is not None and role in self.superusers

    async def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        if role is None:
            return False
        if role in self.superusers:
            return True
        raw = await self._read(TENANTS_PREFIX + tenant)
        return raw is not None and role in Tenant.from_bytes(tenant, raw).admin_roles

    async def _granted(self, role: str, topic: TopicName) -> set[str]:
        actions: set[str] = set()
        keys = (f"{NAMESPACE_PERMISSIONS_PREFIX}{topic.namespace_name}", TOPIC_PERMISSIONS_PREFIX + str(topic.base))
        for key in keys:
            raw = await self._read(key)
            if raw is not None:
                actions.update(json.loads(raw).get(role, ()))
        return actions

    async def allowed(self, role: str | None, topic: str, actions: Collection[str]) -> bool:
        """Whether `role` may do any of `actions` on `topic`."""
        who = self._role(role)
        name = TopicName.parse(topic)
        if await self.is_tenant_admin(who, name.tenant):
            return True
        # No blanket right for dlq-workers: a worker acts as the role a letter moves for (the
        # subscriber's, x-herald-original-principal), never with a right of its own.
        return bool(await self._granted(who, name) & set(actions))

    async def check(self, role: str | None, topic: str, action: str) -> None:
        """AuthorizationError unless `role` may `action` (produce / consume) on `topic`."""
        if not await self.allowed(role, topic, (action,)):
            raise AuthorizationError(f"role {role!r} may not {action} on {topic}: ask an administrator "
                                     f"for the {action} permission")

    async def check_lookup(self, role: str | None, topic: str) -> None:
        """Looking a topic up needs produce or consume."""
        if not await self.allowed(role, topic, ACTIONS):
            raise AuthorizationError(f"role {role!r} may not look up {topic}: it has neither produce nor "
                                     "consume permission there")

    async def check_namespace(self, role: str | None, namespace: str) -> None:
        """Listing a namespace's topics (pattern consumers): a tenant admin, or a role with a grant
        on the namespace."""
        who = self._role(role)
        tenant, name = parse_namespace(namespace)
        if await self.is_tenant_admin(who, tenant):
            return
        raw = await self._read(f"{NAMESPACE_PERMISSIONS_PREFIX}{tenant}/{name}")
        if raw is None or not json.loads(raw).get(who):
            raise AuthorizationError(f"role {who!r} may not list the topics of namespace {tenant}/{name}")

    async def check_tenant_admin(self, role: str | None, tenant: str) -> None:
        who = self._role(role)
        if not await self.is_tenant_admin(who, tenant):
            raise AuthorizationError(f"role {who!r} may not administer tenant {tenant!r}: it is neither a "
                                     "super-user nor one of the tenant's admin roles")

    def check_superuser(self, role: str | None, what: str) -> None:
        who = self._role(role)
        if who not in self.superusers:
            raise AuthorizationError(f"role {who!r} may not {what}: only super-users may (superuser_roles)")

    def check_broker(self, role: str | None, what: str) -> None:
        who = self._role(role)
        if who not in self.brokers and who not in self.superusers:
            raise AuthorizationError(f"role {who!r} may not {what}: only broker roles may (broker_roles)")

    def check_dlq_worker(self, role: str | None) -> None:
        who = self._role(role)
        if who not in self.dlq_workers and who not in self.superusers:
            raise AuthorizationError(f"role {who!r} may not take dead letters: only dlq-worker roles may "
                                     "(dlq_worker_roles)")
