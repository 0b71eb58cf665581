"""Dispatchers: read a subscription's entries from the managed ledger and hand them to its
consumers within their flow permits (Pulsar's PersistentDispatcher*).

One task per dispatcher reads ahead in chunks from the cursor's read position, woken when entries
are added (tailing), permits arrive or a consumer leaves. Entries put back for redelivery (a Shared
consumer left or asked) wait in a replay set and go first, lowest position first. Each subscription
type is a Dispatcher subclass: it decides who gets what, and what happens to a leaving consumer's
unacknowledged entries.
"""

from __future__ import annotations

import abc
import asyncio
import heapq
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from herald.broker.managed_ledger import Position
from herald.broker.settings import BrokerSettings
from herald.common.entry import read_metadata
from herald.common.errors import ConsumerBusyError, HeraldError

if TYPE_CHECKING:
    from herald.broker.consumer import Consumer
    from herald.broker.subscription import Subscription

log = logging.getLogger(__name__)

Entries = list[tuple[Position, bytes]]


def num_messages(data: bytes) -> int:
    """Messages in an entry (what permits count); an entry whose metadata cannot be read counts 1."""
    try:
        return max(1, read_metadata(data, verify=False).num_messages)
    except HeraldError:
        return 1


class Dispatcher(abc.ABC):
    type_name = ""

    def __init__(self, subscription: Subscription, settings: BrokerSettings) -> None:
        self._sub = subscription
        self._cursor = subscription.cursor
        self._ledger = subscription.ledger
        self._settings = settings
        self.consumers: list[Consumer] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Bumped when the cursor is rewound: a read in flight from before is stale.
        self._epoch = 0
        self._replay: list[Position] = []  # a heap
        # Messages per entry, averaged: permits count messages, reads count entries.
        self._messages_per_entry = 1.0
        self._replay_set: set[Position] = set()

    # ---- lifecycle ----

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"dispatch {self._sub.topic_name} {self._sub.name}")

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def notify(self) -> None:
        """Something changed (entries added, permits, consumers): look for work."""
        self._wakeup.set()

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
    def _read_budget(self) -> int:
        """Entries worth reading now, given the consumers' permits and buffer room."""

    @abc.abstractmethod
    def _dispatch(self, entries: Entries) -> Entries:
        """Hand read entries to consumers; returns those nobody could take."""

    # ---- the read loop ----

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
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

    async def _dispatch_once(self) -> bool:
        """One read and dispatch; False when there is nothing to do until woken."""
        budget = min(self._read_budget(), self._settings.dispatch_max_read_entries)
        if budget <= 0:
            return False
        if self._replay:
            positions = self._take_replay(budget)
            if not positions:
                return True
            try:
                entries = await self._read_positions(positions)
            except BaseException:
                self._add_replay(positions)
                raise
            self._add_replay(pos for pos, _ in self._dispatch(entries))
            return True
        start = self._cursor.read_position
        if not self._ledger.has_entries_from(start):
            return False
        epoch = self._epoch
        entries = await self._ledger.read_entries(start, budget)
        if epoch != self._epoch:
            return True  # rewound meanwhile: read again from the new position
        if not entries:
            return False
        last = entries[-1][0]
        self._cursor.advance_read_position(Position(last.ledger_id, last.entry_id + 1))
        leftovers = self._dispatch(entries)
        if leftovers:
            self._leftovers(leftovers)
        return True

    def _leftovers(self, entries: Entries) -> None:
        """Read entries no consumer could take: deliver them later."""
        self._add_replay(pos for pos, _ in entries)

    async def _read_positions(self, positions: list[Position]) -> Entries:
        """Read scattered positions, one storage read per run of consecutive ones."""
        found: Entries = []
        i = 0
        while i < len(positions):
            j = i
            while (j + 1 < len(positions) and positions[j + 1].ledger_id == positions[i].ledger_id
                   and positions[j + 1].entry_id == positions[j].entry_id + 1):
                j += 1
            wanted = set(positions[i:j + 1])
            entries = await self._ledger.read_entries(positions[i], j - i + 1)
            found.extend(entry for entry in entries if entry[0] in wanted)
            i = j + 1
        return found

    # ---- helpers for subclasses ----

    def _entries_for(self, permits: int) -> int:
        return max(1, int(permits / self._messages_per_entry))

    def _deliver(self, consumer: Consumer, position: Position, data: bytes) -> None:
        counts = self._sub.redelivery_counts
        messages = num_messages(data)
        self._messages_per_entry += (messages - self._messages_per_entry) * 0.1
        consumer.push(position, data, messages, counts.get(position, 0) if counts else 0)

    def _add_replay(self, positions: Iterable[Position]) -> None:
        is_acked = self._cursor.is_acked
        for position in positions:
            if position not in self._replay_set and not is_acked(position):
                self._replay_set.add(position)
                heapq.heappush(self._replay, position)

    def _take_replay(self, limit: int) -> list[Position]:
        taken: list[Position] = []
        is_acked = self._cursor.is_acked
        while self._replay and len(taken) < limit:
            position = heapq.heappop(self._replay)
            self._replay_set.discard(position)
            if not is_acked(position):
                taken.append(position)
        return taken

    def _count_redelivery(self, positions: list[Position]) -> None:
        counts = self._sub.redelivery_counts
        for position in positions:
            counts[position] = counts.get(position, 0) + 1

    @property
    def replay_size(self) -> int:
        return len(self._replay_set)


class ExclusiveDispatcher(Dispatcher):
    """One consumer takes everything, in order. Redelivery rewinds the cursor: everything not
    acknowledged is read again, in order."""

    type_name = "Exclusive"

    def add_consumer(self, consumer: Consumer) -> None:
        if self.consumers:
            raise ConsumerBusyError("Exclusive consumer is already connected")
        self.consumers.append(consumer)
        self.notify()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            self._rewind(consumer)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        # Like Pulsar's single-consumer dispatchers: any redelivery request redelivers everything.
        self._rewind(consumer)

    def _rewind(self, consumer: Consumer) -> None:
        consumer.take_back_undelivered()
        self._count_redelivery(list(consumer.pending))
        consumer.pending.clear()
        self._cursor.rewind()
        self._epoch += 1
        self.notify()

    def _read_budget(self) -> int:
        if not self.consumers or not self.consumers[0].can_receive:
            return 0
        consumer = self.consumers[0]
        return min(self._entries_for(consumer.permits), consumer.buffer_room)

    def _dispatch(self, entries: Entries) -> Entries:
        if not self.consumers:
            return entries
        consumer = self.consumers[0]
        is_acked = self._cursor.is_acked
        for i, (position, data) in enumerate(entries):
            if not consumer.can_receive:
                return entries[i:]
            if not is_acked(position):
                self._deliver(consumer, position, data)  # the last one may overshoot the permits
        return []

    def _leftovers(self, entries: Entries) -> None:
        # Read ahead but not sent (out of permits): read them again, in order, when permits come.
        self._cursor.read_position = entries[0][0]


class SharedDispatcher(Dispatcher):
    """Entries go round-robin to the consumers with permits, highest priority (lowest level)
    first, a few entries per turn. A leaving consumer's unacknowledged entries are replayed to the
    others, each with its redelivery count raised."""

    type_name = "Shared"

    def __init__(self, subscription: Subscription, settings: BrokerSettings) -> None:
        super().__init__(subscription, settings)
        self._next = 0

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.notify()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            self._put_back(consumer, None)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        self._put_back(consumer, positions)

    def _put_back(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if positions is None:
            undelivered = consumer.take_back_undelivered()
            delivered = list(consumer.pending)
            consumer.pending.clear()
        else:
            # Only what the client has seen: entries still buffered here were not sent yet.
            buffered = consumer.buffered_positions()
            undelivered = []
            delivered = [p for p in positions if p in consumer.pending and p not in buffered]
            for position in delivered:
                del consumer.pending[position]
        self._count_redelivery(delivered)
        self._add_replay(undelivered)
        self._add_replay(delivered)
        self.notify()

    def _read_budget(self) -> int:
        return sum(min(self._entries_for(c.permits), c.buffer_room) for c in self.consumers if c.can_receive)

    def _next_consumer(self) -> Consumer | None:
        consumers = self.consumers
        levels = [c.priority_level for c in consumers if c.can_receive]
        if not levels:
            return None
        level = min(levels)
        n = len(consumers)
        for k in range(n):
            index = (self._next + k) % n
            consumer = consumers[index]
            if consumer.priority_level == level and consumer.can_receive:
                self._next = index + 1
                return consumer
        return None

    def _dispatch(self, entries: Entries) -> Entries:
        is_acked = self._cursor.is_acked
        batch = max(1, self._settings.dispatch_round_robin_batch)
        i = 0
        while i < len(entries):
            consumer = self._next_consumer()
            if consumer is None:
                break
            sent = 0
            while i < len(entries) and sent < batch and consumer.can_receive:
                position, data = entries[i]
                i += 1
                if not is_acked(position):
                    self._deliver(consumer, position, data)
                    sent += 1
        return entries[i:]
