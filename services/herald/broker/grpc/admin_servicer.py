"""The admin gRPC servicer, served by every broker: a thin adapter from AdminService calls to the
metadata resources (tenants, namespaces, policies: herald.metadata.resources) and to the broker
core (topics and subscriptions: BrokerService).

A topic or subscription call that reaches a broker not owning the topic is forwarded, once, to its
owner (broker.grpc.admin_forwarding). A call on a partitioned topic's base name that acts on topic state
(stats, unload, subscriptions) is made on each partition, wherever each is served, and the answers
combined: stats summed (broker.core.stats.sum_partitions), skipped counts added, subscription names
merged. Partitions are visited at most IN_FLIGHT at a time, and every loop over them gives the
event loop back (herald.common.bounded): a topic with many partitions makes a slow call, never a
stalled broker.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc
import grpc.aio

from herald.api.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, lookup_pb2
from herald.broker.core.service import BrokerService
from herald.broker.core.stats import sum_partitions
from herald.broker.grpc import admin_storage
from herald.broker.grpc.admin_forwarding import AdminForwarder, is_forwarded
from herald.broker.grpc.admin_inspection import InspectionAdmin
from herald.broker.grpc.admin_messages import (
    compaction_status_to_proto,
    dead_letter_policy_from_proto,
    dead_letter_policy_to_proto,
    internal_stats_to_proto,
    position_to_proto,
    reset_target,
    subscription_start,
    topic_stats_from_proto,
    topic_stats_to_proto,
)
from herald.broker.grpc.admin_schemas import SchemaAdmin
from herald.common import errors
from herald.common.bounded import Pacer, map_bounded
from herald.common.codec.names import TopicName
from herald.common.security.authentication import current_role
from herald.common.transport.rpc import abort, error_from_rpc
from herald.common.transport.tls import PLAINTEXT, Dialer
from herald.metadata.authorization import Permissions
from herald.metadata.policies import Policies
from herald.metadata.policies_proto import policies_from_proto, policies_to_proto
from herald.metadata.resources import Resources, StoredDeadLetterPolicy, Tenant

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")


def _unused(call: str, **fields: str) -> None:
    """InvalidArgumentError when a request sets a field its call does not use: it would be
    authorized as a resource the call never acts on (SetPoliciesRequest serves two calls)."""
    for name, value in fields.items():
        if value:
            raise errors.InvalidArgumentError(f"{call}: leave {name} empty (it is {value!r})")


async def _summed_stats(topic: str, each: list[admin_pb2.TopicStats]) -> admin_pb2.TopicStats:
    """A partitioned topic's stats from its partitions' (in partition order), converted, summed and
    answered with the loop given back between partitions; the partitions' own replies become
    partition_stats as they came, not converted twice."""
    pacer = Pacer()
    parts = []
    for part in each:
        parts.append(topic_stats_from_proto(part))
        await pacer.pace()
    total = await sum_partitions(topic, parts)
    total.partition_stats = []
    reply = topic_stats_to_proto(total)
    for part in each:
        reply.partition_stats.append(part)
        await pacer.pace()
    return reply


def _tenant_to_proto(tenant: Tenant) -> admin_pb2.Tenant:
    return admin_pb2.Tenant(name=tenant.name, admin_roles=tenant.admin_roles, allowed_clusters=tenant.allowed_clusters)


def _tenant_from_proto(tenant: admin_pb2.Tenant) -> Tenant:
    return Tenant(tenant.name, list(tenant.admin_roles), list(tenant.allowed_clusters))


# Schema calls: admin_schemas; lookup, message reads and expiry: admin_inspection.
class AdminServicer(SchemaAdmin, InspectionAdmin, admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, service: BrokerService, own_address: str, dialer: Dialer = PLAINTEXT) -> None:
        self.service = service
        self.resources = Resources(service.store)
        self.permissions = Permissions(service.store)
        self.forwarder = AdminForwarder(service.settings.lookup_address, own_address, dialer)

    async def close(self) -> None:
        await self.forwarder.close()

    # ---- plumbing ----

    async def _answer(self, context: Context, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run a call; a HeraldError aborts the RPC with its code and message."""
        try:
            return await call()
        except errors.HeraldError as error:
            await abort(context, error)
        except Exception as exc:
            log.exception("admin %s failed", operation)
            await abort(context, errors.HeraldError(f"internal error in {operation}: {exc!r}"))

    async def _on_owner(
        self, context: Context, method: str, request: Any, topic: str, local: Callable[[], Awaitable[T]],
    ) -> T:
        """`local()` here when this broker owns the topic, else the same call on its owner."""
        try:
            return await local()
        except errors.NotOwnerError:
            if is_forwarded(context):
                raise  # forwarded here already: the topic moved meanwhile, the caller tries again
            return cast(T, await self.forwarder.forward(method, request, topic, context.time_remaining()))

    async def _topic_call(
        self, context: Context, method: str, request: Any, topic: str, local: Callable[[], Awaitable[T]],
    ) -> T:
        return await self._answer(context, method, lambda: self._on_owner(context, method, request, topic, local))

    async def _partitions_of(self, topic: str) -> int:
        """How many partitions `topic` has when it is a partitioned topic's base name; else 0."""
        name = TopicName.parse(topic)
        if name.partition_index >= 0:
            return 0
        return await self.resources.get_partitions(str(name))

    async def _on_each_partition(
        self, context: Context, method: str, topic: str, partitions: int, request_for: Callable[[str], Any],
        local: Callable[[str], Awaitable[T]],
    ) -> list[T]:
        """The same call on every partition of `topic` (each here or on its owner), in partition
        order, IN_FLIGHT at a time (names made as they are reached, never all at once). Every
        partition's call runs to its end, failed or not, and only then is the first error raised,
        as Pulsar's admin does: a call is never cut off half made on some partitions, and never
        answered while others still act on it (found by tests/fuzz/test_hostile_fuzz.py)."""
        base = TopicName.parse(topic)

        async def one(index: int) -> T | Exception:
            partition = str(base.partition(index))
            try:
                return await self._on_owner(context, method, request_for(partition), partition,
                                            functools.partial(local, partition))
            except Exception as exc:
                return exc

        answers = await map_bounded(one, range(partitions))
        for index, answer in enumerate(answers):
            if isinstance(answer, errors.NotFoundError):
                # A subscription missing on a partition is missing on the topic: say so with the name
                # the caller gave, never an internal partition's.
                raise errors.NotFoundError(str(answer).replace(str(base.partition(index)), str(base)))
            if isinstance(answer, Exception):
                raise answer
        return cast(list[T], answers)

    # ---- tenants ----

    async def ListTenants(
        self, request: admin_pb2.ListTenantsRequest, context: Context,
    ) -> admin_pb2.ListTenantsResponse:
        tenants = await self._answer(context, "ListTenants", self.resources.list_tenants)
        return admin_pb2.ListTenantsResponse(tenants=tenants)

    async def GetTenant(self, request: admin_pb2.TenantRequest, context: Context) -> admin_pb2.Tenant:
        tenant = await self._answer(context, "GetTenant", lambda: self.resources.get_tenant(request.name))
        return _tenant_to_proto(tenant)

    async def CreateTenant(self, request: admin_pb2.Tenant, context: Context) -> admin_pb2.Tenant:
        tenant = await self._answer(
            context, "CreateTenant", lambda: self.resources.create_tenant(_tenant_from_proto(request)))
        return _tenant_to_proto(tenant)

    async def UpdateTenant(self, request: admin_pb2.Tenant, context: Context) -> admin_pb2.Tenant:
        tenant = await self._answer(
            context, "UpdateTenant", lambda: self.resources.update_tenant(_tenant_from_proto(request)))
        return _tenant_to_proto(tenant)

    async def DeleteTenant(
        self, request: admin_pb2.DeleteTenantRequest, context: Context,
    ) -> admin_pb2.DeleteTenantResponse:
        await self._answer(context, "DeleteTenant", lambda: self.resources.delete_tenant(request.name))
        return admin_pb2.DeleteTenantResponse()

    # ---- namespaces ----

    async def ListNamespaces(
        self, request: admin_pb2.ListNamespacesRequest, context: Context,
    ) -> admin_pb2.ListNamespacesResponse:
        namespaces = await self._answer(
            context, "ListNamespaces", lambda: self.resources.list_namespaces(request.tenant))
        return admin_pb2.ListNamespacesResponse(namespaces=namespaces)

    async def CreateNamespace(self, request: admin_pb2.CreateNamespaceRequest, context: Context) -> admin_pb2.Policies:
        policies = policies_from_proto(request.policies) if request.HasField("policies") else None
        created = await self._answer(
            context, "CreateNamespace", lambda: self.resources.create_namespace(request.namespace, policies))
        return policies_to_proto(created)

    async def DeleteNamespace(
        self, request: admin_pb2.DeleteNamespaceRequest, context: Context,
    ) -> admin_pb2.DeleteNamespaceResponse:
        await self._answer(context, "DeleteNamespace", lambda: self.resources.delete_namespace(request.namespace))
        return admin_pb2.DeleteNamespaceResponse()

    async def GetNamespacePolicies(self, request: admin_pb2.NamespaceRequest, context: Context) -> admin_pb2.Policies:
        policies = await self._answer(
            context, "GetNamespacePolicies", lambda: self.resources.get_namespace_policies(request.namespace))
        return policies_to_proto(policies)

    async def SetNamespacePolicies(self, request: admin_pb2.SetPoliciesRequest, context: Context) -> admin_pb2.Policies:
        async def set_policies() -> Policies:
            _unused("SetNamespacePolicies acts on a namespace", topic=request.topic)
            return await self.resources.set_namespace_policies(
                request.namespace, policies_from_proto(request.policies), request.clear)

        return policies_to_proto(await self._answer(context, "SetNamespacePolicies", set_policies))

    # ---- topics ----

    async def ListTopics(self, request: admin_pb2.ListTopicsRequest, context: Context) -> admin_pb2.ListTopicsResponse:
        topics = await self._answer(context, "ListTopics", lambda: self.service.list_topics(request.namespace))
        return admin_pb2.ListTopicsResponse(topics=topics)

    async def CreateTopic(
        self, request: admin_pb2.CreateTopicRequest, context: Context,
    ) -> admin_pb2.CreateTopicResponse:
        await self._topic_call(context, "CreateTopic", request, request.topic,
                               lambda: self.service.create_topic(request.topic, request.partitions))
        return admin_pb2.CreateTopicResponse()

    async def GetPartitions(self, request: admin_pb2.TopicRequest, context: Context) -> admin_pb2.PartitionsResponse:
        count = await self._answer(context, "GetPartitions", lambda: self.service.get_partitions(request.topic))
        return admin_pb2.PartitionsResponse(partitions=count)

    async def UpdatePartitions(
        self, request: admin_pb2.UpdatePartitionsRequest, context: Context,
    ) -> admin_pb2.PartitionsResponse:
        count = await self._answer(
            context, "UpdatePartitions", lambda: self.service.update_partitions(request.topic, request.partitions))
        return admin_pb2.PartitionsResponse(partitions=count)

    async def DeleteTopic(
        self, request: admin_pb2.DeleteTopicRequest, context: Context,
    ) -> admin_pb2.DeleteTopicResponse:
        await self._topic_call(context, "DeleteTopic", request, request.topic,
                               lambda: self.service.delete_topic(request.topic, request.force,
                                                                  delete_schema=not request.keep_schema))
        return admin_pb2.DeleteTopicResponse()

    async def GetTopicStats(self, request: admin_pb2.TopicStatsRequest, context: Context) -> admin_pb2.TopicStats:
        async def stats() -> admin_pb2.TopicStats:
            partitions = await self._partitions_of(request.topic)
            if not partitions:
                return await self._on_owner(context, "GetTopicStats", request, request.topic, lambda: self._local_stats(
                    request.topic))
            each = await self._on_each_partition(context, "GetTopicStats", request.topic, partitions,
                                                 lambda p: admin_pb2.TopicStatsRequest(topic=p), self._local_stats)
            return await _summed_stats(str(TopicName.parse(request.topic)), each)

        return await self._answer(context, "GetTopicStats", stats)

    async def _local_stats(self, topic: str) -> admin_pb2.TopicStats:
        return topic_stats_to_proto(await self.service.topic_stats(topic))

    async def GetInternalStats(self, request: admin_pb2.TopicRequest, context: Context) -> admin_pb2.InternalStats:
        async def local() -> admin_pb2.InternalStats:
            if await self._partitions_of(request.topic):
                raise errors.InvalidArgumentError(
                    f"{request.topic} is a partitioned topic: internal stats are per partition, "
                    f"e.g. {request.topic}-partition-0")
            return internal_stats_to_proto(await self.service.internal_stats(request.topic))

        return await self._topic_call(context, "GetInternalStats", request, request.topic, local)

    async def UnloadTopic(
        self, request: admin_pb2.UnloadTopicRequest, context: Context,
    ) -> admin_pb2.UnloadTopicResponse:
        async def unload() -> None:
            partitions = await self._partitions_of(request.topic)
            if not partitions:
                await self._on_owner(context, "UnloadTopic", request, request.topic,
                                     lambda: self.service.unload_topic(request.topic))
                return
            await self._on_each_partition(context, "UnloadTopic", request.topic, partitions,
                                          lambda p: admin_pb2.UnloadTopicRequest(topic=p), self.service.unload_topic)

        await self._answer(context, "UnloadTopic", unload)
        return admin_pb2.UnloadTopicResponse()

    async def TerminateTopic(
        self, request: admin_pb2.TopicRequest, context: Context,
    ) -> admin_pb2.TerminateTopicResponse:
        async def local() -> admin_pb2.TerminateTopicResponse:
            if await self._partitions_of(request.topic):
                raise errors.NotAllowedError(
                    f"{request.topic} is a partitioned topic: terminate its partitions one by one")
            last = await self.service.terminate(request.topic)
            return admin_pb2.TerminateTopicResponse(last=position_to_proto(last))

        return await self._topic_call(context, "TerminateTopic", request, request.topic, local)

    async def GetTopicPolicies(self, request: admin_pb2.TopicRequest, context: Context) -> admin_pb2.Policies:
        policies = await self._answer(context, "GetTopicPolicies", lambda: self.service.topic_policies(request.topic))
        return policies_to_proto(policies)

    async def GetEffectivePolicies(self, request: admin_pb2.TopicRequest, context: Context) -> admin_pb2.Policies:
        policies = await self._answer(
            context, "GetEffectivePolicies", lambda: self.service.effective_policies(request.topic))
        return policies_to_proto(policies)

    async def SetTopicPolicies(self, request: admin_pb2.SetPoliciesRequest, context: Context) -> admin_pb2.Policies:
        async def set_policies() -> Policies:
            _unused("SetTopicPolicies acts on a topic", namespace=request.namespace)
            return await self.resources.set_topic_policies(
                request.topic, policies_from_proto(request.policies), request.clear)

        return policies_to_proto(await self._answer(context, "SetTopicPolicies", set_policies))

    # ---- subscriptions ----

    async def ListSubscriptions(
        self, request: admin_pb2.TopicRequest, context: Context,
    ) -> admin_pb2.ListSubscriptionsResponse:
        async def names() -> list[str]:
            partitions = await self._partitions_of(request.topic)
            if not partitions:
                reply = await self._on_owner(context, "ListSubscriptions", request, request.topic,
                                             lambda: self._local_subscriptions(request.topic))
                return list(reply.subscriptions)
            each = await self._on_each_partition(
                context, "ListSubscriptions", request.topic, partitions, lambda p: admin_pb2.TopicRequest(topic=p),
                self._local_subscriptions)
            names: set[str] = set()
            pacer = Pacer()
            for reply in each:
                names.update(reply.subscriptions)
                await pacer.pace()
            return sorted(names)

        subscriptions = await self._answer(context, "ListSubscriptions", names)
        return admin_pb2.ListSubscriptionsResponse(subscriptions=subscriptions)

    async def _local_subscriptions(self, topic: str) -> admin_pb2.ListSubscriptionsResponse:
        return admin_pb2.ListSubscriptionsResponse(subscriptions=await self.service.list_subscriptions(topic))

    async def _subscription_call(
        self, context: Context, method: str, request: Any, local: Callable[[str], Awaitable[T]],
    ) -> list[T]:
        """A subscription call (the request names `topic`) on the topic, or on each of its partitions."""
        async def run() -> list[T]:
            partitions = await self._partitions_of(request.topic)
            if not partitions:
                return [await self._on_owner(context, method, request, request.topic, lambda: local(request.topic))]

            def request_for(partition: str) -> Any:
                copy = type(request)()
                copy.CopyFrom(request)
                copy.topic = partition
                return copy

            return await self._on_each_partition(context, method, request.topic, partitions, request_for, local)

        return await self._answer(context, method, run)

    async def CreateSubscription(
        self, request: admin_pb2.CreateSubscriptionRequest, context: Context,
    ) -> admin_pb2.CreateSubscriptionResponse:
        async def local(topic: str) -> admin_pb2.CreateSubscriptionResponse:
            await self.service.create_subscription(topic, request.subscription, subscription_start(request))
            return admin_pb2.CreateSubscriptionResponse()

        await self._subscription_call(context, "CreateSubscription", request, local)
        return admin_pb2.CreateSubscriptionResponse()

    async def DeleteSubscription(
        self, request: admin_pb2.DeleteSubscriptionRequest, context: Context,
    ) -> admin_pb2.DeleteSubscriptionResponse:
        async def local(topic: str) -> admin_pb2.DeleteSubscriptionResponse:
            await self.service.unsubscribe(topic, request.subscription, request.force)
            return admin_pb2.DeleteSubscriptionResponse()

        await self._subscription_call(context, "DeleteSubscription", request, local)
        await self._answer(context, "DeleteSubscription",
                           lambda: self.resources.set_dead_letter_policy(request.topic, request.subscription, None))
        return admin_pb2.DeleteSubscriptionResponse()

    async def GetSubscriptionDeadLetterPolicy(
        self, request: admin_pb2.SubscriptionRequest, context: Context,
    ) -> broker_pb2.DeadLetterPolicy:
        stored = await self._answer(context, "GetSubscriptionDeadLetterPolicy",
                                    lambda: self.resources.get_dead_letter_policy(request.topic, request.subscription))
        return dead_letter_policy_to_proto(stored)

    async def SetSubscriptionDeadLetterPolicy(
        self, request: admin_pb2.SetSubscriptionDeadLetterPolicyRequest, context: Context,
    ) -> broker_pb2.DeadLetterPolicy:
        # Kept with the role of the admin who sets it: the dlq-worker moves its letters as that role
        # (checked for produce on both topics by broker.authorization), none with authorization off.
        role = (current_role() or "") if self.service.settings.authorization_enabled else ""

        async def from_proto() -> StoredDeadLetterPolicy | None:
            return dead_letter_policy_from_proto(request.policy, role)

        stored = await self._answer(context, "SetSubscriptionDeadLetterPolicy", from_proto)

        async def local(topic: str) -> broker_pb2.DeadLetterPolicy:
            await self.service.set_dead_letter_policy(topic, request.subscription, stored)
            return dead_letter_policy_to_proto(stored)

        await self._subscription_call(context, "SetSubscriptionDeadLetterPolicy", request, local)
        return dead_letter_policy_to_proto(stored)

    async def ResetCursor(
        self, request: admin_pb2.ResetCursorRequest, context: Context,
    ) -> admin_pb2.ResetCursorResponse:
        async def local(topic: str) -> admin_pb2.ResetCursorResponse:
            await self.service.reset_cursor(topic, request.subscription, reset_target(request))
            return admin_pb2.ResetCursorResponse()

        await self._subscription_call(context, "ResetCursor", request, local)
        return admin_pb2.ResetCursorResponse()

    async def SkipMessages(
        self, request: admin_pb2.SkipMessagesRequest, context: Context,
    ) -> admin_pb2.SkipMessagesResponse:
        async def local(topic: str) -> admin_pb2.SkipMessagesResponse:
            if not request.all and request.count < 1:
                raise errors.InvalidArgumentError(
                    f"skip count {request.count} is invalid: give a count of 1 or more, or all")
            count = None if request.all else request.count
            return admin_pb2.SkipMessagesResponse(
                skipped=await self.service.skip_messages(topic, request.subscription, count))

        each = await self._subscription_call(context, "SkipMessages", request, local)
        return admin_pb2.SkipMessagesResponse(skipped=sum(reply.skipped for reply in each))

    async def PeekMessages(
        self, request: admin_pb2.PeekMessagesRequest, context: Context,
    ) -> admin_pb2.PeekMessagesResponse:
        count = request.count or 1

        async def local(topic: str) -> admin_pb2.PeekMessagesResponse:
            peeked = await self.service.peek_messages(topic, request.subscription, count)
            return admin_pb2.PeekMessagesResponse(entries=[
                broker_pb2.DeliveredEntry(ledger_id=p.ledger_id, entry_id=p.entry_id, data=data,
                                          redelivery_count=redeliveries)
                for p, data, redeliveries in peeked
            ])

        each = await self._subscription_call(context, "PeekMessages", request, local)
        # A partitioned topic: up to `count` from each partition, partition by partition.
        reply = admin_pb2.PeekMessagesResponse()
        pacer = Pacer()
        for part in each:
            reply.entries.extend(part.entries)
            await pacer.pace()
        return reply

    # ---- brokers ----

    async def ListBrokers(
        self, request: admin_pb2.ListBrokersRequest, context: Context,
    ) -> admin_pb2.ListBrokersResponse:
        async def brokers() -> list[lookup_pb2.BrokerInfo]:
            timeout = context.time_remaining()
            try:
                reply = await self.forwarder.lookup().GetClusterInfo(
                    lookup_pb2.ClusterInfoRequest(), timeout=timeout if timeout is not None else 30.0)
            except grpc.aio.AioRpcError as exc:
                raise error_from_rpc(exc, f"asking lookup at {self.forwarder.lookup_address} for brokers") from None
            return sorted(reply.brokers, key=lambda broker: broker.broker_id)

        return admin_pb2.ListBrokersResponse(brokers=await self._answer(context, "ListBrokers", brokers))

    # ---- storage nodes ----

    async def ListStorageNodes(
        self, request: admin_pb2.ListStorageNodesRequest, context: Context,
    ) -> admin_pb2.ListStorageNodesResponse:
        return admin_pb2.ListStorageNodesResponse(nodes=await self._answer(
            context, "ListStorageNodes", lambda: admin_storage.list_storage_nodes(self.service.store)))

    async def DrainStorageNode(
        self, request: admin_pb2.DrainStorageNodeRequest, context: Context,
    ) -> admin_pb2.StorageNodeInfo:
        return await self._answer(context, "DrainStorageNode", lambda: admin_storage.drain_storage_node(
            self.service.store, request.address, undo=request.undo))

    # ---- permissions ----

    async def GrantPermission(
        self, request: admin_pb2.GrantPermissionRequest, context: Context,
    ) -> admin_pb2.GrantPermissionResponse:
        await self._answer(context, "GrantPermission", lambda: self.permissions.grant(
            request.role, request.actions, namespace=request.namespace, topic=request.topic))
        return admin_pb2.GrantPermissionResponse()

    async def RevokePermission(
        self, request: admin_pb2.RevokePermissionRequest, context: Context,
    ) -> admin_pb2.RevokePermissionResponse:
        await self._answer(context, "RevokePermission", lambda: self.permissions.revoke(
            request.role, namespace=request.namespace, topic=request.topic))
        return admin_pb2.RevokePermissionResponse()

    async def GetPermissions(
        self, request: admin_pb2.PermissionsRequest, context: Context,
    ) -> admin_pb2.PermissionsResponse:
        grants = await self._answer(context, "GetPermissions", lambda: self.permissions.get(
            namespace=request.namespace, topic=request.topic))
        return admin_pb2.PermissionsResponse(permissions=[
            admin_pb2.RolePermissions(role=role, actions=actions) for role, actions in sorted(grants.items())])

    # ---- compaction ----

    async def CompactTopic(self, request: admin_pb2.TopicRequest, context: Context) -> admin_pb2.CompactTopicResponse:
        async def compact() -> None:
            partitions = await self._partitions_of(request.topic)
            if not partitions:
                await self._on_owner(context, "CompactTopic", request, request.topic,
                                     lambda: self.service.compact(request.topic))
                return
            await self._on_each_partition(context, "CompactTopic", request.topic, partitions,
                                          lambda p: admin_pb2.TopicRequest(topic=p), self.service.compact)

        await self._answer(context, "CompactTopic", compact)
        return admin_pb2.CompactTopicResponse()

    async def GetCompactionStatus(
        self, request: admin_pb2.TopicRequest, context: Context,
    ) -> admin_pb2.CompactionStatus:
        async def local() -> admin_pb2.CompactionStatus:
            if await self._partitions_of(request.topic):
                raise errors.NotAllowedError(
                    f"{request.topic} is a partitioned topic: each partition is compacted on its own, ask each one")
            return compaction_status_to_proto(await self.service.compaction_status(request.topic))

        return await self._topic_call(context, "GetCompactionStatus", request, request.topic, local)
