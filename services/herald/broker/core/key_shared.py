"""Key_Shared: its hash ranges (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector): every entry's
key hashes into 0..65535, and the range is split among the connected consumers, each owning one
contiguous slice, so one key always goes to one consumer while it stays connected.

Auto-split: the first consumer owns everything; a joining consumer takes the lower half of the
largest slice (the lowest one among equals), so a join moves keys from one consumer only; a leaving
consumer's slice goes to its upper neighbour (the lower one when it owned the top), so a leave moves
keys to one consumer only. KeySharedDispatcher dispatches by them.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from herald.broker.core.consumer import Consumer
from herald.broker.core.dispatcher import Entries, ReadEntry, SharedDispatcher
from herald.broker.core.managed_ledger import Position
from herald.broker.settings import BrokerSettings
from herald.common.codec.checksum import crc32c
from herald.common.codec.entry import EntryMetadata
from herald.common.errors import NotAllowedError

if TYPE_CHECKING:
    from herald.broker.core.subscription import Subscription

HASH_RANGE_SIZE = 65536  # hashes are 0..65535

Owner = TypeVar("Owner", bound=Hashable)


def key_hash(key: bytes) -> int:
    """A key's place in the hash range: crc32c (stable across processes and restarts, unlike
    Python's hash()) modulo the range size."""
    return crc32c(key) % HASH_RANGE_SIZE


def sticky_key(metadata: EntryMetadata) -> bytes:
    """The key an entry is dispatched by: its ordering key, else its partition key; entries with
    neither share the empty key."""
    return metadata.ordering_key or metadata.partition_key.encode()


class HashRange(NamedTuple, Generic[Owner]):
    start: int  # inclusive
    end: int  # inclusive
    owner: Owner


class HashRanges(Generic[Owner]):
    """Slices of 0..65535, each owned by one consumer; every hash has an owner while any consumer
    is attached."""

    def __init__(self) -> None:
        self._ends: list[int] = []  # the last hash of each slice, ascending
        self._owners: list[Owner] = []
        self._members: set[Owner] = set()
        # (-size, start) of the slices, largest (then lowest) first; entries of slices that have
        # changed since are stale and skipped.
        self._by_size: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self._owners)

    def add(self, owner: Owner) -> None:
        """Give a joining consumer the lower half of the largest slice."""
        if owner in self._members:
            return
        if not self._ends:
            self._ends.append(HASH_RANGE_SIZE - 1)
            self._owners.append(owner)
            self._members.add(owner)
            self._by_size = [(-HASH_RANGE_SIZE, 0)]
            return
        largest, start, size = self._largest()
        if size < 2:
            raise NotAllowedError(
                f"a Key_Shared subscription takes at most {HASH_RANGE_SIZE} consumers: close one first")
        middle = start + size // 2 - 1
        self._ends.insert(largest, middle)
        self._owners.insert(largest, owner)
        self._members.add(owner)
        heapq.heappush(self._by_size, (-(middle - start + 1), start))
        heapq.heappush(self._by_size, (-(start + size - middle - 1), middle + 1))

    def remove(self, owner: Owner) -> None:
        """A leaving consumer's slice goes to its upper neighbour (or the lower one at the top)."""
        if owner not in self._members:
            return
        self._members.discard(owner)
        i = self._owners.index(owner)
        if i == len(self._owners) - 1 and i > 0:
            self._ends[i - 1] = self._ends[i]  # the lower neighbour grows up to the top
            grown = i - 1
        else:
            grown = i  # the upper neighbour's slice now starts lower
        del self._ends[i], self._owners[i]
        if self._ends:
            start = self._ends[grown - 1] + 1 if grown else 0
            heapq.heappush(self._by_size, (-(self._ends[grown] - start + 1), start))
        if len(self._by_size) > 4 * len(self._ends) + 16:
            self._by_size = [(-(end - start + 1), start) for start, end, _ in self.ranges()]
            heapq.heapify(self._by_size)

    def _largest(self) -> tuple[int, int, int]:
        """(index, start, size) of the largest slice, the lowest among equals."""
        while True:
            negative_size, start = self._by_size[0]
            i = bisect.bisect_left(self._ends, start)
            if (self._ends[i - 1] + 1 if i else 0) == start and self._ends[i] - start + 1 == -negative_size:
                return i, start, -negative_size
            heapq.heappop(self._by_size)  # stale

    def owner_of(self, hash_value: int) -> Owner:
        """The consumer owning a hash; IndexError when no consumer is attached."""
        return self._owners[bisect.bisect_left(self._ends, hash_value)]

    def owned_by(self, owner: Owner) -> list[tuple[int, int]]:
        """The (start, end) slices one consumer owns, inclusive (for stats)."""
        return [(start, end) for start, end, holder in self.ranges() if holder is owner]

    def ranges(self) -> list[HashRange[Owner]]:
        return [HashRange(self._ends[i - 1] + 1 if i else 0, end, owner)
                for i, (end, owner) in enumerate(zip(self._ends, self._owners, strict=True))]


class KeySharedDispatcher(SharedDispatcher):
    """Key_Shared: each entry goes to the consumer owning its key's hash, so one key's entries go
    to one consumer, in order, while it stays connected.

    Per-key order holds across consumer changes by two rules (Pulsar's): an entry waits while an
    earlier entry of its key (or one whose key is not known yet) waits in the replay set; and a
    consumer that joins while entries are outstanding (read, not acknowledged, and not held back as
    delayed entries or dead letters) only gets entries older than the read position at its join
    until no older entry is outstanding, so it never overtakes entries of its new keys still held
    by their previous consumer. Replayed entries are taken only for consumers that can take them
    now, and new entries are read for the others meanwhile (up to MAX_REPLAY_FOR_READ_AHEAD
    waiting), so one slow consumer neither stalls the rest nor makes the dispatcher spin."""

    type_name = "Key_Shared"
    MAX_REPLAY_FOR_READ_AHEAD = 10_000

    def __init__(self, subscription: Subscription, settings: BrokerSettings) -> None:
        super().__init__(subscription, settings)
        self._ranges: HashRanges[Consumer] = HashRanges()
        # Consumers that joined while entries were outstanding -> the read position at their join.
        self._recently_joined: dict[Consumer, Position] = {}
        # Where _first_outstanding's last scan stopped: everything before it was acknowledged or held.
        self._outstanding_from: Position | None = None

    # ---- consumers ----

    def add_consumer(self, consumer: Consumer) -> None:
        self._ranges.add(consumer)
        self.consumers.append(consumer)
        if len(self.consumers) > 1 and self._entries_outstanding():
            self._recently_joined[consumer] = self._cursor.read_position
        self.notify()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self._ranges.remove(consumer)
            self._recently_joined.pop(consumer, None)
        super().remove_consumer(consumer)

    def hash_ranges(self) -> list[HashRange[Consumer]]:
        """Who owns which slice of the hash range."""
        return self._ranges.ranges()

    def hash_ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]:
        return self._ranges.owned_by(consumer)

    def _entries_outstanding(self) -> bool:
        return self._first_outstanding() < self._ledger.normalize(self._cursor.read_position)

    def _first_outstanding(self) -> Position:
        """The oldest entry read and not acknowledged that is not held back on purpose: delayed
        entries and dead letters are with no consumer, so no key's order depends on them, and a
        joining consumer must not wait for them (that could be hours, or until a dlq-worker runs).
        Entries stay held until acknowledged (dead letters) or released (delayed: _prepare then
        scans again), so each scan goes on from where the last one stopped."""
        ledger, cursor, sub = self._ledger, self._cursor, self._sub
        mark_delete = cursor.mark_delete_position
        position = ledger.normalize(Position(mark_delete.ledger_id, mark_delete.entry_id + 1))
        if self._outstanding_from is not None and self._outstanding_from > position:
            position = self._outstanding_from
        read_position = ledger.normalize(cursor.read_position)
        while position < read_position and (
                cursor.is_acked(position) or position in self._delayed or sub.holds_dead_letter(position)):
            position = ledger.normalize(Position(position.ledger_id, position.entry_id + 1))
        self._outstanding_from = position
        return position

    def _may_receive(self, consumer: Consumer, position: Position) -> bool:
        limit = self._recently_joined.get(consumer)
        return limit is None or position < limit

    def acked(self) -> None:
        if self._recently_joined:
            self.notify()  # the mark-delete position may have passed a join position

    def _forget(self) -> None:
        self._recently_joined.clear()
        self._outstanding_from = None

    def _prepare(self) -> None:
        delayed = len(self._delayed)
        super()._prepare()
        if len(self._delayed) < delayed:
            self._outstanding_from = None  # released entries may be dispatched now: scan them again
        if self._recently_joined:
            first_outstanding = self._first_outstanding()
            for consumer, limit in list(self._recently_joined.items()):
                if first_outstanding >= self._ledger.normalize(limit):
                    del self._recently_joined[consumer]

    # ---- dispatch ----

    @staticmethod
    def _hash(entry: ReadEntry) -> int:
        metadata = entry.metadata
        return key_hash(sticky_key(metadata) if metadata is not None else b"")

    def _may_read_ahead(self) -> bool:
        return len(self._replay) < self.MAX_REPLAY_FOR_READ_AHEAD

    def _take_replay(self, limit: int) -> list[Position]:
        room = {c: self._room(c) for c in self.consumers if c.can_receive}
        is_acked = self._cursor.is_acked
        replay = self._replay
        taken: list[Position] = []
        waiting_keys: set[int] = set()  # keys with an earlier entry left waiting: keep their order
        for position in replay.in_order():
            if len(taken) >= limit:
                break
            if is_acked(position):
                replay.remove(position)
                continue
            hash_value = replay.hash_of(position)
            if hash_value is None:
                taken.append(position)  # read it to learn its key
                continue
            if hash_value in waiting_keys:
                continue
            owner = self._ranges.owner_of(hash_value)
            if room.get(owner, 0) > 0 and self._may_receive(owner, position):
                room[owner] -= 1
                taken.append(position)
            else:
                waiting_keys.add(hash_value)
        for position in taken:
            replay.remove(position)
        return taken

    def _dispatch(self, entries: Entries) -> Entries:
        if not self.consumers:
            return entries
        # Where each key's earliest waiting entry is; an unknown key may be any key.
        first_unknown: Position | None = None
        first_by_hash: dict[int, Position] = {}
        for position, hash_value in self._replay.items():
            if hash_value is None:
                if first_unknown is None or position < first_unknown:
                    first_unknown = position
            else:
                known = first_by_hash.get(hash_value)
                if known is None or position < known:
                    first_by_hash[hash_value] = position
        leftovers: Entries = []
        for entry in entries:
            position = entry.position
            hash_value = self._hash(entry)
            if not ((first_unknown is not None and first_unknown < position)
                    or first_by_hash.get(hash_value, position) < position):
                consumer = self._ranges.owner_of(hash_value)
                if consumer.can_receive and self._may_receive(consumer, position):
                    self._deliver(consumer, entry)
                    continue
            leftovers.append(entry)
            first_by_hash.setdefault(hash_value, position)
        return leftovers

    def _requeue(self, entries: Entries) -> None:
        for entry in entries:
            self._replay.add(entry.position, self._hash(entry))
