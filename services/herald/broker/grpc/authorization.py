"""The broker's authorization decisions, per gRPC call (the rules are herald.metadata.authorization's;
the gRPC side is herald.common.security.authentication.AuthorizationInterceptor; Produce and Consume
are decided from their stream's first message by the core's sessions, herald.broker.core.admission).

Admin calls are decided by the core's AdminAccess (herald.broker.core.admin_access, which every front
end shares): this module says what each AdminService request names. A request is decided on EVERY
resource it names, never on one picked from it: each tenant its topic, namespace or tenant fields
name, the dead-letter and retry topics of a dead-letter policy, a namespace's max_partitions_per_topic.
Pull and GetLastMessageId need consume, GetSchema produce or consume (as Pulsar's GET_SCHEMA needs
a lookup's permission: producers read the topic's schema too); dead letters are the dlq-workers'."""

from __future__ import annotations

from typing import Any

from herald.broker.core.admin_access import AdminAccess, AdminCall
from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.common.codec.names import TopicName, parse_namespace
from herald.metadata.authorization import CONSUME, Authorizer

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


def admin_call(method: str, request: Any) -> AdminCall:
    """What an AdminService request names, for the core's decision."""
    dead_letters = _admin_dead_letter_policy(request) if method == "SetSubscriptionDeadLetterPolicy" else None
    max_partitions = None
    if method in _NAMESPACE_POLICY_CALLS and request.HasField("policies") \
            and request.policies.HasField("max_partitions_per_topic"):
        max_partitions = int(request.policies.max_partitions_per_topic)
    # Both ListTopics and CreateSubscription name one resource only (tests/unit/test_admin_authorization.py).
    return AdminCall(method, frozenset(tenants_named(method, request)),
                     namespace=str(getattr(request, "namespace", "")), topic=str(getattr(request, "topic", "")),
                     dead_letter_policy=dead_letters, max_partitions_per_topic=max_partitions)


class BrokerAuthorization:
    def __init__(self, authorizer: Authorizer, max_partitions_per_topic: int) -> None:
        self.authorizer = authorizer
        self.access = AdminAccess(authorizer, max_partitions_per_topic)  # shared with the REST front end

    async def decide_data(self, method: str, request: Any, role: str | None) -> None:
        """BrokerService: Pull, GetLastMessageId and GetSchema here; Produce and Consume in the servicer."""
        if request is None:
            return
        if method == "GetSchema":
            await self.authorizer.check_lookup(role, request.topic)
            return
        await self.authorizer.check(role, request.topic, CONSUME)

    async def decide_dead_letters(self, method: str, request: Any, role: str | None) -> None:
        self.authorizer.check_dlq_worker(role)

    async def decide_admin(self, method: str, request: Any, role: str | None) -> None:
        await self.access.decide(admin_call(method, request), role)
