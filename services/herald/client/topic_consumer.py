"""The asyncio consumer: one Consume stream to the topic's broker. Delivered entries are checked
and unpacked into Messages on a local receive queue bounded by flow permits (SEEDS §3); receive()
takes from it without suspending when it holds messages; acks go through the AckTracker and are
flushed in groups. On stream failure the queue is dropped (the broker redelivers what was not
acked) and the consumer reconnects with backoff."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import grpc.aio

from herald.api.v1 import broker_pb2, common_pb2
from herald.client.acks import AckTracker
from herald.client.config import ClientConfig, ConsumerConfig, ConsumerType
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.message import EntryInfo, Message
from herald.client.stream import CLOSED, CLOSING, OPEN, BrokerStream
from herald.common.entry import decode_entry, iter_records
from herald.common.errors import (
    ConnectionError_,
    ConsumerClosedError,
    HeraldError,
    InvalidArgumentError,
    NotAllowedError,
    from_proto,
)
from herald.common.message_id import MessageId
from herald.common.names import TopicName
from herald.common.rpc import EOF

if TYPE_CHECKING:
    from herald.api.v1.broker_pb2_grpc import BrokerServiceAsyncStub

log = logging.getLogger(__name__)

ConsumeCall = grpc.aio.StreamStreamCall[broker_pb2.ConsumeRequest, broker_pb2.ConsumeResponse]

# Past this many acks waiting, flush without waiting for the group time.
MAX_GROUPED_ACKS = 1000


class TopicConsumer(BrokerStream[broker_pb2.ConsumeRequest, broker_pb2.ConsumeResponse, None]):
    """Receives from one topic through one subscription. Made by `AsyncClient.subscribe`."""

    _role = "consumer"
    _stream_name = "the consume stream"
    _log = log
    _close_request = broker_pb2.ConsumeRequest(close=broker_pb2.CloseConsumer())

    def __init__(
        self, topic: str, config: ConsumerConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[TopicConsumer], None],
    ) -> None:
        super().__init__(topic, config.consumer_name or "", client_config, pool, lookup)
        self._partition = TopicName.parse(topic).partition_index
        self._config = config
        self._on_closed = on_closed
        self._queue: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[Message | None]] = deque()
        self._permits = 0  # messages handed out since the last FLOW
        self._flow_threshold = max(1, config.receiver_queue_size // 2)
        self._tracker = AckTracker()
        self._ack_timer: asyncio.TimerHandle | None = None
        self._outbox: deque[broker_pb2.ConsumeRequest] = deque()
        self.epoch = 0  # counts reconnects: messages from an older epoch will be redelivered
        self.corrupt_entries = 0

    # ---- public API -------------------------------------------------------------------------

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
        """True once close() began: receive() and acknowledge() fail from then on."""
        return self._state is not OPEN

    async def receive(self, timeout: float | None = None) -> Message | None:  # noqa: ASYNC109
        """The next message; None if none arrives within `timeout` seconds (None: wait)."""
        queue = self._queue
        if queue:
            message = queue.popleft()
            self._permits += 1
            if self._permits >= self._flow_threshold:
                self._send_flow()
            return message
        if self._state is not OPEN:
            raise ConsumerClosedError("consumer closed")
        if timeout is not None and timeout <= 0:
            return None
        waiter: asyncio.Future[Message | None] = self._loop.create_future()
        self._waiters.append(waiter)
        timer = None if timeout is None else self._loop.call_later(timeout, self._expire, waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.cancelled() or not waiter.done():
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass
            elif waiter.exception() is None:
                # Handed a message in the same instant the caller gave up: keep it for the next.
                handed = waiter.result()
                if handed is not None:
                    self._queue.appendleft(handed)
                    self._permits -= 1
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _expire(self, waiter: asyncio.Future[Message | None]) -> None:
        if not waiter.done():
            self._waiters.remove(waiter)
            waiter.set_result(None)

    async def receive_many(self, limit: int, timeout: float | None = None) -> list[Message]:  # noqa: ASYNC109
        """Up to `limit` messages: those queued, or else the first to arrive within `timeout`
        (an empty list when none does). The sync facade's path, one loop round trip per call."""
        queue = self._queue
        messages: list[Message] = []
        if not queue:
            first = await self.receive(timeout)
            if first is None:
                return messages
            messages.append(first)
        count = min(limit - len(messages), len(queue))
        for _ in range(count):
            messages.append(queue.popleft())
        self._permits += count
        if self._permits >= self._flow_threshold:
            self._send_flow()
        return messages

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (sent to the broker in the next ack group)."""
        if self._state is not OPEN:
            raise ConsumerClosedError("consumer closed")
        if isinstance(message, Message):
            entry = message._entry
            done = self._tracker.acknowledge(entry.ledger_id, entry.entry_id, message.batch_index,
                                             entry.num_messages)
        elif isinstance(message, MessageId):
            done = self._tracker.acknowledge(message.ledger_id, message.entry_id, message.batch_index)
        else:
            raise InvalidArgumentError(f"acknowledge takes a Message or MessageId, got {type(message).__name__}")
        if done:
            self._acks_queued()

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge this message and every one before it (Exclusive and Failover only)."""
        self.check_cumulative_allowed()
        if self._state is not OPEN:
            raise ConsumerClosedError("consumer closed")
        if isinstance(message, Message):
            entry = message._entry
            done = self._tracker.acknowledge_cumulative(
                entry.ledger_id, entry.entry_id, message.batch_index, entry.num_messages)
        elif isinstance(message, MessageId):
            done = self._tracker.acknowledge_cumulative(message.ledger_id, message.entry_id,
                                                        message.batch_index)
        else:
            raise InvalidArgumentError(
                f"acknowledge_cumulative takes a Message or MessageId, got {type(message).__name__}")
        if done:
            self._acks_queued()

    def check_cumulative_allowed(self) -> None:
        kind = self._config.consumer_type
        if kind in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise NotAllowedError(
                f"cumulative acknowledgement is not allowed on a {kind.name} subscription "
                f"({self.subscription!r}): acknowledge messages one by one"
            )

    async def close(self) -> None:
        """Send the grouped acks, leave the subscription's consumers and close the stream;
        pending receive() calls fail with ConsumerClosedError. Closing twice does nothing."""
        if self._state is not OPEN:
            return
        self._state = CLOSING
        self._fail_waiters(ConsumerClosedError("consumer closed"))
        self._queue.clear()
        self._flush_acks()
        # The writer sends the acks, then CloseConsumer, and half-closes; the broker ends the stream.
        await self._stop_stream(graceful=True)
        self._state = CLOSED
        self._on_closed(self)

    async def _shutdown(self) -> None:
        """Close without telling the broker: for AsyncClient.shutdown()."""
        if self._state is CLOSED:
            return
        self._state = CLOSING
        self._fail_waiters(ConsumerClosedError("consumer closed"))
        self._queue.clear()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        await self._stop_stream(graceful=False)
        self._state = CLOSED
        self._on_closed(self)

    async def __aenter__(self) -> TopicConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (f"TopicConsumer(topic={self._topic!r}, subscription={self.subscription!r}, "
                f"state={self._state})")

    # ---- delivery (hot) ---------------------------------------------------------------------

    def _on_entries(self, entries: Iterable[broker_pb2.DeliveredEntry]) -> None:
        if self._state is not OPEN:
            return
        messages: list[Message] = []
        skipped = 0
        for delivered in entries:
            try:
                batch = self._unpack(delivered)
            except Exception as exc:
                # Not delivered: it would only fail again. The broker's permits for it are lost.
                self.corrupt_entries += 1
                log.error("consumer %s on %s: dropped corrupt entry %d:%d: %s", self._name, self._topic,
                          delivered.ledger_id, delivered.entry_id, exc)
                continue
            messages += batch[0]
            skipped += batch[1]
        self._queue.extend(messages)
        self._permits += skipped  # already acked here: the broker may send others in their place
        if self._waiters:
            self._dispatch()
        if self._permits >= self._flow_threshold:
            self._send_flow()

    def _unpack(self, delivered: broker_pb2.DeliveredEntry) -> tuple[list[Message], int]:
        """An entry's messages, less those this consumer already acked (in a redelivered batch)."""
        metadata, payload = decode_entry(delivered.data)
        ledger_id, entry_id = delivered.ledger_id, delivered.entry_id
        count = metadata.num_messages
        info = EntryInfo(self._topic, ledger_id, entry_id, self._partition, metadata.producer_name,
                         metadata.publish_time, delivered.redelivery_count, count)
        first_sequence_id = metadata.sequence_id
        messages: list[Message] = []
        append = messages.append
        if not metadata.batched:
            for value, key, event_time, sequence_id, properties in iter_records(payload):
                append(Message(value, key, properties or None, event_time,
                               first_sequence_id if sequence_id is None else sequence_id, -1, info))
            return messages, 0
        unacked = self._tracker.track(ledger_id, entry_id, count)
        full = unacked == (1 << count) - 1
        skipped = 0
        for index, (value, key, event_time, sequence_id, properties) in enumerate(iter_records(payload)):
            if full or (unacked >> index) & 1:
                append(Message(value, key, properties or None, event_time,
                               first_sequence_id + index if sequence_id is None else sequence_id, index, info))
            else:
                skipped += 1
        return messages, skipped

    def _dispatch(self) -> None:
        """Hand queued messages to waiting receive() calls, oldest first."""
        queue, waiters = self._queue, self._waiters
        while queue and waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(queue.popleft())
                self._permits += 1

    def _send_flow(self) -> None:
        permits, self._permits = self._permits, 0
        if self._connected:
            self._outbox.append(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=permits)))
            self._wake_writer()

    def _fail_waiters(self, error: HeraldError) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    # ---- acks -------------------------------------------------------------------------------

    def _acks_queued(self) -> None:
        group_time = self._config.ack_group_time
        if not group_time or len(self._tracker) >= MAX_GROUPED_ACKS:
            self._flush_acks()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(group_time, self._flush_acks)

    def _flush_acks(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if not len(self._tracker):
            return
        individual, cumulative = self._tracker.take()
        if cumulative is not None:
            self._outbox.append(broker_pb2.ConsumeRequest(ack=broker_pb2.Ack(
                positions=[common_pb2.Position(ledger_id=cumulative[0], entry_id=cumulative[1])],
                cumulative=True,
            )))
        if individual:
            self._outbox.append(broker_pb2.ConsumeRequest(ack=broker_pb2.Ack(positions=[
                common_pb2.Position(ledger_id=ledger_id, entry_id=entry_id) for ledger_id, entry_id in individual
            ])))
        # While disconnected they wait in the outbox for the next stream.
        self._wake_writer()

    # ---- the connection (BrokerStream's hooks) -----------------------------------------------

    async def _start(self) -> None:
        call = await self._connect_first(f"subscribing {self.subscription!r} to {self._topic}")
        self._task = self._loop.create_task(self._run(call), name=f"herald-consumer-{self.subscription}")

    def _open_call(self, stub: BrokerServiceAsyncStub) -> ConsumeCall:
        return stub.Consume(None)

    def _handshake_what(self, address: str) -> str:
        return f"subscribing {self.subscription!r} to {self._topic} at {address}"

    async def _handshake(self, call: ConsumeCall) -> None:
        config = self._config
        await call.write(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
            topic=self._topic, subscription=config.subscription_name, type=config.consumer_type.value,
            initial_position=config.initial_position.value, consumer_name=self._name,
            priority_level=config.priority_level,
        )))
        reply = await call.read()
        if reply is EOF:
            raise ConnectionError_(f"the broker ended the stream while subscribing to {self._topic}")
        assert isinstance(reply, broker_pb2.ConsumeResponse)
        kind = reply.WhichOneof("reply")
        if kind == "error":
            raise from_proto(reply.error)
        if kind != "subscribed":
            raise ConnectionError_(f"the broker answered a subscription with {kind!r}")
        self._name = reply.subscribed.consumer_name or self._name
        await call.write(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=config.receiver_queue_size)))

    def _on_disconnected(self) -> None:
        # The broker redelivers everything unacked, so what is queued here would come twice.
        self._queue.clear()
        self._permits = 0
        self.epoch += 1
        self._outbox = deque(request for request in self._outbox if request.HasField("ack"))

    def _next_request(self) -> broker_pb2.ConsumeRequest | None:
        outbox = self._outbox
        return outbox[0] if outbox else None

    def _request_written(self) -> None:
        self._outbox.popleft()  # only once written: an ack cut off here goes on the next stream

    def _on_reply(self, reply: broker_pb2.ConsumeResponse) -> None:
        kind = reply.WhichOneof("reply")
        if kind == "entries":
            self._on_entries(reply.entries.entries)
        elif kind == "error":
            raise from_proto(reply.error)
