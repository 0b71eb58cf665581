"""Who may make which admin call, whatever front end it came through (gRPC's AdminService, the
Pulsar admin REST API): the decision on an `AdminCall`, which names the call (AdminService's method
names are the vocabulary) and every resource it acts on. The rules are herald.metadata.authorization's;
each front end only says what a request names.

Admin calls (Pulsar's rules): tenants themselves and the broker list are the super-users';
everything inside a tenant (its namespaces, policies, topics, subscriptions and grants) is also its
admin roles'; a role with a grant on a namespace may list its topics, and a role that may consume on
a topic may create a subscription there (Pulsar's SUBSCRIBE operation). A call is decided on EVERY
tenant it names, never on one picked from them, and the dead-letter and retry topics of a dead-letter
policy need produce for the role, since its letters are moved on that role's authority. One policy is
the operator's, not the tenant's: a namespace's max_partitions_per_topic above the broker's setting
(partitions are per-partition work for every broker); tenant admins may only set it up to it."""

from __future__ import annotations

from dataclasses import dataclass

from herald.broker.core.admission import check_dead_letter_topics
from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.common.codec.names import TopicName, parse_namespace
from herald.common.errors import AuthorizationError
from herald.metadata.authorization import ACTIONS, CONSUME, Authorizer

SUPERUSER_CALLS = {
    "ListTenants": "list tenants", "CreateTenant": "create tenants", "UpdateTenant": "change tenants",
    "DeleteTenant": "delete tenants", "ListBrokers": "list brokers",
    "ListStorageNodes": "list storage nodes", "DrainStorageNode": "drain storage nodes",
}

# Schema calls a role that may look the topic up (produce or consume) may make.
SCHEMA_READ_CALLS = frozenset({"GetSchema", "ListSchemaVersions", "TestSchemaCompatibility"})


def tenants_of(tenants: tuple[str, ...] = (), namespaces: tuple[str, ...] = (),
               topics: tuple[str, ...] = ()) -> frozenset[str]:
    """Every tenant named by these tenants, namespaces ("tenant/namespace") and topics."""
    named = {tenant for tenant in tenants if tenant}
    named.update(parse_namespace(namespace)[0] for namespace in namespaces if namespace)
    named.update(TopicName.parse(topic).tenant for topic in topics if topic)
    return frozenset(named)


@dataclass(frozen=True, slots=True)
class AdminCall:
    """An admin call as authorization sees it. `name`: AdminService's method name for the operation;
    `tenants`: every tenant the call names (through any tenant, namespace or topic); `namespace`:
    the namespace ListTopics lists; `topic`: the topic CreateSubscription subscribes on;
    `dead_letter_policy`: the policy SetSubscriptionDeadLetterPolicy sets; `max_partitions_per_topic`:
    the namespace policy CreateNamespace or SetNamespacePolicies sets (None: not set)."""

    name: str
    tenants: frozenset[str] = frozenset()
    namespace: str = ""
    topic: str = ""
    dead_letter_policy: DeadLetterPolicy | None = None
    max_partitions_per_topic: int | None = None

    @classmethod
    def on(cls, name: str, *, tenant: str = "", namespace: str = "", topic: str = "") -> AdminCall:
        """A call naming one tenant, namespace or topic (what a REST path names)."""
        return cls(name, tenants_of((tenant,), (namespace,), (topic,)), namespace=namespace, topic=topic)


class AdminAccess:
    """The decision on admin calls: raises AuthorizationError to refuse."""

    def __init__(self, authorizer: Authorizer, max_partitions_per_topic: int) -> None:
        self.authorizer = authorizer
        self.max_partitions_per_topic = max_partitions_per_topic  # the broker's setting

    async def decide(self, call: AdminCall, role: str | None) -> None:
        authorizer = self.authorizer
        if authorizer.is_superuser(role):
            return
        what = SUPERUSER_CALLS.get(call.name)
        if what is not None:
            authorizer.check_superuser(role, what)
            return
        if call.name == "ListTopics" and role is not None:
            # Pulsar lets roles with a grant on the namespace list its topics too.
            await authorizer.check_namespace(role, call.namespace)
            return
        if call.name == "CreateSubscription" and await authorizer.allowed(role, call.topic, (CONSUME,)):
            return
        if call.name in SCHEMA_READ_CALLS and await authorizer.allowed(role, call.topic, ACTIONS):
            return  # a topic's producers and consumers may read its schemas (and test one: nothing is stored)
        if not call.tenants:
            raise AuthorizationError(
                f"admin call {call.name} names no tenant, namespace or topic: only super-users may make it")
        for tenant in sorted(call.tenants):
            await authorizer.check_tenant_admin(role, tenant)
        if call.dead_letter_policy is not None:
            await check_dead_letter_topics(authorizer, role, call.dead_letter_policy)
        wanted = call.max_partitions_per_topic
        if wanted is not None and wanted > self.max_partitions_per_topic:
            raise AuthorizationError(
                f"role {role!r} may not set namespace {call.namespace}'s max_partitions_per_topic to {wanted}, "
                f"above the broker's max_partitions_per_topic of {self.max_partitions_per_topic}: only "
                "super-users may (superuser_roles); a tenant admin may lower it")
