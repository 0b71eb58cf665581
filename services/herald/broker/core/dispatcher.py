"""Dispatchers: read a subscription's entries from the managed ledger and hand them to its
consumers within their flow permits (Pulsar's PersistentDispatcher*).

One task per dispatcher reads ahead in chunks from the cursor's read position, woken when entries
are added (tailing), permits arrive, a consumer comes or goes, or a delayed entry falls due.
Entries put back for redelivery (a Shared consumer left, asked, or negatively acknowledged) wait in
a replay set and go first, lowest position first. Before an entry is handed to anyone it is
admitted: acknowledged ones are dropped, one whose redelivery count reached the subscription's
dead-letter limit goes to the dead-letter queue instead, and (Shared, Key_Shared) one whose
deliver-at time is ahead is held by the delayed-delivery tracker until due.

Each subscription type is a Dispatcher subclass: it decides who gets what, and what happens to a
leaving consumer's unacknowledged entries: broker.core.single_active (Exclusive, Failover: one active
consumer, rewinding the cursor to redeliver), broker.core.shared (Shared), broker.core.key_shared (Key_Shared).
A dispatcher sees its subscription through DispatchSource, the port it is built on.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from herald.broker.core import tracing as broker_tracing
from herald.broker.core.batch_acks import BatchAcks
from herald.broker.core.compacted_reads import CompactedSource, kept_messages, read_compacted
from herald.broker.core.consumer import Consumer
from herald.broker.core.cursor import ManagedCursor
from herald.broker.core.dead_letters import DeadLetterPolicy, DeadLetterQueue
from herald.broker.core.delayed_delivery import DelayedDeliveryTracker
from herald.broker.core.ledger_list import Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.broker.core.read_ahead import ReadAhead
from herald.broker.core.replay import ReplaySet
from herald.broker.settings import BrokerSettings
from herald.common import tracing
from herald.common.codec.entry import EntryMetadata, open_entry
from herald.common.errors import HeraldError
from herald.common.tasks import wait_event

log = logging.getLogger(__name__)


class DispatchSource(Protocol):
    """What a dispatcher needs of its subscription: where to read, what was redelivered how often,
    and where entries past the dead-letter limit go."""

    topic_name: str
    name: str
    cursor: ManagedCursor
    ledger: ManagedLedger
    redelivery_counts: dict[Position, int]
    batch_acks: BatchAcks  # messages of batches acknowledged by index: redelivered without them
    redelivered_counter: int
    dead_letter_policy: DeadLetterPolicy | None
    dead_letters: DeadLetterQueue | None
    durable: bool  # False: a reader's subscription, which acknowledges nothing

    @property
    def compaction(self) -> CompactedSource:
        """The topic's compacted view, for read_compacted consumers."""

    @property
    def dead_letter_count(self) -> int: ...
    def holds_dead_letter(self, position: Position) -> bool: ...
    def hand_to_dead_letters(self, position: Position, data: bytes, redelivery_count: int) -> None: ...


def now_ms() -> int:
    """Wall-clock unix milliseconds: deliver-at times are producers' wall-clock times."""
    return int(time.time() * 1000)


class ReadEntry:
    """An entry read for dispatch (either format: herald.common.codec.entry); its metadata is parsed
    once, when first needed."""

    __slots__ = ("_metadata", "_parsed", "_permits", "data", "kept", "position")

    def __init__(self, position: Position, data: bytes, kept: int | None = None) -> None:
        self.position = position
        self.data = data
        self.kept = kept  # a compacted view's batch: the messages it keeps (compacted_reads.kept_messages)
        self._metadata: EntryMetadata | None = None
        self._permits = 1
        self._parsed = False

    def _parse(self) -> None:
        self._parsed = True
        try:
            opened = open_entry(self.data, verify=False)
        except HeraldError:
            return  # no metadata: one message, no key, no delay
        self._metadata = opened.metadata
        self._permits = opened.permits

    @property
    def metadata(self) -> EntryMetadata | None:
        """None when the metadata cannot be read (such an entry counts one message, has no key
        and no delay)."""
        if not self._parsed:
            self._parse()
        return self._metadata

    @property
    def num_messages(self) -> int:
        """The permits it takes: its num_messages within what its format can hold (permits_of), so
        that a stored entry whose metadata lies cannot drive a consumer's permits far negative."""
        if not self._parsed:
            self._parse()
        return self._permits

    @property
    def deliver_at(self) -> int:
        metadata = self.metadata
        return metadata.deliver_at_time if metadata is not None else 0


Entries = list[ReadEntry]


class Dispatcher(abc.ABC):
    type_name = ""
    # Shared and Key_Shared hold entries until their deliver-at time; the others deliver at once.
    delays_delivery = False

    def __init__(self, subscription: DispatchSource, settings: BrokerSettings) -> None:
        self._sub = subscription
        self._cursor = subscription.cursor
        self._ledger = subscription.ledger
        self._settings = settings
        # Reads from the cursor: the cache at the tail, a bounded read-ahead for a backlog.
        self.read_ahead = ReadAhead.of(self._ledger, settings)
        self.consumers: list[Consumer] = []
        self._wakeup = asyncio.Event()
        # The read loop's task exists only while there is work (or a delayed entry to wait for):
        # an idle subscription holds no task (issue 20: 100,000 idle consumers, 100,000 tasks).
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        # Bumped when the cursor is rewound or reset: a read in flight from before is stale.
        self._epoch = 0
        self._replay = ReplaySet()
        self._delayed = DelayedDeliveryTracker()
        self._timers: set[asyncio.TimerHandle] = set()  # negative acks waiting for their delay
        # Messages per entry, averaged: permits count messages, reads count entries.
        self._messages_per_entry = 1.0

    # ---- lifecycle ----

    def start(self) -> None:
        self._started = True
        if self._wakeup.is_set():
            self._ensure_task()

    def _ensure_task(self) -> None:
        if self._task is None and self._started and not self._closed:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"dispatch {self._sub.topic_name} {self._sub.name}")

    @property
    def running(self) -> bool:
        """Whether the read loop's task exists (only while there is work)."""
        return self._task is not None

    async def close(self) -> None:
        self._closed = True
        self._cancel_timers()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.read_ahead.close()

    def notify(self) -> None:
        """Something changed (entries added, permits, consumers): look for work."""
        self._wakeup.set()
        self._ensure_task()

    def hash_ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]:
        """Key_Shared: the slices of the key hash range the consumer owns (for stats); [] elsewhere."""
        return []

    def reset(self) -> None:
        """Forget what is held for dispatch (the caller moves the cursor: a seek): the replay set,
        delayed entries, pending negative acks, the consumers' unacknowledged and not yet sent
        entries; a read in flight is discarded."""
        self._replay.clear()
        self._delayed.clear()
        self._cancel_timers()
        for consumer in self.consumers:
            consumer.take_back_undelivered()
            consumer.pending.clear()
        self._forget()
        self.read_ahead.clear()
        self._epoch += 1
        self.notify()

    def _forget(self) -> None:
        """Subclasses drop their own dispatch state on reset."""

    def acked(self) -> None:
        """Entries were acknowledged (the mark-delete position may have moved)."""

    # ---- consumers (per type) ----

    @abc.abstractmethod
    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer, or raise ConsumerBusyError."""

    @abc.abstractmethod
    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacknowledged entries must be delivered again."""

    @abc.abstractmethod
    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """The consumer wants these (None: all) unacknowledged entries again."""

    @abc.abstractmethod
    def negative_ack(self, consumer: Consumer, positions: list[Position], delay_ms: int) -> None:
        """The consumer gave up on these entries: deliver them again after delay_ms."""

    @abc.abstractmethod
    def _read_budget(self) -> int:
        """Entries worth reading now, given the consumers' permits and buffer room."""

    @abc.abstractmethod
    def _dispatch(self, entries: Entries) -> Entries:
        """Hand admitted entries to consumers; returns those nobody could take."""

    # ---- stats ----

    @property
    def replay_size(self) -> int:
        return len(self._replay)

    @property
    def delayed_count(self) -> int:
        """Entries held until their deliver-at time."""
        return len(self._delayed)

    # ---- the read loop ----

    async def _run(self) -> None:
        try:
            await self._loop()
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _loop(self) -> None:
        while self._wakeup.is_set() or self._delayed.next_due_ms() is not None:
            await self._wait_for_work()
            try:
                if await self._dispatch_once():
                    self._wakeup.set()  # there may be more
                    await asyncio.sleep(0)  # cache hits never suspend: let acks, flows and adds in
            except HeraldError as exc:
                log.warning("dispatch %s/%s: read failed, retrying in %.1fs: %s", self._sub.topic_name,
                            self._sub.name, self._settings.dispatch_retry_seconds, exc)
                await asyncio.sleep(self._settings.dispatch_retry_seconds)
                self._wakeup.set()
            except Exception:  # a bug must not stall the subscription for good
                log.exception("dispatch %s/%s failed", self._sub.topic_name, self._sub.name)
                await asyncio.sleep(self._settings.dispatch_retry_seconds)
                self._wakeup.set()

    async def _wait_for_work(self) -> None:
        """Until notified, or until the earliest delayed entry is due."""
        due = self._delayed.next_due_ms()
        if due is None:
            await self._wakeup.wait()
        else:
            # A millisecond over: deliver-at times are whole milliseconds, the clock is not.
            timeout = max(0.0, (due - now_ms()) / 1000) + 0.001
            await wait_event(self._wakeup, timeout)
        self._wakeup.clear()

    async def _dispatch_once(self) -> bool:
        """One read and dispatch; False when there is nothing to do until woken."""
        self._prepare()
        budget = min(self._read_budget(), self._settings.dispatch_max_read_entries)
        if budget <= 0:
            return False
        if self._replay:
            positions = self._take_replay(budget)
            if positions:
                try:
                    entries = await self._read_positions(positions)
                except BaseException:
                    for position in positions:
                        self._replay.add(position)
                    raise
                self._requeue(self._dispatch(self._admit(entries)))
                return True
            if not self._may_read_ahead():
                return False
        start = self._cursor.read_position
        if self._reads_compacted():
            done = await self._dispatch_compacted(start, budget)
            if done is not None:
                return done
        if not self._ledger.has_entries_from(start):
            return False
        epoch = self._epoch
        read = await self.read_ahead.read(start, budget)
        if epoch != self._epoch:
            return True  # rewound meanwhile: read again from the new position
        if not read:
            return False
        last = read[-1][0]
        self._cursor.advance_read_position(Position(last.ledger_id, last.entry_id + 1))
        leftovers = self._dispatch(self._admit([ReadEntry(position, data) for position, data in read]))
        if leftovers:
            self._leftovers(leftovers)
        return True

    def _prepare(self) -> None:
        """Before each round: delayed entries now due join the replay set."""
        if self._delayed.next_due_ms() is not None:
            for position in self._delayed.take_due(now_ms()):
                self._replay.add(position)

    def _may_read_ahead(self) -> bool:
        """Whether to read new entries while the replay set holds entries nobody can take now."""
        return True

    def _reads_compacted(self) -> bool:
        """Whether reads at or before the compaction horizon go to the compacted view (the consumer
        entries go to asked for read_compacted; only single-active dispatchers allow it)."""
        return False

    async def _dispatch_compacted(self, start: Position, budget: int) -> bool | None:
        """Read and dispatch from the compacted view (broker.core.compacted_reads); None when
        `start` is past the view's horizon (or there is no view): read the log."""
        epoch = self._epoch
        read = await read_compacted(self._sub.compaction, start, budget)
        if read is None:
            return None
        if epoch != self._epoch:
            return True  # rewound or reset meanwhile: read again from the new position
        self._cursor.advance_read_position(read.next)
        if read.entries:
            # A reader is told which messages of a compacted batch to leave out (Pulsar's C++ client
            # shows compacted-out ones otherwise). Not a durable subscription's consumer: that client
            # acknowledges a batch only once it has acknowledged every message, those left out
            # included, so it gets them all (as from Pulsar's broker) and skips them itself or not.
            mask = not self._sub.durable
            leftovers = self._dispatch(self._admit(
                [ReadEntry(position, data, kept_messages(data) if mask else None) for position, data in read.entries]))
            if leftovers:
                self._leftovers(leftovers)
        return True  # an empty read moved the read position past the horizon: the log goes on

    def _admit(self, entries: Entries) -> Entries:
        """The entries to dispatch: not acknowledged, not dead letters, not delayed."""
        is_acked = self._cursor.is_acked
        sub = self._sub
        policy = sub.dead_letter_policy if sub.dead_letters is not None else None
        has_letters = sub.dead_letter_count > 0
        counts = sub.redelivery_counts
        delays = self.delays_delivery
        now = now_ms() if delays else 0
        admitted: Entries = []
        for entry in entries:
            position = entry.position
            if is_acked(position) or (has_letters and sub.holds_dead_letter(position)):
                continue
            if policy is not None and counts:
                count = counts.get(position, 0)
                if count >= policy.max_redeliver_count:
                    sub.hand_to_dead_letters(position, entry.data, count)
                    continue
            if delays:
                deliver_at = entry.deliver_at
                if deliver_at > now:
                    self._delayed.add(position, deliver_at)
                    continue
            admitted.append(entry)
        return admitted

    def _leftovers(self, entries: Entries) -> None:
        """Newly read entries no consumer could take: deliver them later."""
        self._requeue(entries)

    def _requeue(self, entries: Entries) -> None:
        for entry in entries:
            self._replay.add(entry.position)

    async def _read_positions(self, positions: list[Position]) -> Entries:
        """Read scattered positions (ascending), one storage read per run of consecutive ones."""
        found: Entries = []
        i = 0
        while i < len(positions):
            j = i
            while (j + 1 < len(positions) and positions[j + 1].ledger_id == positions[i].ledger_id
                   and positions[j + 1].entry_id == positions[j].entry_id + 1):
                j += 1
            wanted = set(positions[i:j + 1])
            entries = await self._ledger.read_entries(positions[i], j - i + 1)
            found.extend(ReadEntry(position, data) for position, data in entries if position in wanted)
            i = j + 1
        return found

    def _take_replay(self, limit: int) -> list[Position]:
        """Up to `limit` replay positions to read now, ascending."""
        taken: list[Position] = []
        is_acked = self._cursor.is_acked
        while self._replay and len(taken) < limit:
            position = self._replay.pop()
            if position is not None and not is_acked(position):
                taken.append(position)
        return taken

    # ---- helpers for subclasses ----

    def _entries_for(self, permits: int) -> int:
        return max(1, int(permits / self._messages_per_entry))

    def _room(self, consumer: Consumer) -> int:
        """Entries worth reading for a consumer that can receive."""
        return min(self._entries_for(consumer.permits), consumer.buffer_room)

    def _deliver(self, consumer: Consumer, entry: ReadEntry) -> None:
        counts = self._sub.redelivery_counts
        messages = entry.num_messages
        self._messages_per_entry += (messages - self._messages_per_entry) * 0.1
        position = entry.position
        redelivery_count = counts.get(position, 0) if counts else 0
        span = None
        if tracing.ENABLED:
            metadata = entry.metadata
            if metadata is not None and metadata.traceparent:
                span = broker_tracing.start_deliver(self._sub.topic_name, self._sub.name, consumer.name, position,
                                                    metadata.traceparent, messages, redelivery_count)
        batch_acks = self._sub.batch_acks
        unacked = batch_acks.unacked(position) if batch_acks else None
        if entry.kept is not None:  # a compacted batch: its compacted-out messages are not to be delivered
            unacked = entry.kept if unacked is None else unacked & entry.kept
        consumer.push(position, entry.data, messages, redelivery_count, span, unacked)

    def _add_replay(self, positions: Iterable[Position]) -> None:
        is_acked = self._cursor.is_acked
        for position in positions:
            if not is_acked(position):
                self._replay.add(position)

    def _count_redelivery(self, positions: list[Position]) -> None:
        self._sub.redelivered_counter += len(positions)
        counts = self._sub.redelivery_counts
        for position in positions:
            counts[position] = counts.get(position, 0) + 1

    def _after(self, delay_ms: int, action: Callable[[], None]) -> None:
        """Run action after delay_ms (at once when <= 0); the timer dies with the dispatcher."""
        if delay_ms <= 0:
            action()
            return
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            if not self._closed:
                action()

        handle = asyncio.get_running_loop().call_later(delay_ms / 1000, fire)
        self._timers.add(handle)

    def _cancel_timers(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()

    @staticmethod
    def _delivered(consumer: Consumer, positions: list[Position] | None) -> tuple[list[Position], list[Position]]:
        """Take back from a consumer the entries to deliver again: (not yet sent, sent). None: all
        of them; otherwise only those the client has seen (pending and no longer buffered here)."""
        if positions is None:
            undelivered = consumer.take_back_undelivered()
            delivered = list(consumer.pending)
            consumer.pending.clear()
            return undelivered, delivered
        buffered = consumer.buffered_positions()
        delivered = [p for p in dict.fromkeys(positions) if p in consumer.pending and p not in buffered]
        for position in delivered:
            del consumer.pending[position]
        return [], delivered
