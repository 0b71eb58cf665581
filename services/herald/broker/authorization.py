"""The broker's authorization decisions, per call (the rules are herald.metadata.authorization's;
the gRPC side is herald.common.authentication.AuthorizationInterceptor, and the Produce / Consume
servicers, which decide from their stream's first message).

Admin calls (Pulsar's rules): tenants themselves and the broker list are the super-users';
everything inside a tenant (its namespaces, policies, topics, subscriptions and grants) is also its
admin roles'; a role with a grant on a namespace may list its topics; dlq-workers may make the
initial subscription on a dead-letter topic. Pull and GetLastMessageId need consume; dead letters
are the dlq-workers'.

One policy is the operator's, not the tenant's: a namespace's max_partitions_per_topic above the
broker's setting, since partitions are per-partition work for every broker (stats, routes,
deletes); tenant admins may only set it up to the broker's."""

from __future__ import annotations

from typing import Any

from herald.common.errors import AuthorizationError
from herald.common.names import TopicName, parse_namespace
from herald.metadata.authorization import CONSUME, Authorizer

_SUPERUSER_CALLS = {
    "ListTenants": "list tenants", "CreateTenant": "create tenants", "UpdateTenant": "change tenants",
    "DeleteTenant": "delete tenants", "ListBrokers": "list brokers",
}
_DLQ_WORKER_CALLS = frozenset({"CreateSubscription"})


def tenant_of(method: str, request: Any) -> str:
    """The tenant an admin request acts on."""
    if method == "GetTenant":
        return str(request.name)
    if method == "ListNamespaces":
        return str(request.tenant)
    topic = getattr(request, "topic", "")
    if topic:
        return TopicName.parse(topic).tenant
    namespace = getattr(request, "namespace", "")
    if namespace:
        return parse_namespace(namespace)[0]
    raise AuthorizationError(f"admin call {method} names no tenant, namespace or topic: only super-users may make it")


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
        if method in _DLQ_WORKER_CALLS and role is not None and role in authorizer.dlq_workers:
            return
        if method == "ListTopics" and role is not None:
            # Pulsar lets roles with a grant on the namespace list its topics too.
            await authorizer.check_namespace(role, request.namespace)
            return
        await authorizer.check_tenant_admin(role, tenant_of(method, request))
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
