"""The broker's side of a consumer: its flow permits, the deliveries waiting for the adapter to send
them, and the entries it has been sent but not acknowledged.

The dispatcher pushes deliveries only while the consumer has permits and buffer room, so the
buffer is bounded; the adapter (one per protocol) takes them with `next_deliveries()` and passes
the client's flow, ack, redeliver and close commands in. Nothing here knows the wire format.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from herald.broker.core import tracing as broker_tracing
from herald.broker.core.hash_ranges import KeySharedMeta
from herald.broker.core.ledger_list import Position
from herald.common import tracing
from herald.common.errors import ConsumerClosedError, InvalidArgumentError

# What one next_deliveries() call returns at most, unless the caller says otherwise.
DEFAULT_MAX_BATCH_ENTRIES = 1000
DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Delivery:
    ledger_id: int
    entry_id: int
    data: bytes
    redelivery_count: int
    span: Any = None  # its deliver span, when traced (herald.broker.core.tracing): ended once written
    # A batch some of whose messages were acknowledged by batch index: the bitmask of those still
    # to deliver (bit i: message i; a Pulsar front end sends it as MESSAGE.ack_set); None: all.
    ack_set: int | None = None

    @property
    def traceparent(self) -> str:
        """The deliver span's context for the consumer ("" when not traced)."""
        return tracing.traceparent(self.span) if self.span is not None else ""


@dataclass(frozen=True, slots=True)
class ActiveConsumerChanged:
    """Failover: the consumer became the active one, or stopped being it."""

    is_active: bool


@dataclass(frozen=True, slots=True)
class EndOfTopic:
    """The topic is terminated and everything in it was delivered and acknowledged."""


ConsumerEvent = ActiveConsumerChanged | EndOfTopic


class ConsumerHost(Protocol):
    """What a consumer needs of its subscription (stored or not): where its commands go, and the
    subscription's counters it adds its deliveries to."""

    topic_name: str
    name: str
    msg_out_counter: int
    bytes_out_counter: int

    def notify(self) -> None:
        """Permits or buffer room arrived."""

    def ack(self, consumer: Consumer, positions: list[Position], cumulative: bool,
            ack_sets: dict[Position, int] | None = None) -> None: ...
    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None: ...
    def negative_ack(self, consumer: Consumer, positions: list[Position], delay_ms: int) -> None: ...
    def remove_consumer(self, consumer: Consumer) -> None: ...


class Consumer:
    def __init__(
        self, subscription: ConsumerHost, consumer_id: int, name: str, priority_level: int, max_buffered: int,
    ) -> None:
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.name = name
        self.priority_level = priority_level
        self.properties: dict[str, str] = {}  # the application's, for stats
        self.permits = 0  # messages the client can still take (an entry counts its num_messages)
        self.closed = False
        self.close_reason = ""
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        # Dispatched and not acknowledged, in dispatch order: position -> messages in the entry.
        self.pending: OrderedDict[Position, int] = OrderedDict()
        self._buffer: deque[Delivery] = deque()  # dispatched, not yet taken by the adapter
        self._max_buffered = max(1, max_buffered)
        self._ready = asyncio.Event()
        # Made when first waited on (an asyncio.Event holds a deque, ~0.8 KiB: per consumer, it adds up).
        self._closed_event: asyncio.Event | None = None
        self._events: list[ConsumerEvent] = []  # for the client, beside deliveries (rare: a list)
        self._event_ready: asyncio.Event | None = None
        self._active = True  # False only for a Failover consumer that is not the active one
        self.key_shared: KeySharedMeta | None = None  # what a Key_Shared consumer asked for
        # Reads the topic's compacted view up to its horizon (broker.core.compacted_reads).
        self.read_compacted = False

    # ---- the adapter's side ----

    @property
    def topic(self) -> str:
        return self.subscription.topic_name

    def flow(self, permits: int) -> None:
        """The client can take `permits` more messages."""
        if permits < 0:
            raise InvalidArgumentError(f"flow permits must not be negative, got {permits}")
        self._check_open()
        self.permits += permits
        self.subscription.notify()

    async def next_deliveries(
        self, max_entries: int = DEFAULT_MAX_BATCH_ENTRIES, max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> list[Delivery]:
        """Wait for deliveries and take them (at least one; up to max_entries and, past the first,
        max_bytes). Raises ConsumerClosedError once the consumer is closed; `close_reason` says
        whether the client or the broker closed it."""
        while not self._buffer:
            self._check_open()
            self._ready.clear()
            await self._ready.wait()
        buffer = self._buffer
        taken = [buffer.popleft()]
        size = len(taken[0].data)
        while buffer and len(taken) < max_entries and size + len(buffer[0].data) <= max_bytes:
            item = buffer.popleft()
            size += len(item.data)
            taken.append(item)
        self.subscription.notify()  # buffer room for more
        return taken

    async def next_output(
        self, max_entries: int = DEFAULT_MAX_BATCH_ENTRIES, max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> list[Delivery] | ConsumerEvent:
        """For a front end that sends both from one task (one task per consumer, not one for each):
        the next event for the client or else the next deliveries, waiting for either.
        ConsumerClosedError as soon as the consumer is closed (what is buffered is not sent)."""
        while True:
            self._check_open()
            if self._events:
                return self._events.pop(0)
            if self._buffer:
                return await self.next_deliveries(max_entries, max_bytes)
            self._ready.clear()
            await self._ready.wait()

    async def next_event(self) -> ConsumerEvent:
        """Wait for the next event to tell the client; ConsumerClosedError once closed."""
        while not self._events:
            self._check_open()
            if self._event_ready is None:
                self._event_ready = asyncio.Event()
            self._event_ready.clear()
            await self._event_ready.wait()
        return self._events.pop(0)

    def ack(self, positions: Iterable[tuple[int, int]], cumulative: bool = False,
            ack_sets: dict[tuple[int, int], int] | None = None) -> None:
        """Acknowledge entries; cumulative: everything up to the (single) position given.
        `ack_sets`: for a position, a bitmask of its batch's messages still unacknowledged (Pulsar's
        ack_set): only the others are (a cumulative ack: every entry before it, and those).
        NotAllowedError for a cumulative ack on a Shared or Key_Shared subscription."""
        self._check_open()
        indexes = None if not ack_sets else {Position(*p): mask for p, mask in ack_sets.items()}
        self.subscription.ack(self, [Position(*p) for p in positions], cumulative, indexes)

    def redeliver(self, positions: Iterable[tuple[int, int]] | None = None) -> None:
        """Send again entries this consumer has not acknowledged (None: all of them)."""
        self._check_open()
        wanted = None if positions is None else [Position(*p) for p in positions]
        self.subscription.redeliver(self, wanted)

    def negative_ack(self, positions: Iterable[tuple[int, int]], delay_ms: int) -> None:
        """The client gave up on these entries: they are delivered again after delay_ms, counted
        as a redelivery (Exclusive and Failover: everything unacknowledged, as Pulsar's client
        does). Ignored where nothing is kept to deliver again (non-persistent topics)."""
        if delay_ms < 0:
            raise InvalidArgumentError(f"negative ack delay must not be negative, got {delay_ms} ms")
        self._check_open()
        self.subscription.negative_ack(self, [Position(*p) for p in positions], delay_ms)

    async def close(self) -> None:
        """Disconnect; what it had not acknowledged goes to other consumers. Idempotent."""
        if self.closed:
            return
        self.subscription.remove_consumer(self)
        self._mark_closed("closed by the client")

    def _check_open(self) -> None:
        if self.closed:
            raise ConsumerClosedError(f"consumer {self.name} on {self.topic} is closed ({self.close_reason})")

    def _mark_closed(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self.close_reason = reason
        self._ready.set()
        if self._event_ready is not None:
            self._event_ready.set()
        if self._closed_event is not None:
            self._closed_event.set()

    async def wait_closed(self) -> None:
        """Returns once the consumer is closed (by its client, or by the broker when the topic is
        unloaded): the adapter then ends the stream so the client reconnects."""
        if self.closed:
            return
        if self._closed_event is None:
            self._closed_event = asyncio.Event()
        await self._closed_event.wait()

    # ---- the dispatcher's side ----

    def notify_event(self, event: ConsumerEvent) -> None:
        """Queue an event for the client (sent in order, between deliveries)."""
        if isinstance(event, ActiveConsumerChanged):
            self._active = event.is_active
        self._events.append(event)
        if self._event_ready is not None:
            self._event_ready.set()
        self._ready.set()  # next_output waits on this one for both

    @property
    def is_active(self) -> bool:
        """True except for a Failover consumer that is not the active one."""
        return self._active

    @property
    def unacked_messages(self) -> int:
        """Messages dispatched to this consumer and not acknowledged yet."""
        return sum(self.pending.values())

    @property
    def buffer_room(self) -> int:
        return self._max_buffered - len(self._buffer)

    @property
    def can_receive(self) -> bool:
        return self.permits > 0 and len(self._buffer) < self._max_buffered and not self.closed

    def push(self, position: Position, data: bytes, num_messages: int, redelivery_count: int,
             span: Any = None, ack_set: int | None = None) -> None:
        self._buffer.append(Delivery(position.ledger_id, position.entry_id, data, redelivery_count, span,
                                     ack_set))
        self.pending[position] = num_messages
        self.permits -= num_messages
        self.msg_out_counter += num_messages
        self.bytes_out_counter += len(data)
        self.subscription.msg_out_counter += num_messages
        self.subscription.bytes_out_counter += len(data)
        if len(self._buffer) == 1:
            self._ready.set()

    def take_back_undelivered(self) -> list[Position]:
        """Remove the deliveries the adapter has not taken yet, as if never sent: their permits
        come back and they are no longer pending here."""
        taken = []
        for item in self._buffer:
            position = Position(item.ledger_id, item.entry_id)
            count = self.pending.pop(position, 1)
            self.permits += count
            self.msg_out_counter -= count
            self.bytes_out_counter -= len(item.data)
            self.subscription.msg_out_counter -= count
            self.subscription.bytes_out_counter -= len(item.data)
            taken.append(position)
            if item.span is not None:
                broker_tracing.end_deliver(item.span, written=False)
        self._buffer.clear()
        return taken

    def buffered_positions(self) -> set[Position]:
        return {Position(item.ledger_id, item.entry_id) for item in self._buffer}
