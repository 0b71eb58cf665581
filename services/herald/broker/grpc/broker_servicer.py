"""The BrokerService gRPC servicer: Produce and Consume streams and Pull calls translated into calls
on the gRPC-free core (herald.broker.core.service.BrokerService)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import grpc.aio
from opentelemetry import trace

from herald.api.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
)
from herald.broker.core import tracing as broker_tracing
from herald.broker.core.consumer import ActiveConsumerChanged, Consumer, EndOfTopic
from herald.broker.core.cursor import PublishTime, ResetTarget
from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.broker.core.managed_ledger import Position
from herald.broker.core.producer import Producer
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription import InitialPosition, Subscription, SubscriptionType
from herald.broker.grpc.authorization import check_dead_letter_topics
from herald.common import errors, tracing
from herald.common.codec.properties import check_properties
from herald.common.security.authentication import current_role
from herald.common.tasks import cancel_and_wait
from herald.common.transport.rpc import EOF, abort, error_to_proto
from herald.common.transport.tracing import handshake_span
from herald.metadata.authorization import CONSUME, PRODUCE, Authorizer

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
# The methods whose requests carry message data (a producer's sends): limited by
# grpc_max_receive_message_bytes only; every other request by the per-method limit (1 MiB).
BULK_METHODS = ("/herald.v1.BrokerService/Produce",)

_SUBSCRIPTION_TYPES = {
    broker_pb2.EXCLUSIVE: SubscriptionType.EXCLUSIVE,
    broker_pb2.SHARED: SubscriptionType.SHARED,
    broker_pb2.FAILOVER: SubscriptionType.FAILOVER,
    broker_pb2.KEY_SHARED: SubscriptionType.KEY_SHARED,
}
_POSITIONS = {broker_pb2.EARLIEST: InitialPosition.EARLIEST, broker_pb2.LATEST: InitialPosition.LATEST}


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
    def __init__(self, service: BrokerService, authorizer: Authorizer | None = None) -> None:
        self.service = service
        self.authorizer = authorizer  # None: authorization off

    def _check_properties(self, properties: Mapping[str, str], owner: str) -> None:
        """Kept in memory while the producer / consumer is connected: refused past the limits."""
        settings = self.service.settings
        check_properties(properties, owner, max_count=settings.max_properties,
                         max_bytes=settings.max_properties_bytes)

    async def Produce(  # type: ignore[override]
        self, request_iterator: AsyncIterator[broker_pb2.ProduceRequest], context: Context
    ) -> None:
        replies = _Replies(context)
        first = await context.read()
        if first is EOF or not first.HasField("register"):
            await replies.write(_produce_error(errors.InvalidArgumentError(
                "a Produce stream must start with RegisterProducer")))
            return
        try:
            if self.authorizer is not None:  # once per stream, before the producer exists
                await self.authorizer.check(current_role(), first.register.topic, PRODUCE)
            self._check_properties(first.register.properties, "a producer's")
            with handshake_span(context, "herald.v1.BrokerService/Produce"):
                producer, last_sequence_id = await self.service.create_producer(
                    first.register.topic, first.register.producer_name or None, dict(first.register.properties),
                )
        except Exception as exc:
            await replies.write(_produce_error(_as_herald_error(exc, "registering a producer")))
            return
        await replies.write(broker_pb2.ProduceResponse(registered=broker_pb2.ProducerRegistered(
            producer_name=producer.name, last_sequence_id=last_sequence_id,
            max_message_size=producer.topic.max_message_size,
        )))
        # Receipts go back in request order, so a writer task awaits the publishes one by one
        # while this task keeps reading: adds stay pipelined down to storage. At max_pending_sends
        # sends without receipts it stops reading (flow control: the client's writes wait).
        in_flight: asyncio.Queue[tuple[broker_pb2.SendEntry, asyncio.Future[tuple[int, int]]] | None] = (
            asyncio.Queue()
        )
        pending = asyncio.Semaphore(self.service.settings.max_pending_sends)
        writer = asyncio.create_task(self._write_receipts(replies, in_flight, pending))
        closed = asyncio.create_task(producer.wait_closed())
        client_finished = False
        try:
            while True:
                if pending.locked():
                    if self.service.metrics is not None:
                        self.service.metrics.throttled_sends.inc()
                    if not await _acquire_unless(pending, closed, writer):
                        request = None
                    else:
                        pending.release()  # taken again below, for a send
                        request = await _read_unless(context, closed, writer)
                else:
                    request = await _read_unless(context, closed, writer)
                if request is None:  # the broker closed the producer (unload, fenced ledger)
                    await replies.write(_produce_error(errors.ServiceNotReadyError(
                        f"producer {producer.name} was closed by the broker: reconnect")))
                    break
                if request is EOF or request.HasField("close"):
                    client_finished = True
                    break
                if request.HasField("send"):
                    send = request.send
                    await pending.acquire()  # free: nothing else takes permits
                    if tracing.ENABLED and send.traceparent:
                        publish = _traced_publish(producer, send)
                    else:
                        publish = asyncio.ensure_future(producer.topic.publish(
                            producer, send.sequence_id, send.highest_sequence_id, send.num_messages, send.entry
                        ))
                    await in_flight.put((send, publish))
        finally:
            # A client that finished gets its outstanding receipts; one that vanished does not.
            closed.cancel()
            await self.service.close_producer(producer)
            if client_finished:
                with contextlib.suppress(asyncio.QueueFull):
                    in_flight.put_nowait(None)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(writer), self.service.settings.receipt_drain_seconds)
            await cancel_and_wait(writer, swallow_errors=True)

    async def _write_receipts(
        self, replies: _Replies,
        in_flight: asyncio.Queue[tuple[broker_pb2.SendEntry, asyncio.Future[tuple[int, int]]] | None],
        pending: asyncio.Semaphore,
    ) -> None:
        while True:
            item = await in_flight.get()
            if item is None:
                return
            send, publish = item
            try:
                ledger_id, entry_id = await publish
            except errors.HeraldError as error:
                await replies.write(broker_pb2.ProduceResponse(
                    send_error=broker_pb2.SendError(sequence_id=send.sequence_id, error=error_to_proto(error))
                ))
                pending.release()
                continue
            await replies.write(broker_pb2.ProduceResponse(receipt=broker_pb2.SendReceipt(
                sequence_id=send.sequence_id, highest_sequence_id=send.highest_sequence_id,
                ledger_id=ledger_id, entry_id=entry_id,
            )))
            pending.release()

    async def Consume(  # type: ignore[override]
        self, request_iterator: AsyncIterator[broker_pb2.ConsumeRequest], context: Context
    ) -> None:
        replies = _Replies(context)
        first = await context.read()
        if first is EOF or not first.HasField("subscribe"):
            await replies.write(_consume_error(errors.InvalidArgumentError(
                "a Consume stream must start with Subscribe")))
            return
        sub = first.subscribe
        role = current_role() if self.authorizer is not None else None
        try:
            # The subscriber's letters move on its authority (the dlq-worker acts as its role).
            dead_letter_policy = DeadLetterPolicy.for_subscription(
                sub.topic, sub.subscription, sub.dead_letter_policy.max_redeliver_count,
                sub.dead_letter_policy.dead_letter_topic, sub.dead_letter_policy.retry_letter_topic, role or "")
        except errors.HeraldError as error:
            await replies.write(_consume_error(error))
            return
        try:
            if self.authorizer is not None:  # once per stream, before the subscription is touched
                await self.authorizer.check(role, sub.topic, CONSUME)
                if dead_letter_policy is not None:
                    await check_dead_letter_topics(self.authorizer, role, dead_letter_policy)
            self._check_properties(sub.properties, "a consumer's")
            sub_type, initial_position = _subscription_type(sub.type), _initial_position(sub.initial_position)
            with handshake_span(context, "herald.v1.BrokerService/Consume"):
                consumer = await self.service.subscribe(
                    sub.topic, sub.subscription, sub_type, initial_position,
                    sub.consumer_name or None, sub.priority_level,
                    non_durable=sub.non_durable,
                    start_position=_position(sub.start_position) if sub.HasField("start_position") else None,
                    start_inclusive=sub.start_inclusive, properties=dict(sub.properties),
                )
        except Exception as exc:
            await replies.write(_consume_error(_as_herald_error(exc, "subscribing")))
            return
        if isinstance(consumer.subscription, Subscription):
            # An admin's policy for the subscription, else the latest subscriber's.
            try:
                admin_policy = await self.service.admin_dead_letter_policy(sub.topic, sub.subscription)
            except errors.HeraldError as error:
                log.warning("subscription %s on %s: reading its dead-letter policy failed (%s): using the "
                            "subscriber's", sub.subscription, sub.topic, error)
                admin_policy = None
            consumer.subscription.set_dead_letter_policies(admin=admin_policy, subscriber=dead_letter_policy)
        await replies.write(broker_pb2.ConsumeResponse(
            subscribed=broker_pb2.Subscribed(consumer_name=consumer.name)
        ))
        sender = asyncio.create_task(self._deliver(replies, consumer))
        events = asyncio.create_task(self._tell_events(replies, consumer))
        closed = asyncio.create_task(consumer.wait_closed())
        try:
            while True:
                request = await _read_unless(context, closed, sender, events)
                if request is None:  # closed by the broker (unload) or the sender failed
                    await replies.write(_consume_error(errors.ServiceNotReadyError(
                        f"consumer {consumer.name} was closed by the broker: reconnect")))
                    break
                if request is EOF or request.HasField("close"):
                    break
                if request.HasField("seek") or request.HasField("unsubscribe"):
                    if await self._cursor_command(replies, consumer, request):
                        break  # unsubscribed: the stream ends
                    continue
                try:
                    self._handle_consumer_command(consumer, request)
                except errors.HeraldError as error:
                    await replies.write(_consume_error(error))
        finally:
            closed.cancel()
            await cancel_and_wait(sender, swallow_errors=True)
            await cancel_and_wait(events, swallow_errors=True)
            await consumer.close()

    @staticmethod
    def _handle_consumer_command(consumer: Consumer, request: broker_pb2.ConsumeRequest) -> None:
        command = request.WhichOneof("command")
        if command == "flow":
            consumer.flow(request.flow.permits)
        elif command == "ack":
            positions = [(p.ledger_id, p.entry_id) for p in request.ack.positions]
            consumer.ack(positions, request.ack.cumulative)
        elif command == "redeliver":
            wanted = [(p.ledger_id, p.entry_id) for p in request.redeliver.positions]
            consumer.redeliver(wanted or None)
        elif command == "nack":
            consumer.negative_ack([(p.ledger_id, p.entry_id) for p in request.nack.positions], request.nack.delay_ms)
        elif command == "subscribe":
            raise errors.InvalidArgumentError("this stream already has a subscription")

    async def _cursor_command(
        self, replies: _Replies, consumer: Consumer, request: broker_pb2.ConsumeRequest,
    ) -> bool:
        """Seek or Unsubscribe, answered by a CommandResult; True when unsubscribed (the stream
        ends). A seek disconnects the subscription's consumers after this answer is written."""
        unsubscribing = request.HasField("unsubscribe")
        request_id = request.unsubscribe.request_id if unsubscribing else request.seek.request_id
        try:
            if unsubscribing:
                await self.service.unsubscribe(consumer.topic, consumer.subscription.name, requester=consumer)
            else:
                await self.service.reset_cursor(consumer.topic, consumer.subscription.name,
                                                _seek_target(request.seek))
        except Exception as exc:
            error = _as_herald_error(exc, "unsubscribing" if unsubscribing else "seeking")
            await replies.write(broker_pb2.ConsumeResponse(result=broker_pb2.CommandResult(
                request_id=request_id, error=error_to_proto(error))))
            return False
        await replies.write(broker_pb2.ConsumeResponse(result=broker_pb2.CommandResult(request_id=request_id)))
        return unsubscribing

    async def Pull(self, request: broker_pb2.PullRequest, context: Context) -> broker_pb2.PullResponse:
        try:
            result = await self.service.pull(
                request.topic, request.partition, _position(request.start) if request.HasField("start") else None,
                request.max_entries, request.max_bytes, request.timeout_ms / 1000, request.subscription or None)
        except errors.HeraldError as error:
            await abort(context, error)
        return broker_pb2.PullResponse(
            entries=[broker_pb2.DeliveredEntry(ledger_id=p.ledger_id, entry_id=p.entry_id, data=data)
                     for p, data in result.entries],
            next=common_pb2.Position(ledger_id=result.next.ledger_id, entry_id=result.next.entry_id),
            end_of_topic=result.end_of_topic,
        )

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
            reply.mark_delete.CopyFrom(
                common_pb2.Position(ledger_id=mark_delete.ledger_id, entry_id=mark_delete.entry_id))
        return reply

    @staticmethod
    async def _deliver(replies: _Replies, consumer: Consumer) -> None:
        while True:
            deliveries = await consumer.next_deliveries()
            entries = [
                broker_pb2.DeliveredEntry(
                    ledger_id=d.ledger_id, entry_id=d.entry_id, data=d.data, redelivery_count=d.redelivery_count
                )
                for d in deliveries
            ]
            traced = tracing.ENABLED and _deliver_spans(deliveries, entries)
            await replies.write(broker_pb2.ConsumeResponse(entries=broker_pb2.EntryBatch(entries=entries)))
            if traced:
                for delivery in deliveries:
                    if delivery.span is not None:
                        broker_tracing.end_deliver(delivery.span)


    @staticmethod
    async def _tell_events(replies: _Replies, consumer: Consumer) -> None:
        while True:
            event = await consumer.next_event()
            if isinstance(event, ActiveConsumerChanged):
                await replies.write(broker_pb2.ConsumeResponse(
                    active_change=broker_pb2.ActiveConsumerChange(is_active=event.is_active)))
            elif isinstance(event, EndOfTopic):
                await replies.write(broker_pb2.ConsumeResponse(end_of_topic=broker_pb2.ReachedEndOfTopic()))


def _traced_publish(producer: Producer, send: broker_pb2.SendEntry) -> asyncio.Future[tuple[int, int]]:
    """topic.publish under a publish span, child of the client's send span (herald.broker.core.tracing)."""
    topic = producer.topic
    span = broker_tracing.start_publish(topic.name, producer.name, send.traceparent, send.sequence_id,
                                        send.num_messages, len(send.entry))
    if span is None:
        return asyncio.ensure_future(topic.publish(
            producer, send.sequence_id, send.highest_sequence_id, send.num_messages, send.entry))
    with trace.use_span(span):  # current while the add is queued: the storage add span is its child
        publish = asyncio.ensure_future(topic.publish(
            producer, send.sequence_id, send.highest_sequence_id, send.num_messages, send.entry))
    publish.add_done_callback(functools.partial(broker_tracing.end_publish, span))
    return publish


def _deliver_spans(deliveries: list[Any], entries: list[broker_pb2.DeliveredEntry]) -> bool:
    """Give each traced delivery its deliver span's context; whether there was any."""
    traced = False
    for delivery, entry in zip(deliveries, entries, strict=True):
        if delivery.span is not None:
            entry.traceparent = tracing.traceparent(delivery.span)
            traced = True
    return traced


async def _read_unless(context: Context, *stoppers: asyncio.Task[Any]) -> Any:
    """The stream's next request, or None when one of the stoppers finished first."""
    read = asyncio.ensure_future(context.read())
    done, _ = await asyncio.wait({read, *stoppers}, return_when=asyncio.FIRST_COMPLETED)
    if read in done:
        return read.result()
    read.cancel()
    return None


async def _acquire_unless(semaphore: asyncio.Semaphore, *stoppers: asyncio.Task[Any]) -> bool:
    """Take a permit of `semaphore` (True), or False when one of the stoppers finished first."""
    acquire = asyncio.ensure_future(semaphore.acquire())
    done, _ = await asyncio.wait({acquire, *stoppers}, return_when=asyncio.FIRST_COMPLETED)
    if acquire in done:
        return True
    acquire.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        if await acquire:  # took the permit as it was cancelled: give it back
            semaphore.release()
    return False


def _subscription_type(number: broker_pb2.SubscriptionType.ValueType) -> SubscriptionType:
    try:
        return _SUBSCRIPTION_TYPES[number]
    except KeyError:
        raise errors.InvalidArgumentError(
            f"subscription type {number} is invalid: use EXCLUSIVE, SHARED, FAILOVER or KEY_SHARED") from None


def _initial_position(number: broker_pb2.InitialPosition.ValueType) -> InitialPosition:
    try:
        return _POSITIONS[number]
    except KeyError:
        raise errors.InvalidArgumentError(f"initial position {number} is invalid: use EARLIEST or LATEST") from None


def _position(position: common_pb2.Position) -> Position:
    return Position(position.ledger_id, position.entry_id)


def _seek_target(seek: broker_pb2.Seek) -> ResetTarget:
    target = seek.WhichOneof("target")
    if target == "position":
        return _position(seek.position)
    if target == "publish_time":
        return PublishTime(seek.publish_time)
    if target == "edge":
        if seek.edge not in _POSITIONS:
            raise errors.InvalidArgumentError(f"seek edge {seek.edge} is invalid: use EARLIEST or LATEST")
        return _POSITIONS[seek.edge]
    raise errors.InvalidArgumentError("Seek needs a target: a position, a publish time or an edge (EARLIEST/LATEST)")


def _as_herald_error(exc: Exception, operation: str) -> errors.HeraldError:
    if isinstance(exc, errors.HeraldError):
        return exc
    log.exception("internal error while %s", operation)
    return errors.HeraldError(f"internal error while {operation}: {exc!r}")


def _produce_error(error: errors.HeraldError) -> broker_pb2.ProduceResponse:
    return broker_pb2.ProduceResponse(error=error_to_proto(error))


def _consume_error(error: errors.HeraldError) -> broker_pb2.ConsumeResponse:
    return broker_pb2.ConsumeResponse(error=error_to_proto(error))
