"""Topic lookups through the service URL: which broker owns a topic (following redirects), how
many partitions it has, and which topics a namespace holds (for pattern consumers). Unavailable
services are retried with backoff within the operation timeout; every other failure is reported
at once."""

from __future__ import annotations

import logging

import grpc
import grpc.aio

from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool, remaining, retrying
from herald.common import tracing
from herald.common.errors import HeraldError, ServiceNotReadyError
from herald.common.transport.rpc import error_from_rpc

log = logging.getLogger(__name__)

MAX_REDIRECTS = 20


class LookupService:
    """Asks the service URL (and the lookups it redirects to) about topics."""

    def __init__(self, pool: ConnectionPool, config: ClientConfig) -> None:
        self._pool = pool
        self._config = config
        self._service_address = config.url.address

    async def broker_for(self, topic: str) -> str:
        """The address (`host:port`) of the broker that owns `topic`."""
        return await retrying(
            f"lookup of topic {topic!r}", self._config.operation_timeout,
            lambda deadline: self._lookup_once(topic, deadline),
        )

    async def partitions(self, topic: str) -> int:
        """How many partitions `topic` has; 0 when it is not partitioned."""
        return await retrying(
            f"partition metadata of topic {topic!r}", self._config.operation_timeout,
            lambda deadline: self._partitions_once(topic, deadline),
        )

    async def topics_of_namespace(self, namespace: str, persistent: bool) -> list[str]:
        """The full names of the namespace's topics of one domain (`tenant/namespace`); partitioned
        topics by their base name. NotFoundError for an unknown tenant or namespace."""
        return await retrying(
            f"listing the topics of namespace {namespace!r}", self._config.operation_timeout,
            lambda deadline: self._topics_once(namespace, persistent, deadline),
        )

    async def _topics_once(self, namespace: str, persistent: bool, deadline: float) -> list[str]:
        address = self._service_address
        stub = lookup_pb2_grpc.LookupServiceStub(await self._pool.get(address))
        domain = lookup_pb2.PERSISTENT if persistent else lookup_pb2.NON_PERSISTENT
        try:
            reply = await stub.GetTopicsOfNamespace(
                lookup_pb2.TopicsOfNamespaceRequest(namespace=namespace, domain=domain), timeout=remaining(deadline),
                metadata=tracing.grpc_metadata())
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"listing the topics of namespace {namespace!r} at {address}") from None
        return list(reply.topics)

    async def _lookup_once(self, topic: str, deadline: float) -> str:
        address = self._service_address
        request = lookup_pb2.LookupTopicRequest(topic=topic)
        for _ in range(MAX_REDIRECTS + 1):
            stub = lookup_pb2_grpc.LookupServiceStub(await self._pool.get(address))
            try:
                reply = await stub.LookupTopic(request, timeout=remaining(deadline), metadata=tracing.grpc_metadata())
            except grpc.aio.AioRpcError as exc:
                raise error_from_rpc(exc, f"lookup of topic {topic!r} at {address}") from None
            if not reply.broker_address:
                raise ServiceNotReadyError(f"lookup of topic {topic!r} at {address} named no broker")
            if not reply.redirect:
                return reply.broker_address
            log.debug("lookup of %s redirected from %s to %s", topic, address, reply.broker_address)
            address = reply.broker_address
        raise HeraldError(f"lookup of topic {topic!r} was redirected more than {MAX_REDIRECTS} times")

    async def _partitions_once(self, topic: str, deadline: float) -> int:
        address = self._service_address
        stub = lookup_pb2_grpc.LookupServiceStub(await self._pool.get(address))
        try:
            reply = await stub.GetPartitionedTopicMetadata(
                lookup_pb2.PartitionedTopicMetadataRequest(topic=topic), timeout=remaining(deadline),
                metadata=tracing.grpc_metadata(),
            )
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"partition metadata of topic {topic!r} at {address}") from None
        return int(reply.partitions)

