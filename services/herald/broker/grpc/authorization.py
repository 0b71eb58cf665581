"""The broker's authorization decisions, per call (the rules are herald.metadata.authorization's;
the gRPC side is herald.common.security.authentication.AuthorizationInterceptor; Produce and Consume
are decided from their stream's first message by the core's sessions, herald.broker.core.admission).

Admin calls (Pulsar's rules): tenants themselves and the broker list are the super-users';
everything inside a tenant (its namespaces, policies, topics, subscriptions and grants) is also its
admin roles'; a role with a grant on a namespace may list its topics, and a role that may consume on
a topic may create a subscription there (Pulsar's SUBSCRIBE operation). A request is decided on
EVERY resource it names, never on one picked from it: each tenant its topic, namespace or tenant
fields name must let the role in, and the dead-letter and retry topics of a dead-letter policy need
produce for the role, since its letters are moved on that role's authority (`check_dead_letter_topics`
of herald.broker.core.admission, also at subscribe). Pull and GetLastMessageId need consume; dead
letters are the dlq-workers'.

One policy is the operator's, not the tenant's: a namespace's max_partitions_per_topic above the
broker's setting, since partitions are per-partition work for every broker (stats, routes,
deletes); tenant admins may only set it up to the broker's."""

from __future__ import annotations

from typing import Any

from herald.broker.core.admission import check_dead_letter_topics
from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.common.codec.names import TopicName, parse_namespace
from herald.common.errors import AuthorizationError
from herald.metadata.authorization import CONSUME, Authorizer

_SUPERUSER_CALLS = {
    "ListTenants": "list tenants", "CreateTenant": "create tenants", "UpdateTenant": "change tenants",
    "DeleteTenant": "delete tenants", "ListBrokers": "list brokers",
}
# The fields of AdminService requests that name a resource, by what they name. Every one a request
# sets is authorized (tests/unit/test_admin_authorization.py checks that no request has a field
# naming a resource outside these).
TENANT_FIELDS = ("tenant",)
NAMESPACE_FIELDS = ("namespace",)
TOPIC_FIELDS = ("topic",)
# GetTenant's TenantRequest names its tenant `name` (the other calls on tenants are super-users').
_TENANT_NAME_CALLS = frozenset({"GetTenant"})


def tenants_named(method: str, request: Any) -> set[str]:
    """Every tenant an admin request names, through any of its fields."""
    tenants: set[str] = set()
    if method in _TENANT_NAME_CALLS and request.name:
        tenants.add(str(request.name))
    for field in TENANT_FIELDS:
        if getattr(request, field, ""):
            tenants.add(str(getattr(request, field)))
    for field in NAMESPACE_FIELDS:
        if getattr(request, field, ""):
            tenants.add(parse_namespace(getattr(request, field))[0])
    for field in TOPIC_FIELDS:
        if getattr(request, field, ""):
            tenants.add(TopicName.parse(getattr(request, field)).tenant)
    return tenants


def _admin_dead_letter_policy(request: Any) -> DeadLetterPolicy | None:
    """The policy a SetSubscriptionDeadLetterPolicy request sets, its topics' names resolved."""
    policy = request.policy
    return DeadLetterPolicy.for_subscription(request.topic, request.subscription, policy.max_redeliver_count,
                                             policy.dead_letter_topic, policy.retry_letter_topic)


_NAMESPACE_POLICY_CALLS = frozenset({"CreateNamespace", "SetNamespacePolicies"})


class BrokerAuthorization:
    def __init__(self, authorizer: Authorizer, max_partitions_per_topic: int) -> None:
        self.authorizer = authorizer
        self.max_partitions_per_topic = max_partitions_per_topic  # the broker's setting

    async def decide_data(self, method: str, request: Any, role: str | None) -> None:
        """BrokerService: Pull and GetLastMessageId here; Produce and Consume in the servicer."""
        if request is not None:
            await self.authorizer.check(role, request.topic, CONSUME)

    async def decide_dead_letters(self, method: str, request: Any, role: str | None) -> None:
        self.authorizer.check_dlq_worker(role)

    async def decide_admin(self, method: str, request: Any, role: str | None) -> None:
        authorizer = self.authorizer
        if authorizer.is_superuser(role):
            return
        what = _SUPERUSER_CALLS.get(method)
        if what is not None:
            authorizer.check_superuser(role, what)
            return
        # Both requests name one resource only (tests/unit/test_admin_authorization.py).
        if method == "ListTopics" and role is not None:
            # Pulsar lets roles with a grant on the namespace list its topics too.
            await authorizer.check_namespace(role, request.namespace)
            return
        if method == "CreateSubscription" and await authorizer.allowed(role, request.topic, (CONSUME,)):
            return
        tenants = tenants_named(method, request)
        if not tenants:
            raise AuthorizationError(
                f"admin call {method} names no tenant, namespace or topic: only super-users may make it")
        for tenant in sorted(tenants):
            await authorizer.check_tenant_admin(role, tenant)
        if method == "SetSubscriptionDeadLetterPolicy":
            policy = _admin_dead_letter_policy(request)
            if policy is not None:
                await check_dead_letter_topics(authorizer, role, policy)
        if method in _NAMESPACE_POLICY_CALLS:
            self._check_partition_limit_raise(role, request)

    def _check_partition_limit_raise(self, role: str | None, request: Any) -> None:
        """A tenant admin (not a super-user) may set max_partitions_per_topic up to the broker's."""
        policies = request.policies
        if not request.HasField("policies") or not policies.HasField("max_partitions_per_topic"):
            return
        wanted = policies.max_partitions_per_topic
        if wanted > self.max_partitions_per_topic:
            raise AuthorizationError(
                f"role {role!r} may not set namespace {request.namespace}'s max_partitions_per_topic to {wanted}, "
                f"above the broker's max_partitions_per_topic of {self.max_partitions_per_topic}: only "
                "super-users may (superuser_roles); a tenant admin may lower it")
