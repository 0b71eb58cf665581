"""Forwarding of admin calls to a topic's owner: every broker serves the admin API, but a topic's
state lives on the broker that owns it. A broker that is not the owner asks lookup who is (lookup
assigns an owner when there is none) and makes the same call there, marked as forwarded in the
call's metadata so that it is forwarded at most once: the owner answers it itself, or says NOT_OWNER
(the topic moved meanwhile: the caller tries again)."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import grpc.aio

from herald.api.v1 import admin_pb2, admin_pb2_grpc, lookup_pb2, lookup_pb2_grpc
from herald.common.errors import ServiceNotReadyError
from herald.common.transport.rpc import channel_options, error_from_rpc
from herald.common.transport.tls import PLAINTEXT, Dialer

log = logging.getLogger(__name__)

# gRPC metadata key on a forwarded call; its value names the broker that forwarded it.
FORWARDED_BY = "herald-forwarded-by"
DEFAULT_TIMEOUT = 30.0


def is_forwarded(context: grpc.aio.ServicerContext[Any, Any]) -> bool:
    return any(key == FORWARDED_BY for key, _ in context.invocation_metadata() or ())


class AdminForwarder:
    """Channels to lookup and to other brokers' admin services, opened on first use."""

    def __init__(self, lookup_address: str, own_address: str, dialer: Dialer = PLAINTEXT) -> None:
        self.lookup_address = lookup_address
        self._dialer = dialer
        self.own_address = own_address
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._dialer.channel(address, channel_options())
        return channel

    def lookup(self) -> lookup_pb2_grpc.LookupServiceAsyncStub:
        if not self.lookup_address:
            raise ServiceNotReadyError("this broker has no lookup address configured: cannot find topic owners")
        return lookup_pb2_grpc.LookupServiceStub(self.channel(self.lookup_address))

    async def owner_of(self, topic: str, timeout: float) -> str:  # noqa: ASYNC109 - a gRPC deadline
        """The address of the topic's owner; lookup assigns one when the topic has none."""
        try:
            reply = await self.lookup().LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"looking up the owner of {topic} at {self.lookup_address}") from None
        if not reply.broker_address:
            raise ServiceNotReadyError(f"lookup named no owner for {topic}: no broker is live, retry")
        return str(reply.broker_address)

    async def forward(self, method: str, request: Any, topic: str, timeout: float | None) -> Any:  # noqa: ASYNC109
        """Make the admin call `method` (e.g. "GetTopicStats") on the owner of `topic`; its reply,
        or its error as a HeraldError."""
        timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        address = await self.owner_of(topic, timeout)
        log.debug("forwarding %s for %s to its owner %s", method, topic, address)
        stub = admin_pb2_grpc.AdminServiceStub(self.channel(address))
        try:
            return await getattr(stub, method)(
                request, timeout=timeout, metadata=((FORWARDED_BY, self.own_address),))
        except grpc.aio.AioRpcError as exc:
            error = error_from_rpc(exc, f"{method} forwarded to {address}, the owner of {topic}")
            raise error from None

    async def delete_topic(self, topic: str, force: bool) -> None:
        """Delete a topic on its owner (BrokerService.remote: a partitioned topic's partitions
        served by other brokers)."""
        await self.forward("DeleteTopic", admin_pb2.DeleteTopicRequest(topic=topic, force=force), topic, None)

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close(None)

