"""The admin API's client: one method per AdminService call (tenants, namespaces, policies, topics,
subscriptions, schemas, brokers), asyncio first, with a blocking facade (SyncAdminClient).

    async with AdminClient("herald://localhost:6660") as admin:
        await admin.create_tenant("acme")
        await admin.create_namespace("acme/orders")
        await admin.create_topic("persistent://acme/orders/created", partitions=4)
        stats = await admin.topic_stats("persistent://acme/orders/created")

The URL is a service URL (`herald://host:port`: lookup, which names a live broker to talk to) or
a broker's own address (`host:port`). Every broker serves the whole admin API and forwards topic
calls to the topic's owner. Replies that carry one value come back as that value (a list of names,
a count); structured replies come back as the contract's messages (admin_pb2.TopicStats,
admin_pb2.Policies, ...). Failures raise the HeraldError the broker named (NotFoundError,
AlreadyExistsError, NotAllowedError, PreconditionFailedError, ...).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Coroutine, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from herald.api.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, common_pb2, lookup_pb2, lookup_pb2_grpc
from herald.client.config import InitialPosition, ServiceUrl
from herald.common import tracing
from herald.common.codec.message_id import check_position
from herald.common.codec.schema_info import SchemaInfo
from herald.common.codec.schema_proto import schema_from_proto, schema_to_proto
from herald.common.errors import AlreadyClosedError, InvalidArgumentError, ServiceNotReadyError
from herald.common.security.credentials import (
    Authentication,
    auth_interceptors,
    check_authentication,
    client_certificate,
)
from herald.common.transport.rpc import channel_options, error_from_rpc
from herald.common.transport.tls import Dialer

T = TypeVar("T")
DEFAULT_ADMIN_URL = "herald://127.0.0.1:6660"
Position = tuple[int, int]  # (ledger id, entry id); a MessageId is one too


def _position(position: Sequence[int]) -> common_pb2.Position:
    if len(position) < 2:
        raise InvalidArgumentError(f"a position is (ledger id, entry id), got {position!r}")
    check_position(int(position[0]), int(position[1]))
    return common_pb2.Position(ledger_id=int(position[0]), entry_id=int(position[1]))


def _millis(when: int | datetime.datetime) -> int:
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:
            raise InvalidArgumentError(f"publish time {when.isoformat()} has no time zone: give one (e.g. UTC)")
        return int(when.timestamp() * 1000)
    return int(when)


def _upload(topic: str, schema: SchemaInfo) -> admin_pb2.UploadSchemaRequest:
    request = admin_pb2.UploadSchemaRequest(topic=topic)
    schema_to_proto(schema, request.schema)
    return request


class AdminClient:
    """An admin session with one broker; use as an async context manager, or close() it."""

    def __init__(self, url: str = DEFAULT_ADMIN_URL, *, timeout: float = 30.0, auth: Authentication | None = None,
                 tls_trust_certs_file_path: str | None = None, tls_certificate_file_path: str | None = None,
                 tls_private_key_file_path: str | None = None) -> None:
        """`url`: herald://host:port (lookup; herald+ssl:// for TLS) or a broker's host:port (TLS when
        tls_trust_certs_file_path is given). `auth`: AuthenticationToken or AuthenticationTls.
        tls_certificate_file_path / tls_private_key_file_path: a client certificate presented beside
        a token, for clusters that require one (as ClientConfig's)."""
        check_authentication(auth)
        tls = url.startswith("herald+ssl://") or tls_trust_certs_file_path is not None
        certificate = client_certificate(auth, tls_certificate_file_path, tls_private_key_file_path)
        if certificate is not None and not tls:
            raise InvalidArgumentError(
                f"a client certificate needs TLS: give a herald+ssl:// URL or tls_trust_certs_file_path, not {url!r}")
        self._dialer = Dialer(
            ca_file=tls_trust_certs_file_path or "", tls=tls, interceptors=auth_interceptors(auth),
            cert_file=certificate[0] if certificate else "", key_file=certificate[1] if certificate else "",
        )
        if not timeout > 0:
            raise InvalidArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if "://" in url:
            self._lookup_address: str | None = ServiceUrl.parse(url).address
            self._broker_address: str | None = None
        else:
            if not url or ":" not in url:
                raise InvalidArgumentError(
                    f"admin URL {url!r} is invalid: expected herald://host:port (lookup) or host:port (a broker)")
            self._lookup_address, self._broker_address = None, url
        self.url = url
        self.timeout = timeout
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closed = False

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close(None)

    # ---- plumbing ----

    def _channel(self, address: str) -> grpc.aio.Channel:
        if self._closed:
            raise AlreadyClosedError("admin client already closed")
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._dialer.channel(address, channel_options())
        return channel

    async def broker_address(self) -> str:
        """The broker this client talks to (for a service URL: the first live broker lookup names)."""
        if self._broker_address is None:
            assert self._lookup_address is not None
            brokers = await self._lookup_brokers()
            if not brokers:
                raise ServiceNotReadyError(f"lookup at {self._lookup_address} knows no live broker: retry later")
            self._broker_address = brokers[0].address
        return self._broker_address

    async def _lookup_brokers(self) -> list[lookup_pb2.BrokerInfo]:
        assert self._lookup_address is not None
        stub = lookup_pb2_grpc.LookupServiceStub(self._channel(self._lookup_address))
        try:
            reply = await stub.GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=self.timeout,
                                              metadata=tracing.grpc_metadata())
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"asking lookup at {self._lookup_address} for brokers") from None
        return sorted(reply.brokers, key=lambda broker: broker.broker_id)

    async def _call(self, method: str, request: Any) -> Any:
        address = await self.broker_address()
        stub = admin_pb2_grpc.AdminServiceStub(self._channel(address))
        try:
            return await getattr(stub, method)(request, timeout=self.timeout, metadata=tracing.grpc_metadata())
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"{method} at {address}") from None

    # ---- permissions ----

    async def grant_permission(self, role: str, actions: Iterable[str], *, namespace: str = "",
                               topic: str = "") -> None:
        """Grant `actions` ("produce", "consume") to `role` on a namespace or a topic (one of them)."""
        await self._call("GrantPermission", admin_pb2.GrantPermissionRequest(
            namespace=namespace, topic=topic, role=role, actions=list(actions)))

    async def revoke_permission(self, role: str, *, namespace: str = "", topic: str = "") -> None:
        await self._call("RevokePermission", admin_pb2.RevokePermissionRequest(
            namespace=namespace, topic=topic, role=role))

    async def get_permissions(self, *, namespace: str = "", topic: str = "") -> dict[str, list[str]]:
        """Role -> actions granted on the namespace or topic itself (not inherited ones)."""
        reply = await self._call("GetPermissions", admin_pb2.PermissionsRequest(namespace=namespace, topic=topic))
        return {grant.role: list(grant.actions) for grant in reply.permissions}

    # ---- tenants ----

    async def list_tenants(self) -> list[str]:
        reply = await self._call("ListTenants", admin_pb2.ListTenantsRequest())
        return list(reply.tenants)

    async def get_tenant(self, name: str) -> admin_pb2.Tenant:
        reply: admin_pb2.Tenant = await self._call("GetTenant", admin_pb2.TenantRequest(name=name))
        return reply

    async def create_tenant(
        self, name: str, admin_roles: Iterable[str] = (), allowed_clusters: Iterable[str] = (),
    ) -> admin_pb2.Tenant:
        tenant = admin_pb2.Tenant(name=name, admin_roles=list(admin_roles), allowed_clusters=list(allowed_clusters))
        reply: admin_pb2.Tenant = await self._call("CreateTenant", tenant)
        return reply

    async def update_tenant(
        self, name: str, admin_roles: Iterable[str] = (), allowed_clusters: Iterable[str] = (),
    ) -> admin_pb2.Tenant:
        """Replace the tenant's admin roles and allowed clusters."""
        tenant = admin_pb2.Tenant(name=name, admin_roles=list(admin_roles), allowed_clusters=list(allowed_clusters))
        reply: admin_pb2.Tenant = await self._call("UpdateTenant", tenant)
        return reply

    async def delete_tenant(self, name: str) -> None:
        await self._call("DeleteTenant", admin_pb2.DeleteTenantRequest(name=name))

    # ---- namespaces ----

    async def list_namespaces(self, tenant: str) -> list[str]:
        reply = await self._call("ListNamespaces", admin_pb2.ListNamespacesRequest(tenant=tenant))
        return list(reply.namespaces)

    async def create_namespace(self, namespace: str, policies: admin_pb2.Policies | None = None) -> admin_pb2.Policies:
        """Create "tenant/namespace" (with these policies, if given); returns its policies."""
        request = admin_pb2.CreateNamespaceRequest(namespace=namespace, policies=policies)
        reply: admin_pb2.Policies = await self._call("CreateNamespace", request)
        return reply

    async def delete_namespace(self, namespace: str) -> None:
        await self._call("DeleteNamespace", admin_pb2.DeleteNamespaceRequest(namespace=namespace))

    async def namespace_policies(self, namespace: str) -> admin_pb2.Policies:
        reply: admin_pb2.Policies = await self._call(
            "GetNamespacePolicies", admin_pb2.NamespaceRequest(namespace=namespace))
        return reply

    async def set_namespace_policies(
        self, namespace: str, policies: admin_pb2.Policies | None = None, clear: Iterable[str] = (),
    ) -> admin_pb2.Policies:
        """Set the fields present in `policies` and remove those named in `clear` (they are
        inherited again); returns the namespace's policies after the change."""
        request = admin_pb2.SetPoliciesRequest(namespace=namespace, policies=policies, clear=list(clear))
        reply: admin_pb2.Policies = await self._call("SetNamespacePolicies", request)
        return reply

    # ---- topics ----

    async def list_topics(self, namespace: str) -> list[str]:
        reply = await self._call("ListTopics", admin_pb2.ListTopicsRequest(namespace=namespace))
        return list(reply.topics)

    async def create_topic(self, topic: str, partitions: int = 0) -> None:
        """Create a topic; partitions > 0 makes it a partitioned topic of that many partitions."""
        await self._call("CreateTopic", admin_pb2.CreateTopicRequest(topic=topic, partitions=partitions))

    async def get_partitions(self, topic: str, *, must_exist: bool = False) -> int:
        """How many partitions the topic has; 0 when it is not partitioned (or, unless `must_exist`,
        does not exist: NotFoundError then, and nothing is created)."""
        reply = await self._call("GetPartitions", admin_pb2.TopicRequest(topic=topic))
        if must_exist and not reply.partitions:
            await self.lookup_topic(topic)  # NotFoundError when it does not exist
        return int(reply.partitions)

    async def lookup_topic(self, topic: str) -> dict[str, str]:
        """Which broker owns the topic: topic (each partition of a partitioned topic) -> the
        owner's address; lookup assigns an owner to a topic that has none. NotFoundError when the
        topic does not exist."""
        reply = await self._call("LookupTopic", admin_pb2.TopicRequest(topic=topic))
        return {owner.topic: owner.broker_address for owner in reply.owners}

    async def update_partitions(self, topic: str, partitions: int) -> int:
        """Grow a partitioned topic to `partitions` (shrinking is refused); returns the new count."""
        reply = await self._call(
            "UpdatePartitions", admin_pb2.UpdatePartitionsRequest(topic=topic, partitions=partitions))
        return int(reply.partitions)

    async def delete_topic(self, topic: str, force: bool = False, *, keep_schema: bool = False) -> None:
        """Delete a topic and its data; refused while clients are connected unless `force`. Its
        schemas go too unless `keep_schema` (a topic made again under the name then has them)."""
        await self._call("DeleteTopic", admin_pb2.DeleteTopicRequest(topic=topic, force=force, keep_schema=keep_schema))

    async def topic_stats(self, topic: str) -> admin_pb2.TopicStats:
        reply: admin_pb2.TopicStats = await self._call("GetTopicStats", admin_pb2.TopicStatsRequest(topic=topic))
        return reply

    async def internal_stats(self, topic: str) -> admin_pb2.InternalStats:
        reply: admin_pb2.InternalStats = await self._call("GetInternalStats", admin_pb2.TopicRequest(topic=topic))
        return reply

    async def unload_topic(self, topic: str) -> None:
        await self._call("UnloadTopic", admin_pb2.UnloadTopicRequest(topic=topic))

    async def terminate_topic(self, topic: str) -> common_pb2.Position:
        """No more writes; returns the position of the topic's last entry."""
        reply = await self._call("TerminateTopic", admin_pb2.TopicRequest(topic=topic))
        last: common_pb2.Position = reply.last
        return last

    async def compact_topic(self, topic: str) -> None:
        """Start compacting the topic (each partition of a partitioned topic) on its owner;
        AlreadyExistsError (CompactionInProgressError's kind) while a compaction of it runs."""
        await self._call("CompactTopic", admin_pb2.TopicRequest(topic=topic))

    async def compaction_status(self, topic: str) -> admin_pb2.CompactionStatus:
        """The topic's (a partition's) compaction: NOT_RUN, RUNNING, SUCCESS or ERROR with its error."""
        reply: admin_pb2.CompactionStatus = await self._call("GetCompactionStatus", admin_pb2.TopicRequest(topic=topic))
        return reply

    async def topic_policies(self, topic: str) -> admin_pb2.Policies:
        """The topic's own policy overrides."""
        reply: admin_pb2.Policies = await self._call("GetTopicPolicies", admin_pb2.TopicRequest(topic=topic))
        return reply

    async def effective_policies(self, topic: str) -> admin_pb2.Policies:
        """The policies in force on the topic: topic > namespace > broker defaults."""
        reply: admin_pb2.Policies = await self._call("GetEffectivePolicies", admin_pb2.TopicRequest(topic=topic))
        return reply

    async def set_topic_policies(
        self, topic: str, policies: admin_pb2.Policies | None = None, clear: Iterable[str] = (),
    ) -> admin_pb2.Policies:
        request = admin_pb2.SetPoliciesRequest(topic=topic, policies=policies, clear=list(clear))
        reply: admin_pb2.Policies = await self._call("SetTopicPolicies", request)
        return reply

    # ---- subscriptions ----

    async def list_subscriptions(self, topic: str) -> list[str]:
        reply = await self._call("ListSubscriptions", admin_pb2.TopicRequest(topic=topic))
        return list(reply.subscriptions)

    async def create_subscription(
        self, topic: str, subscription: str, start: InitialPosition | Position = InitialPosition.Latest,
    ) -> None:
        """A durable subscription starting at the earliest or latest message, or at a position."""
        request = admin_pb2.CreateSubscriptionRequest(topic=topic, subscription=subscription)
        if isinstance(start, InitialPosition):
            request.edge = start.value
        else:
            request.position.CopyFrom(_position(start))
        await self._call("CreateSubscription", request)

    async def delete_subscription(self, topic: str, subscription: str, force: bool = False) -> None:
        """Unsubscribe; refused while consumers are connected unless `force` (they are disconnected)."""
        await self._call("DeleteSubscription", admin_pb2.DeleteSubscriptionRequest(
            topic=topic, subscription=subscription, force=force))

    async def dead_letter_policy(self, topic: str, subscription: str) -> broker_pb2.DeadLetterPolicy:
        """The dead-letter policy kept for a subscription (max_redeliver_count 0: none)."""
        reply: broker_pb2.DeadLetterPolicy = await self._call(
            "GetSubscriptionDeadLetterPolicy", admin_pb2.SubscriptionRequest(topic=topic, subscription=subscription))
        return reply

    async def set_dead_letter_policy(
        self, topic: str, subscription: str, max_redeliver_count: int,
        dead_letter_topic: str = "", retry_letter_topic: str = "",
    ) -> broker_pb2.DeadLetterPolicy:
        """Keep a dead-letter policy for a subscription: it applies to every consumer, over the
        policy clients send; max_redeliver_count 0 removes it. "" topics: the default names."""
        request = admin_pb2.SetSubscriptionDeadLetterPolicyRequest(
            topic=topic, subscription=subscription, policy=broker_pb2.DeadLetterPolicy(
                max_redeliver_count=max_redeliver_count, dead_letter_topic=dead_letter_topic,
                retry_letter_topic=retry_letter_topic))
        reply: broker_pb2.DeadLetterPolicy = await self._call("SetSubscriptionDeadLetterPolicy", request)
        return reply

    async def reset_cursor(
        self, topic: str, subscription: str, *, position: Position | None = None,
        publish_time: int | datetime.datetime | None = None, edge: InitialPosition | None = None,
    ) -> None:
        """Move the subscription to a position, to the first message published at or after a
        time (unix ms, or an aware datetime), or to the earliest / latest message: exactly one."""
        given = [name for name, value in (("position", position), ("publish_time", publish_time), ("edge", edge))
                 if value is not None]
        if len(given) != 1:
            raise InvalidArgumentError(
                f"reset_cursor needs exactly one of position, publish_time, edge; got {given or 'none'}")
        request = admin_pb2.ResetCursorRequest(topic=topic, subscription=subscription)
        if position is not None:
            request.position.CopyFrom(_position(position))
        elif publish_time is not None:
            request.publish_time = _millis(publish_time)
        elif edge is not None:
            request.edge = edge.value
        await self._call("ResetCursor", request)

    async def skip_messages(self, topic: str, subscription: str, count: int | None = None) -> int:
        """Skip `count` entries from the oldest unacknowledged (None: the whole backlog); returns how
        many were skipped."""
        if count is not None and count < 1:
            raise InvalidArgumentError(f"skip count must be at least 1 (or None for all), got {count}")
        request = admin_pb2.SkipMessagesRequest(topic=topic, subscription=subscription, count=count or 0,
                                                all=count is None)
        reply = await self._call("SkipMessages", request)
        return int(reply.skipped)

    async def peek_messages(self, topic: str, subscription: str, count: int = 1) -> list[broker_pb2.DeliveredEntry]:
        """The first `count` unacknowledged entries, left unacknowledged; decode them with
        herald.common.codec.entry."""
        if count < 1:
            raise InvalidArgumentError(f"peek count must be at least 1, got {count}")
        reply = await self._call(
            "PeekMessages", admin_pb2.PeekMessagesRequest(topic=topic, subscription=subscription, count=count))
        return list(reply.entries)

    async def expire_messages(self, topic: str, subscription: str | None, expire_time_seconds: int) -> int:
        """Acknowledge the messages published more than `expire_time_seconds` ago on `subscription`
        (None: every subscription of the topic); returns how many expired. NotFoundError for a topic
        or subscription that does not exist."""
        if expire_time_seconds < 0:
            raise InvalidArgumentError(f"expire time must be 0 seconds or more, got {expire_time_seconds}")
        request = admin_pb2.ExpireMessagesRequest(topic=topic, subscription=subscription or "",
                                                  expire_time_seconds=expire_time_seconds,
                                                  all_subscriptions=subscription is None)
        reply = await self._call("ExpireMessages", request)
        return int(reply.expired)

    async def get_message_by_id(self, topic: str, position: Position) -> broker_pb2.DeliveredEntry:
        """The entry at `position` (ledger id, entry id) of a topic or partition, as stored: decode it
        with herald.common.codec.entry. NotFoundError when there is none."""
        request = admin_pb2.GetMessageByIdRequest(topic=topic, position=_position(position))
        reply: broker_pb2.DeliveredEntry = await self._call("GetMessageById", request)
        return reply

    async def examine_message(self, topic: str, offset: int = 1, *, latest: bool = False) -> broker_pb2.DeliveredEntry:
        """The entry `offset` entries from the earliest (1: the first) or, with `latest`, from the
        latest (1: the last) entry the topic keeps; NotFoundError past them."""
        if offset < 1:
            raise InvalidArgumentError(f"offset must be at least 1, got {offset}")
        request = admin_pb2.ExamineMessageRequest(topic=topic, offset=offset, latest=latest)
        reply: broker_pb2.DeliveredEntry = await self._call("ExamineMessage", request)
        return reply

    # ---- schemas ----

    async def get_schema(self, topic: str, version: int | None = None) -> tuple[int, SchemaInfo]:
        """A version of the topic's schema (None: the latest) and its number; NotFoundError when the
        topic has no such version."""
        reply = await self._call("GetSchema", broker_pb2.GetSchemaRequest(topic=topic, version=version))
        return int(reply.version), schema_from_proto(reply.schema)

    async def schema_versions(self, topic: str) -> list[tuple[int, SchemaInfo]]:
        """Every version of the topic's schema, oldest first."""
        reply = await self._call("ListSchemaVersions", admin_pb2.TopicRequest(topic=topic))
        return [(int(each.version), schema_from_proto(each.schema)) for each in reply.versions]

    async def upload_schema(self, topic: str, schema: SchemaInfo) -> int:
        """Give the topic a new schema version (checked by its compatibility strategy:
        IncompatibleSchemaError with the reason when refused); returns the version."""
        reply = await self._call("UploadSchema", _upload(topic, schema))
        return int(reply.version)

    async def delete_schema(self, topic: str) -> int | None:
        """Delete every version of the topic's schema; returns the last one (None: it had none).
        Versions made later carry on from it (never reused)."""
        reply = await self._call("DeleteSchema", admin_pb2.TopicRequest(topic=topic))
        return int(reply.version) if reply.HasField("version") else None

    async def test_schema_compatibility(self, topic: str, schema: SchemaInfo) -> str | None:
        """Whether upload_schema would accept `schema`: None if so, else why not. Nothing is stored."""
        reply = await self._call("TestSchemaCompatibility", _upload(topic, schema))
        return None if reply.compatible else str(reply.reason)

    # ---- brokers ----

    async def list_brokers(self) -> list[lookup_pb2.BrokerInfo]:
        reply = await self._call("ListBrokers", admin_pb2.ListBrokersRequest())
        return list(reply.brokers)

    # ---- storage nodes ----

    async def list_storage_nodes(self) -> list[admin_pb2.StorageNodeInfo]:
        """The storage nodes (registered, or named by a ledger) and the ledgers each must keep."""
        reply = await self._call("ListStorageNodes", admin_pb2.ListStorageNodesRequest())
        return list(reply.nodes)

    async def drain_storage_node(self, address: str, *, undo: bool = False) -> admin_pb2.StorageNodeInfo:
        """Mark a storage node draining (autorecovery copies its entries elsewhere), or available with undo."""
        reply: admin_pb2.StorageNodeInfo = await self._call(
            "DrainStorageNode", admin_pb2.DrainStorageNodeRequest(address=address, undo=undo))
        return reply


class SyncAdminClient:
    """AdminClient's blocking facade: each method runs the async one to completion on a private
    event loop (admin calls are few: one loop, no thread).

        with SyncAdminClient("herald://localhost:6660") as admin:
            print(admin.list_tenants())
    """

    def __init__(self, url: str = DEFAULT_ADMIN_URL, *, timeout: float = 30.0, auth: Authentication | None = None,
                 tls_trust_certs_file_path: str | None = None, tls_certificate_file_path: str | None = None,
                 tls_private_key_file_path: str | None = None) -> None:
        self._runner = asyncio.Runner()
        self._client = AdminClient(url, timeout=timeout, auth=auth, tls_trust_certs_file_path=tls_trust_certs_file_path,
                                   tls_certificate_file_path=tls_certificate_file_path,
                                   tls_private_key_file_path=tls_private_key_file_path)

    def __enter__(self) -> SyncAdminClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._runner.run(self._client.close())
        finally:
            self._runner.close()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)
        if not callable(method) or name.startswith("_") or name == "close":
            raise AttributeError(name)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._run(method(*args, **kwargs))

        blocking.__doc__ = method.__doc__
        return blocking

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)
