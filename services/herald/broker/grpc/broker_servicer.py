"""The BrokerService gRPC servicer, a translation table: Produce and Consume stream messages into calls
on the core's sessions (herald.broker.core.producer_session, .consumer_session) and their results
into replies (schemas included: SchemaDefinition <-> SchemaInfo); Pull and GetLastMessageId into the
core's administration calls, GetSchema into the schema registry's (broker.core.schema_registry). Stream I/O is all it
owns: reading requests, one writer per stream, racing a read against the session's end.

The payload path: a SendEntry's bytes are read once (upb hands out a fresh copy at each access) and
passed by reference down to storage; deliveries are built in place in the reply
(`reply.entries.entries.add(...)`: one copy into the message, none through nested messages)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc
import grpc.aio

from herald.api.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from herald.broker.core.admission import Admission
from herald.broker.core.consumer import ActiveConsumerChanged, Delivery, EndOfTopic
from herald.broker.core.consumer_session import ConsumerSession, SubscribeRequest
from herald.broker.core.cursor import InitialPosition, PublishTime, ResetTarget
from herald.broker.core.ledger_list import Position
from herald.broker.core.producer_session import ProducerSession
from herald.broker.core.pull import PullResult
from herald.broker.core.service import BrokerService
from herald.common import errors, tracing
from herald.common.codec.schema_proto import schema_from_proto, schema_to_proto
from herald.common.security.authentication import current_role
from herald.common.tasks import cancel_and_wait, stream_task
from herald.common.transport.rpc import EOF, abort, error_to_proto
from herald.common.transport.tracing import handshake_span

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
# The methods whose requests carry message data (a producer's sends): limited by
# grpc_max_receive_message_bytes only; every other request by the per-method limit (1 MiB).
BULK_METHODS = ("/herald.v1.BrokerService/Produce",)
_EDGES = {broker_pb2.EARLIEST: InitialPosition.EARLIEST, broker_pb2.LATEST: InitialPosition.LATEST}


class _Replies:
    """Writes replies to one stream. A grpc.aio stream takes one write at a time, and receipts or
    deliveries (a task of their own) and errors (the reading task) may be written concurrently."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._lock = asyncio.Lock()

    async def write(self, reply: Any) -> None:
        async with self._lock:
            await self._context.write(reply)


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, service: BrokerService, admission: Admission | None = None) -> None:
        self.service = service
        self.admission = admission if admission is not None else Admission(service.settings)

    async def Produce(  # type: ignore[override]
        self, request_iterator: AsyncIterator[broker_pb2.ProduceRequest], context: Context
    ) -> None:
        replies = _Replies(context)
        first = await context.read()
        if first is EOF or not first.HasField("register"):
            await replies.write(_produce_error(errors.InvalidArgumentError(
                "a Produce stream must start with RegisterProducer")))
            return
        register = first.register
        session = ProducerSession(self.service, self.admission, current_role())
        try:
            with handshake_span(context, "herald.v1.BrokerService/Produce"):
                registered = await session.register(
                    register.topic, register.producer_name or None, register.properties,
                    schema=schema_from_proto(register.schema) if register.HasField("schema") else None)
        except errors.HeraldError as error:
            await replies.write(_produce_error(error))
            return
        try:
            await replies.write(broker_pb2.ProduceResponse(registered=broker_pb2.ProducerRegistered(
                producer_name=registered.producer_name, last_sequence_id=registered.last_sequence_id,
                max_message_size=registered.max_message_size, schema_version=registered.schema_version,
            )))
        except BaseException:  # the client vanished while registering: its producer must not linger
            await session.close(drain=False)
            raise
        writer = stream_task(_write_receipts(replies, session))
        closed = asyncio.create_task(session.wait_closed())
        reads = _Reads(context, closed, writer)
        client_finished = False
        try:
            while True:
                # At max_pending_sends sends without receipts, stop reading: the client's writes wait.
                request = None
                if session.has_room or await _unless(session.room(), writer):
                    request = await reads.next()
                if request is None:  # the broker closed the producer (unload, fenced ledger)
                    await replies.write(_produce_error(session.closed_error()))
                    break
                if request is EOF or request.HasField("close"):
                    client_finished = True
                    break
                if request.HasField("send"):
                    send = request.send
                    session.publish(send.sequence_id, send.highest_sequence_id, send.num_messages, send.entry,
                                    send.traceparent if tracing.ENABLED else "")
        finally:
            # A client that finished gets its outstanding receipts; one that vanished does not.
            closed.cancel()
            await session.close(drain=client_finished)
            if client_finished:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(writer), self.service.settings.receipt_drain_seconds)
            await cancel_and_wait(writer, swallow_errors=True)

    async def Consume(  # type: ignore[override]
        self, request_iterator: AsyncIterator[broker_pb2.ConsumeRequest], context: Context
    ) -> None:
        replies = _Replies(context)
        first = await context.read()
        if first is EOF or not first.HasField("subscribe"):
            await replies.write(_consume_error(errors.InvalidArgumentError(
                "a Consume stream must start with Subscribe")))
            return
        session = ConsumerSession(self.service, self.admission, current_role())
        try:
            with handshake_span(context, "herald.v1.BrokerService/Consume"):
                name = await session.subscribe(_subscribe_request(first.subscribe))
        except errors.HeraldError as error:
            await replies.write(_consume_error(error))
            return
        try:
            await replies.write(broker_pb2.ConsumeResponse(subscribed=broker_pb2.Subscribed(consumer_name=name)))
        except BaseException:  # the client vanished while subscribing: its consumer must not linger
            await session.close()
            raise
        # One task sends deliveries and events, and ends when the consumer is closed (one task per
        # consumer beside the stream's own: 100,000 consumers of partitions were 300,000 tasks).
        sender = stream_task(_send(replies, session))
        try:
            while True:
                request = await _unless(context.read(), sender)
                if request is None:  # closed by the broker (unload) or the sender failed
                    await replies.write(_consume_error(session.closed_error()))
                    break
                if request is EOF or request.HasField("close"):
                    break
                command = request.WhichOneof("command")
                if command in ("seek", "unsubscribe"):
                    if await _cursor_command(replies, session, request):
                        break  # unsubscribed: the stream ends
                    continue
                try:
                    _consumer_command(session, command, request)
                except errors.HeraldError as error:
                    await replies.write(_consume_error(error))
        finally:
            await cancel_and_wait(sender, swallow_errors=True)
            await session.close()

    async def Pull(self, request: broker_pb2.PullRequest, context: Context) -> broker_pb2.PullResponse:
        try:
            result = await self.service.pull(
                request.topic, request.partition, _position(request.start) if request.HasField("start") else None,
                request.max_entries, request.max_bytes, request.timeout_ms / 1000, request.subscription or None,
                read_compacted=request.read_compacted)
        except errors.HeraldError as error:
            await abort(context, error)
        return _pull_reply(result)

    async def GetLastMessageId(
        self, request: broker_pb2.GetLastMessageIdRequest, context: Context,
    ) -> broker_pb2.GetLastMessageIdResponse:
        try:
            last, mark_delete = await self.service.get_last_message_id(request.topic, request.subscription or None)
        except errors.HeraldError as error:
            await abort(context, error)
        reply = broker_pb2.GetLastMessageIdResponse(last=common_pb2.MessageIdData(
            ledger_id=last.ledger_id, entry_id=last.entry_id, partition=last.partition,
            batch_index=last.batch_index))
        if mark_delete is not None:
            reply.mark_delete.ledger_id, reply.mark_delete.entry_id = mark_delete
        return reply

    async def GetSchema(self, request: broker_pb2.GetSchemaRequest, context: Context) -> broker_pb2.GetSchemaResponse:
        try:
            version, schema = await self.service.schemas.get(
                request.topic, request.version if request.HasField("version") else None)
        except errors.HeraldError as error:
            await abort(context, error)
        reply = broker_pb2.GetSchemaResponse(version=version)
        schema_to_proto(schema, reply.schema)
        return reply


def _pull_reply(result: PullResult) -> broker_pb2.PullResponse:
    """The entries read, built in place: each entry's bytes are copied once, into the reply."""
    reply = broker_pb2.PullResponse(end_of_topic=result.end_of_topic)
    reply.next.ledger_id, reply.next.entry_id = result.next
    add = reply.entries.add
    for position, data in result.entries:
        add(ledger_id=position.ledger_id, entry_id=position.entry_id, data=data)
    return reply


# ---- Produce ----

async def _write_receipts(replies: _Replies, session: ProducerSession) -> None:
    while receipts := await session.receipts():
        for receipt in receipts:
            if receipt.error is not None:
                await replies.write(broker_pb2.ProduceResponse(send_error=broker_pb2.SendError(
                    sequence_id=receipt.sequence_id, error=error_to_proto(receipt.error))))
            else:
                await replies.write(broker_pb2.ProduceResponse(receipt=broker_pb2.SendReceipt(
                    sequence_id=receipt.sequence_id, highest_sequence_id=receipt.highest_sequence_id,
                    ledger_id=receipt.ledger_id, entry_id=receipt.entry_id)))


def _produce_error(error: errors.HeraldError) -> broker_pb2.ProduceResponse:
    return broker_pb2.ProduceResponse(error=error_to_proto(error))


# ---- Consume ----

def _subscribe_request(sub: broker_pb2.Subscribe) -> SubscribeRequest:
    policy = sub.dead_letter_policy
    return SubscribeRequest(
        topic=sub.topic, subscription=sub.subscription, sub_type=sub.type, initial_position=sub.initial_position,
        consumer_name=sub.consumer_name, priority_level=sub.priority_level, non_durable=sub.non_durable,
        start_position=_position(sub.start_position) if sub.HasField("start_position") else None,
        start_inclusive=sub.start_inclusive, properties=sub.properties,
        max_redeliver_count=policy.max_redeliver_count, dead_letter_topic=policy.dead_letter_topic,
        retry_letter_topic=policy.retry_letter_topic, read_compacted=sub.read_compacted,
        schema=schema_from_proto(sub.schema) if sub.HasField("schema") else None)


def _consumer_command(session: ConsumerSession, command: str | None, request: broker_pb2.ConsumeRequest) -> None:
    if command == "flow":
        session.flow(request.flow.permits)
    elif command == "ack":
        session.ack([(p.ledger_id, p.entry_id) for p in request.ack.positions], request.ack.cumulative)
    elif command == "redeliver":
        session.redeliver([(p.ledger_id, p.entry_id) for p in request.redeliver.positions] or None)
    elif command == "nack":
        session.negative_ack([(p.ledger_id, p.entry_id) for p in request.nack.positions], request.nack.delay_ms)
    elif command == "subscribe":
        raise errors.InvalidArgumentError("this stream already has a subscription")


async def _cursor_command(replies: _Replies, session: ConsumerSession, request: broker_pb2.ConsumeRequest) -> bool:
    """Seek or Unsubscribe, answered by a CommandResult; True when unsubscribed (the stream ends).
    A seek disconnects the subscription's consumers after this answer is written."""
    unsubscribing = request.HasField("unsubscribe")
    reply = broker_pb2.ConsumeResponse()
    result = reply.result
    if unsubscribing:
        result.request_id = request.unsubscribe.request_id
        error = await session.unsubscribe()
    else:
        result.request_id = request.seek.request_id
        try:
            target = _seek_target(request.seek)
        except errors.HeraldError as refused:
            error = refused
        else:
            error = await session.seek(target)
    if error is not None:
        result.error.CopyFrom(error_to_proto(error))
    await replies.write(reply)
    return unsubscribing and error is None


async def _send(replies: _Replies, session: ConsumerSession) -> None:
    """Deliveries and events, in the order the consumer has them, until it is closed."""
    while True:
        output = await session.next_output()
        if isinstance(output, list):
            await replies.write(_deliveries_reply(output))
            if tracing.ENABLED:
                session.delivered(output)
        elif isinstance(output, ActiveConsumerChanged):
            await replies.write(broker_pb2.ConsumeResponse(
                active_change=broker_pb2.ActiveConsumerChange(is_active=output.is_active)))
        elif isinstance(output, EndOfTopic):
            await replies.write(broker_pb2.ConsumeResponse(end_of_topic=broker_pb2.ReachedEndOfTopic()))


def _deliveries_reply(batch: list[Delivery]) -> broker_pb2.ConsumeResponse:
    """The deliveries, built in place: each entry's bytes are copied once, into the reply."""
    reply = broker_pb2.ConsumeResponse()
    add = reply.entries.entries.add
    for delivery in batch:
        entry = add(ledger_id=delivery.ledger_id, entry_id=delivery.entry_id, data=delivery.data,
                    redelivery_count=delivery.redelivery_count)
        if delivery.span is not None:
            entry.traceparent = delivery.traceparent
    return reply


def _seek_target(seek: broker_pb2.Seek) -> ResetTarget:
    target = seek.WhichOneof("target")
    if target == "position":
        return _position(seek.position)
    if target == "publish_time":
        return PublishTime(seek.publish_time)
    if target == "edge":
        if seek.edge not in _EDGES:
            raise errors.InvalidArgumentError(f"seek edge {seek.edge} is invalid: use EARLIEST or LATEST")
        return _EDGES[seek.edge]
    raise errors.InvalidArgumentError("Seek needs a target: a position, a publish time or an edge (EARLIEST/LATEST)")


def _consume_error(error: errors.HeraldError) -> broker_pb2.ConsumeResponse:
    return broker_pb2.ConsumeResponse(error=error_to_proto(error))


# ---- shared ----

def _position(position: common_pb2.Position) -> Position:
    return Position(position.ledger_id, position.entry_id)


class _Reads:
    """A stream's requests, read in the handler's own task, or None once one of the stoppers
    finished (a read under way is then cancelled, and what it got dropped, as _unless does). No task
    and no asyncio.wait per request: a Produce stream's every send is one read
    (bench/results/issue20_window_latency.md)."""

    def __init__(self, context: Context, *stoppers: asyncio.Task[Any]) -> None:
        self._context = context
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._reading = False
        self.stopped = False
        for stopper in stoppers:
            stopper.add_done_callback(self._stop)

    def _stop(self, _stopper: object) -> None:
        if not self.stopped:
            self.stopped = True
            if self._reading:
                self._task.cancel()

    async def next(self) -> Any:
        if self.stopped:
            return None
        self._reading = True
        try:
            return await self._context.read()
        except asyncio.CancelledError:
            # Ours (a stopper finished) unless someone else cancelled the handler too: then it ends.
            if self.stopped and self._task.uncancel() == 0:
                return None
            raise
        finally:
            self._reading = False


async def _unless(awaitable: Awaitable[Any], *stoppers: asyncio.Task[Any]) -> Any:
    """What `awaitable` gives, or None when one of the stoppers finished first (it is cancelled;
    what it got meanwhile is dropped, as a read on a stream being ended is)."""
    waiting = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({waiting, *stoppers}, return_when=asyncio.FIRST_COMPLETED)
    if waiting in done:
        return waiting.result()
    waiting.cancel()
    return None
