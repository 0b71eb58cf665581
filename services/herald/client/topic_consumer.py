"""The asyncio consumer of one topic (or one partition): one Consume stream to the topic's broker.

Delivered entries are checked, decompressed, put back together when chunked (chunked_messages.py)
and unpacked into Messages on a local receive queue bounded by flow permits (SEEDS §3); receive()
takes from it without suspending when it holds messages, and a message_listener is fed from it by
a task of the consumer (message_listener.py); the queue and receive calls are ReceiveQueue's
(receive_queue.py). Acks are tracked per batch (acks.py), grouped with negative acks and sent
(ack_group.py), where the ack timeout (unacked_tracker.py) asks again for what stays unacked.
Seek and unsubscribe are answered on the stream; a seek makes the broker disconnect the
subscription's consumers, and this one drops what it holds and reconnects. On stream failure the
queue is dropped (the broker redelivers what was not acked) and the consumer reconnects."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc.aio

from herald.api.v1 import broker_pb2, broker_pb2_grpc
from herald.client.ack_group import AckGroup
from herald.client.acks import AckTracker
from herald.client.chunked_messages import ChunkedMessages
from herald.client.config import ClientConfig, ConsumerConfig, ConsumerType
from herald.client.connection import ConnectionPool, remaining, retrying
from herald.client.consumer import AsyncConsumer
from herald.client.consumer_commands import PendingCommands, seek_request
from herald.client.interceptors import run_hook
from herald.client.lookup import LookupService
from herald.client.message import EntryInfo, Message
from herald.client.message_listener import ListenerTask
from herald.client.receive_queue import ReceiveQueue
from herald.client.schema import BytesSchema, Schema
from herald.client.stats import ConsumerStats
from herald.client.stream import CLOSED, CLOSING, OPEN, BrokerStream
from herald.client.unacked_tracker import UnackedTracker
from herald.common import tracing
from herald.common.codec.compression import decompress
from herald.common.codec.entry import (
    ENTRY_FRAMING_ALLOWANCE,
    decode_entry,
    entry_permits,
    iter_records,
    permits_of,
    records_claimed,
)
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import (
    ConnectionError_,
    ConsumerClosedError,
    InvalidArgumentError,
    NotAllowedError,
)
from herald.common.transport.rpc import EOF, error_from_proto, error_from_rpc

if TYPE_CHECKING:
    from herald.api.v1.broker_pb2_grpc import BrokerServiceAsyncStub

log = logging.getLogger(__name__)

T = TypeVar("T")
ConsumeCall = grpc.aio.StreamStreamCall[broker_pb2.ConsumeRequest, broker_pb2.ConsumeResponse]
Position = tuple[int, int]


class TopicConsumer(
    ReceiveQueue[T], BrokerStream[broker_pb2.ConsumeRequest, broker_pb2.ConsumeResponse, None], AsyncConsumer[T],
):
    """Receives from one topic (or one partition) through one subscription. Made by
    `AsyncClient.subscribe`; its docstrings are AsyncConsumer's."""

    _role = "consumer"
    _stream_name = "the consume stream"
    _log = log
    _close_request = broker_pb2.ConsumeRequest(close=broker_pb2.CloseConsumer())

    def __init__(
        self, topic: str, config: ConsumerConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[TopicConsumer[Any]], None], schema: Schema[T] | None = None,
    ) -> None:
        BrokerStream.__init__(self, topic, config.consumer_name or "", client_config, pool, lookup)
        self._partition = TopicName.parse(topic).partition_index
        self._config = config
        self._on_closed = on_closed
        self._decode = None if schema is None or isinstance(schema, BytesSchema) else schema.decode
        self._interceptors = tuple(config.interceptors)
        self._unacked = UnackedTracker(config.ack_timeout, config.ack_timeout_tick) if config.ack_timeout else None
        listener = config.message_listener is not None
        # The receive queue: plain (its fast path) without a listener, interceptors or ack timeout.
        ReceiveQueue.__init__(self, config.receiver_queue_size, config.batch_receive_policy, listener,
                              plain=not listener and not self._interceptors and self._unacked is None)
        self._paused = False
        self._listener: ListenerTask | None = None
        # Acks, negative acks and chunks.
        self._tracker = AckTracker()
        self._acks = AckGroup(self, config, self._tracker, self._unacked, self._partition, self._send,
                              self._redeliver_all)
        self._chunks = ChunkedMessages(topic, self._partition, self._decode, config, self._tracker, self._acks,
                                       self._unacked)
        self._chunked = self._chunks.whole  # last chunk -> every chunk, of the messages made whole
        # The stream.
        self._outbox: deque[broker_pb2.ConsumeRequest] = deque()
        self._commands = PendingCommands(self._loop)  # seeks and unsubscribes awaiting answers
        self._seeking = False  # a seek succeeded: what the old stream still brings is from before it
        # Exclusive and Failover receive in position order except when the broker rewinds (a
        # redelivery): an entry at or before the last one means the queued ones after it come again.
        self._single_active = config.consumer_type in (ConsumerType.Exclusive, ConsumerType.Failover)
        self._last_ledger = self._last_entry = -1
        self._end_of_topic = False
        self._epoch = 0
        self._stats_timer: asyncio.TimerHandle | None = None
        # Counters (stats()): per call or per delivery, never per message on the hot path.
        self._received = self._received_bytes = self._nacks = self._reconnects = 0
        self.corrupt_entries = 0
        self._last_stats: tuple[ConsumerStats, float] | None = None
        # The most an entry's payload may decompress to: a message of max_message_size and its framing.
        self._max_payload = config.max_message_size + ENTRY_FRAMING_ALLOWANCE

    # ---- what it is ------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def subscription(self) -> str:
        return self._config.subscription_name

    @property
    def consumer_name(self) -> str:
        return self._name

    @property
    def consumer_type(self) -> ConsumerType:
        return self._config.consumer_type

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def closed(self) -> bool:
        return self._state is not OPEN

    @property
    def epoch(self) -> int:
        """Counts reconnects and seeks: messages fetched before either will not be wanted."""
        return self._epoch

    def has_reached_end_of_topic(self) -> bool:
        return self._end_of_topic

    def stats(self) -> ConsumerStats:
        return ConsumerStats(
            messages_received=self._received, bytes_received=self._received_bytes, acks_sent=self._acks.acks_sent,
            nacks_sent=self._nacks, receive_failures=self._receive_failures, ack_timeouts=self._acks.ack_timeouts,
            dropped_entries=self.corrupt_entries + self._chunks.dropped, queue_size=len(self._queue),
            reconnects=self._reconnects,
        )

    # ---- receiving (ReceiveQueue) -----------------------------------------------------------

    def _handed_out(self, message: Message[T]) -> Message[T]:
        """What happens to a message given to the application besides leaving the queue."""
        unacked = self._unacked
        if unacked is not None:
            entry = message._entry
            position = (entry.ledger_id, entry.entry_id)
            for tracked in self._chunked.get(position, (position,)):
                unacked.add(tracked)
        for interceptor in self._interceptors:
            message = run_hook(interceptor.before_consume, self, message, default=message)
        return message

    def _receiving(self) -> bool:
        return self._state is OPEN

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            if self._connected:  # else the permits owed go once connected (_on_connected)
                self._send_flow()

    def _send_flow(self) -> None:
        if self._paused:
            return  # owed until resume()
        permits, self._permits = self._permits, 0
        if self._connected and permits > 0:  # disconnected: the next stream starts with a full FLOW
            self._outbox.append(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=permits)))
            self._wake_writer()

    # ---- acknowledging -------------------------------------------------------------------------

    def acknowledge(self, message: Message[T] | MessageId) -> None:
        if self._state is not OPEN:
            self._refuse_ack(message)
        if isinstance(message, Message):
            entry = message._entry
            ledger_id, entry_id = entry.ledger_id, entry.entry_id
            done = self._tracker.acknowledge(ledger_id, entry_id, message.batch_index, entry.num_messages)
        elif isinstance(message, MessageId):
            ledger_id, entry_id = message.ledger_id, message.entry_id
            done = self._tracker.acknowledge(ledger_id, entry_id, message.batch_index)
        else:
            raise InvalidArgumentError(f"acknowledge takes a Message or MessageId, got {type(message).__name__}")
        if done:
            if self._chunked or self._unacked is not None:
                self._entry_acked((ledger_id, entry_id))
            self._acks.queued()
        if self._interceptors:
            self._acked_hooks(message)

    def acknowledge_cumulative(self, message: Message[T] | MessageId) -> None:
        self.check_cumulative_allowed()
        if self._state is not OPEN:
            self._refuse_ack(message)
        if isinstance(message, Message):
            entry = message._entry
            ledger_id, entry_id = entry.ledger_id, entry.entry_id
            done = self._tracker.acknowledge_cumulative(ledger_id, entry_id, message.batch_index, entry.num_messages)
        elif isinstance(message, MessageId):
            ledger_id, entry_id = message.ledger_id, message.entry_id
            done = self._tracker.acknowledge_cumulative(ledger_id, entry_id, message.batch_index)
        else:
            raise InvalidArgumentError(
                f"acknowledge_cumulative takes a Message or MessageId, got {type(message).__name__}")
        # A batch acked only up to this message still has its entry unacked.
        covered = (ledger_id, entry_id - 1 if self._tracker.has_unacked_messages(ledger_id, entry_id) else entry_id)
        if self._unacked is not None:
            self._unacked.remove_up_to(covered)
        if self._chunked:
            for last in [last for last in self._chunked if last <= covered]:
                del self._chunked[last]
        if done:
            self._acks.queued()
        if self._interceptors:
            self._acked_hooks(message)

    def _entry_acked(self, position: Position) -> None:
        """An entry is acked: so are the other chunks of a chunked message, and none is timed."""
        positions = self._chunked.pop(position, None) if self._chunked else None
        if positions is not None:
            for ledger_id, entry_id in positions[:-1]:
                self._tracker.acknowledge(ledger_id, entry_id, -1)
        if self._unacked is not None:
            for acked in positions or (position,):
                self._unacked.remove(acked)

    def _acked_hooks(self, message: Message[T] | MessageId, error: Exception | None = None) -> None:
        message_id = message.message_id if isinstance(message, Message) else message
        for interceptor in self._interceptors:
            run_hook(interceptor.on_acknowledge, self, message_id, error, default=None)

    def _refuse_ack(self, message: Message[T] | MessageId) -> None:
        error = ConsumerClosedError("consumer closed")
        if self._interceptors and isinstance(message, Message | MessageId):
            self._acked_hooks(message, error)
        raise error

    def negative_acknowledge(self, message: Message[T] | MessageId) -> None:
        if self._state is not OPEN:
            raise ConsumerClosedError("consumer closed")
        if isinstance(message, Message):
            message_id = message.message_id
        elif isinstance(message, MessageId):
            message_id = message
        else:
            raise InvalidArgumentError(
                f"negative_acknowledge takes a Message or MessageId, got {type(message).__name__}")
        position = (message_id.ledger_id, message_id.entry_id)
        positions = (self._chunked.pop(position, None) if self._chunked else None) or (position,)
        if self._unacked is not None:
            for nacked in positions:
                self._unacked.remove(nacked)
        self._nacks += 1
        self._acks.nack(message_id, positions)

    def redeliver_unacknowledged_messages(self) -> None:
        if self._state is not OPEN:
            raise ConsumerClosedError("consumer closed")
        self._acks.flush()  # acked before the request: not redelivered
        self._redeliver_all()

    async def reconsume_later(
        self, message: Message[T], delay: float | datetime.timedelta, properties: dict[str, str] | None = None,
    ) -> None:
        if not self._config.retry_enable:
            raise NotAllowedError(
                "reconsume_later needs retry_enable=True when subscribing (on a Shared or Key_Shared subscription)")
        # With retries on, AsyncClient.subscribe makes a MultiTopicConsumer (it reads the retry letter
        # topic too) and serves reconsume_later there; a TopicConsumer with retries is one of its parts.
        raise NotAllowedError("reconsume_later belongs to the consumer this partition's consumer is part of")

    def _redeliver_all(self) -> None:
        """Ask for everything unacknowledged again; what is queued here comes with it, so it goes
        (and its permits with it, as Pulsar's client does)."""
        dropped = len(self._queue)
        self._queue.clear()
        if self._unacked is not None:
            self._unacked.clear()
        self._chunks.forget_incomplete()
        self._send(broker_pb2.ConsumeRequest(redeliver=broker_pb2.RedeliverUnacknowledged()))
        self._taken(dropped)

    def _send(self, request: broker_pb2.ConsumeRequest) -> None:
        """Queue a request for the stream's writer (while disconnected: for the next stream)."""
        self._outbox.append(request)
        self._wake_writer()

    # ---- delivery (hot) -------------------------------------------------------------------------

    def _on_entries(self, entries: Iterable[broker_pb2.DeliveredEntry]) -> None:
        if self._state is not OPEN or self._seeking:
            return
        messages: list[Message[T]] = []
        skipped = size = 0
        single_active = self._single_active
        for delivered in entries:
            if single_active:
                ledger_id, entry_id = delivered.ledger_id, delivered.entry_id
                if ledger_id < self._last_ledger or (ledger_id == self._last_ledger and entry_id <= self._last_entry):
                    skipped += self._rewound((ledger_id, entry_id), messages)
                self._last_ledger, self._last_entry = ledger_id, entry_id
            size += len(delivered.data)
            try:
                batch = self._unpack(delivered)
            except Exception as exc:
                # Not delivered: it would only fail again. Its permits go back, so that entries
                # dropped so cannot stall the subscription.
                self.corrupt_entries += 1
                skipped += entry_permits(delivered.data)
                log.error("consumer %s on %s: dropped corrupt entry %d:%d: %s", self._name, self._topic,
                          delivered.ledger_id, delivered.entry_id, exc)
                continue
            messages += batch[0]
            skipped += batch[1]
        self._received += len(messages)
        self._received_bytes += size
        self._queue.extend(messages)
        # Permits the broker counted but nothing queued will give back (acked here already, chunks,
        # what an entry's metadata claims beyond its records; negative: it holds more than claimed).
        self._permits += skipped
        if self._waiters or self._batch_waiters:
            self._delivered()
        if self._permits >= self._flow_threshold:
            self._send_flow()

    def _unpack(self, delivered: broker_pb2.DeliveredEntry) -> tuple[list[Message[T]], int]:
        """An entry's messages, less those this consumer already acked (in a redelivered batch),
        and the permits to give back now: what the broker took for the entry less what is queued
        (each queued message gives its own back once taken). Everything is sized by the records
        the entry holds, never by the count its metadata claims."""
        metadata, payload = decode_entry(delivered.data)
        permits = permits_of(metadata, len(payload))
        if metadata.num_chunks:
            whole = self._chunks.unpack(delivered, metadata, payload)
            return whole, permits - len(whole)
        if metadata.compression:
            payload = memoryview(decompress(metadata.compression, payload, metadata.uncompressed_size,
                                            self._max_payload))
        records = list(iter_records(payload, records_claimed(metadata)))
        count = len(records)
        ledger_id, entry_id = delivered.ledger_id, delivered.entry_id
        info = EntryInfo(self._topic, ledger_id, entry_id, self._partition, metadata.producer_name,
                         metadata.publish_time, delivered.redelivery_count, count, self._decode)
        if self._traced:
            info.traceparent = delivered.traceparent  # the broker's deliver span
        first_sequence_id = metadata.sequence_id
        messages: list[Message[T]] = []
        append = messages.append
        if not metadata.batched:
            for value, key, event_time, sequence_id, properties in records:
                append(Message(value, key, properties or None, event_time,
                               first_sequence_id if sequence_id is None else sequence_id, -1, info))
            return messages, permits - count
        unacked = self._tracker.track(ledger_id, entry_id, count)
        full = unacked == (1 << count) - 1
        for index, (value, key, event_time, sequence_id, properties) in enumerate(records):
            if full or (unacked >> index) & 1:
                append(Message(value, key, properties or None, event_time,
                               first_sequence_id + index if sequence_id is None else sequence_id, index, info))
        return messages, permits - len(messages)

    def _rewound(self, position: Position, pending: list[Message[T]]) -> int:
        """The broker went back to `position` (a redelivery): drop what is held from there on, as
        it comes again. Returns how many were dropped (their permits go back)."""
        dropped = 0
        while pending and _position(pending[-1]) >= position:
            pending.pop()
            dropped += 1
        queue = self._queue
        while not pending and queue and _position(queue[-1]) >= position:
            queue.pop()
            dropped += 1
        return dropped

    # ---- moving and leaving the subscription ------------------------------------------------------

    async def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Move the subscription: to a MessageId (its entry: a batch is delivered from its first
        message; MessageId.earliest / .latest are the ends), or to the first message published at
        or after a time (unix milliseconds, or an aware datetime). The broker then disconnects the
        subscription's consumers; this one drops what it holds and reconnects, and its next
        messages are from the new position."""
        self._check_open()
        seek = seek_request(target)
        self._acks.flush()  # acks made before the seek are sent before it
        request_id, answer = self._commands.add("seek")
        seek.request_id = request_id
        self._send(broker_pb2.ConsumeRequest(seek=seek))
        await self._commands.wait(answer, self._client_config.operation_timeout,
                                  f"seeking {self.subscription!r} on {self._topic} to {target!r}")

    async def unsubscribe(self) -> None:
        self._check_open()
        request_id, answer = self._commands.add("unsubscribe")
        self._send(broker_pb2.ConsumeRequest(unsubscribe=broker_pb2.Unsubscribe(request_id=request_id)))
        await self._commands.wait(answer, self._client_config.operation_timeout,
                                  f"unsubscribing {self.subscription!r} from {self._topic}")
        await self._finish(graceful=False)

    def _on_result(self, result: broker_pb2.CommandResult) -> None:
        done = self._commands.answered(result)
        if done == "seek":
            # Everything held is from before the seek, and so is what the old stream still brings
            # until the broker ends it.
            self._seeking = True
            self._epoch += 1
            self._queue.clear()
            self._tracker.reset()
            if self._unacked is not None:
                self._unacked.clear()
            self._chunks.forget_incomplete()
            self._last_ledger = self._last_entry = -1
        elif done == "unsubscribe":
            self._state = CLOSING  # the broker ends the stream: no reconnecting
            self._fail_waiters(ConsumerClosedError("consumer closed: its subscription was deleted (unsubscribe)"))
            self._queue.clear()

    async def get_last_message_id(self) -> MessageId:
        self._check_open()
        last = (await self._last_message_id_reply()).last
        return MessageId(last.ledger_id, last.entry_id, last.partition, last.batch_index)

    async def _last_message_id_reply(self, subscription: str = "") -> broker_pb2.GetLastMessageIdResponse:
        """The broker's GetLastMessageId answer; with a subscription named, its mark-delete
        position too (a reader's has_message_available compares the two)."""
        what = f"getting the last message id of {self._topic}"
        request = broker_pb2.GetLastMessageIdRequest(topic=self._topic, subscription=subscription)

        async def attempt(deadline: float) -> broker_pb2.GetLastMessageIdResponse:
            address = await self._lookup.broker_for(self._topic)
            stub = broker_pb2_grpc.BrokerServiceStub(await self._pool.get(address))
            try:
                reply: broker_pb2.GetLastMessageIdResponse = await stub.GetLastMessageId(
                    request, timeout=remaining(deadline))
            except grpc.aio.AioRpcError as exc:
                raise error_from_rpc(exc, f"{what} at {address}") from None
            return reply

        return await retrying(what, self._client_config.operation_timeout, attempt)

    # ---- closing ----------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._state is not OPEN:
            return
        self._state = CLOSING
        error = ConsumerClosedError("consumer closed")
        self._fail_waiters(error)
        self._commands.fail(error)
        self._queue.clear()
        self._acks.stop(flush=True)
        # The writer sends the acks, then CloseConsumer, and half-closes; the broker ends the stream.
        await self._finish(graceful=True)

    async def _shutdown(self) -> None:
        if self._state is CLOSED:
            return
        self._state = CLOSING
        error = ConsumerClosedError("consumer closed")
        self._fail_waiters(error)
        self._commands.fail(error)
        self._queue.clear()
        await self._finish(graceful=False)

    async def _finish(self, graceful: bool) -> None:
        self._acks.stop(flush=False)
        self._chunks.stop()
        if self._stats_timer is not None:
            self._stats_timer.cancel()
        if self._listener is not None:
            await self._listener.stop()
        await self._stop_stream(graceful=graceful)
        self._state = CLOSED
        self._on_closed(self)

    def _check_open(self) -> None:
        if self._state is not OPEN:
            raise ConsumerClosedError("consumer closed")

    def __repr__(self) -> str:
        return (f"TopicConsumer(topic={self._topic!r}, subscription={self.subscription!r}, "
                f"state={self._state})")

    # ---- the connection (BrokerStream's hooks) -------------------------------------------------

    async def _start(self) -> None:
        call = await self._connect_first(f"subscribing {self.subscription!r} to {self._topic}")
        self._task = self._loop.create_task(self._run(call), name=f"herald-consumer-{self.subscription}")
        self._acks.start()
        if self._client_config.stats_interval > 0:
            self._last_stats = (self.stats(), self._loop.time())
            self._stats_timer = self._loop.call_later(self._client_config.stats_interval, self._log_stats)
        listener = self._config.message_listener
        if listener is not None:
            self._listener = ListenerTask(self, listener, self._next_for_listener,
                                          name=f"herald-listener-{self.subscription}")

    def _log_stats(self) -> None:
        self._stats_timer = self._loop.call_later(self._client_config.stats_interval, self._log_stats)
        now, current = self._loop.time(), self.stats()
        previous, since = self._last_stats or (None, now)
        log.info("consumer %s on %s (subscription %s): %s", self._name, self._topic, self.subscription,
                 current.interval_report(previous, now - since))
        self._last_stats = (current, now)

    def _open_call(self, stub: BrokerServiceAsyncStub) -> ConsumeCall:
        return stub.Consume(None, metadata=tracing.grpc_metadata())

    def _handshake_what(self, address: str) -> str:
        return f"subscribing {self.subscription!r} to {self._topic} at {address}"

    def _subscribe_request(self) -> broker_pb2.Subscribe:
        """What the handshake asks the broker for (a reader adds its start: reader.py)."""
        config = self._config
        subscribe = broker_pb2.Subscribe(
            topic=self._topic, subscription=config.subscription_name, type=config.consumer_type.value,
            initial_position=config.initial_position.value, consumer_name=self._name,
            priority_level=config.priority_level, properties=config.properties,
        )
        policy = config.dead_letter_policy
        if policy is not None:
            subscribe.dead_letter_policy.CopyFrom(broker_pb2.DeadLetterPolicy(
                max_redeliver_count=policy.max_redeliver_count, dead_letter_topic=policy.dead_letter_topic or "",
                retry_letter_topic=policy.retry_letter_topic or ""))
        return subscribe

    async def _handshake(self, call: ConsumeCall) -> None:
        config = self._config
        await call.write(broker_pb2.ConsumeRequest(subscribe=self._subscribe_request()))
        reply = await call.read()
        if reply is EOF:
            raise ConnectionError_(f"the broker ended the stream while subscribing to {self._topic}")
        assert isinstance(reply, broker_pb2.ConsumeResponse)
        kind = reply.WhichOneof("reply")
        if kind == "error":
            raise error_from_proto(reply.error)
        if kind != "subscribed":
            raise ConnectionError_(f"the broker answered a subscription with {kind!r}")
        self._name = reply.subscribed.consumer_name or self._name
        if self._paused:
            self._permits = config.receiver_queue_size  # owed until resume()
        else:
            await call.write(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=config.receiver_queue_size)))

    def _on_connected(self, accepted: None, first: bool) -> None:
        if self._permits and not self._paused:  # resumed during the handshake
            permits, self._permits = self._permits, 0
            self._outbox.appendleft(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=permits)))

    def _on_disconnected(self) -> None:
        # The broker redelivers everything unacked, so what is queued here would come twice.
        self._queue.clear()
        self._permits = 0
        self._epoch += 1
        self._reconnects += 1
        self._seeking = False
        self._last_ledger = self._last_entry = -1
        self._chunks.forget_incomplete()
        if self._unacked is not None:
            self._unacked.clear()
        # Acks, seeks and unsubscribes not written yet go on the next stream; a command written
        # and not answered is lost with this one.
        kept: deque[broker_pb2.ConsumeRequest] = deque()
        unsent: set[int] = set()
        for request in self._outbox:
            command = request.WhichOneof("command")
            if command == "ack":
                kept.append(request)
            elif command in ("seek", "unsubscribe"):
                kept.append(request)
                unsent.add(getattr(request, command).request_id)
        self._outbox = kept
        self._commands.fail(ConnectionError_("the connection to the broker was lost before it answered: try again"),
                            keep=unsent)

    def _next_request(self) -> broker_pb2.ConsumeRequest | None:
        outbox = self._outbox
        return outbox[0] if outbox else None

    def _request_written(self) -> None:
        self._outbox.popleft()  # only once written: an ack cut off here goes on the next stream

    def _on_reply(self, reply: broker_pb2.ConsumeResponse) -> None:
        kind = reply.WhichOneof("reply")
        if kind == "entries":
            self._on_entries(reply.entries.entries)
        elif kind == "result":
            self._on_result(reply.result)
        elif kind == "active_change":
            self._on_active_change(reply.active_change.is_active)
        elif kind == "end_of_topic":
            self._end_of_topic = True
        elif kind == "error":
            raise error_from_proto(reply.error)

    def _on_active_change(self, active: bool) -> None:
        listener = self._config.consumer_event_listener
        if listener is None:
            return
        try:
            if active:
                listener.became_active(self, self._partition)
            else:
                listener.became_inactive(self, self._partition)
        except Exception:
            log.exception("the consumer_event_listener of consumer %s on %s raised; ignored", self._name, self._topic)


def _position(message: Message[Any]) -> Position:
    entry = message._entry
    return entry.ledger_id, entry.entry_id
