"""AdminService's calls that look into a topic without changing what it holds, and the admin's
expiry: LookupTopic (which broker owns the topic, or each partition), GetMessageById and
ExamineMessage (one stored entry, by position or by offset: broker.core.message_lookup) and
ExpireMessages (broker.core.expiry). Each acts on an existing topic only (NOT_FOUND otherwise, nothing
created); authorization is the other topic calls' (every request names its topic: authorization.py).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio

from herald.api.v1 import admin_pb2, broker_pb2, lookup_pb2
from herald.broker.core.ledger_list import Position
from herald.broker.core.service import BrokerService
from herald.broker.grpc.admin_forwarding import DEFAULT_TIMEOUT, AdminForwarder
from herald.common.bounded import map_bounded
from herald.common.codec.names import TopicName
from herald.common.errors import InvalidArgumentError, ServiceNotReadyError
from herald.common.transport.rpc import error_from_rpc

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")


class InspectionAdmin(abc.ABC):
    """The lookup, message and expiry calls of AdminServicer (a mixin: it provides `service`,
    `forwarder`, `_answer`, `_topic_call`, `_subscription_call` and `_partitions_of`)."""

    service: BrokerService
    forwarder: AdminForwarder

    @abc.abstractmethod
    async def _answer(self, context: Context, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run `call` as the admin operation `operation`, its errors answered on `context`."""

    @abc.abstractmethod
    async def _topic_call(
        self, context: Context, method: str, request: Any, topic: str, local: Callable[[], Awaitable[T]],
    ) -> T:
        """`local()` on the topic's owner (forwarded there when it is not this broker)."""

    @abc.abstractmethod
    async def _subscription_call(
        self, context: Context, method: str, request: Any, local: Callable[[str], Awaitable[T]],
    ) -> list[T]:
        """A call on the request's topic, or on each of its partitions."""

    @abc.abstractmethod
    async def _partitions_of(self, topic: str) -> int:
        """How many partitions `topic` has when it is a partitioned topic's base name; else 0."""

    async def LookupTopic(self, request: admin_pb2.TopicRequest, context: Context) -> admin_pb2.TopicOwnersResponse:
        async def owners() -> list[admin_pb2.TopicOwner]:
            name = await self.service.check_topic_exists(request.topic)
            partitions = await self._partitions_of(str(name))
            names = [str(name.partition(i)) for i in range(partitions)] if partitions else [str(name)]
            timeout = context.time_remaining() or DEFAULT_TIMEOUT
            return await map_bounded(lambda topic: self._owner(topic, timeout), names)

        return admin_pb2.TopicOwnersResponse(owners=await self._answer(context, "LookupTopic", owners))

    async def _owner(self, topic: str, timeout: float) -> admin_pb2.TopicOwner:  # noqa: ASYNC109 - a gRPC deadline
        try:
            reply = await self.forwarder.lookup().LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic),
                                                              timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"looking up the owner of {topic}") from None
        if not reply.broker_address:
            raise ServiceNotReadyError(f"lookup named no owner for {topic}: no broker is live, retry")
        return admin_pb2.TopicOwner(topic=topic, broker_address=reply.broker_address, broker_id=reply.broker_id)

    async def _one_topic(self, topic: str, what: str) -> None:
        """InvalidArgumentError for a partitioned topic's base name: its entries live in its partitions."""
        partitions = await self._partitions_of(topic)
        if partitions:
            base = TopicName.parse(topic)
            raise InvalidArgumentError(f"{topic} is a partitioned topic: {what} in one of its partitions, "
                                       f"{base.partition(0)} to {base.partition(partitions - 1)}")

    async def GetMessageById(
        self, request: admin_pb2.GetMessageByIdRequest, context: Context,
    ) -> broker_pb2.DeliveredEntry:
        async def local() -> broker_pb2.DeliveredEntry:
            await self._one_topic(request.topic, "give the message id")
            at = Position(request.position.ledger_id, request.position.entry_id)
            data = await self.service.message_by_id(request.topic, at)
            return broker_pb2.DeliveredEntry(ledger_id=at.ledger_id, entry_id=at.entry_id, data=data)

        return await self._topic_call(context, "GetMessageById", request, request.topic, local)

    async def ExamineMessage(
        self, request: admin_pb2.ExamineMessageRequest, context: Context,
    ) -> broker_pb2.DeliveredEntry:
        async def local() -> broker_pb2.DeliveredEntry:
            await self._one_topic(request.topic, "examine a message")
            at, data = await self.service.examine_message(request.topic, request.offset or 1, latest=request.latest)
            return broker_pb2.DeliveredEntry(ledger_id=at.ledger_id, entry_id=at.entry_id, data=data)

        return await self._topic_call(context, "ExamineMessage", request, request.topic, local)

    async def ExpireMessages(
        self, request: admin_pb2.ExpireMessagesRequest, context: Context,
    ) -> admin_pb2.ExpireMessagesResponse:
        async def check() -> None:
            if bool(request.subscription) == request.all_subscriptions:
                raise InvalidArgumentError(
                    f"expire messages on {request.topic}: name a subscription or ask for all subscriptions (one)")

        await self._answer(context, "ExpireMessages", check)

        async def local(topic: str) -> admin_pb2.ExpireMessagesResponse:
            expired = await self.service.expire_messages(
                topic, request.subscription or None, int(request.expire_time_seconds))
            return admin_pb2.ExpireMessagesResponse(expired=expired)

        each = await self._subscription_call(context, "ExpireMessages", request, local)
        return admin_pb2.ExpireMessagesResponse(expired=sum(reply.expired for reply in each))
