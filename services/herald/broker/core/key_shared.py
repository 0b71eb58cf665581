"""Key_Shared dispatch: each entry goes to the consumer owning its key's slice of the hash range
(broker.core.hash_ranges: auto-split by default, or each consumer's own STICKY ranges), so one key's
entries go to one consumer, in order, while it stays connected.
"""

from __future__ import annotations

from herald.broker.core.consumer import Consumer
from herald.broker.core.dispatcher import DispatchSource, Entries, ReadEntry
from herald.broker.core.hash_ranges import AUTO_SPLIT, KeySharedMeta, KeySharedMode, StickyHashRanges
from herald.broker.core.hash_ranges import HASH_RANGE_SIZE as HASH_RANGE_SIZE  # re-exported
from herald.broker.core.hash_ranges import HashRange as HashRange
from herald.broker.core.hash_ranges import HashRanges as HashRanges
from herald.broker.core.hash_ranges import key_hash as key_hash
from herald.broker.core.hash_ranges import sticky_key as sticky_key
from herald.broker.core.ledger_list import Position
from herald.broker.core.shared import SharedDispatcher
from herald.broker.settings import BrokerSettings
from herald.common.errors import ConsumerBusyError


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
    waiting), so one slow consumer neither stalls the rest nor makes the dispatcher spin.

    The first consumer sets the subscription's mode (AUTO_SPLIT, STICKY) and whether it allows
    out-of-order delivery (then a joining consumer is not held to older entries: Pulsar's
    allowOutOfOrderDelivery); a consumer asking otherwise is refused while others are connected.
    STICKY consumers own the ranges they bring: an entry whose hash nobody owns waits for an owner."""

    type_name = "Key_Shared"
    MAX_REPLAY_FOR_READ_AHEAD = 10_000

    def __init__(self, subscription: DispatchSource, settings: BrokerSettings) -> None:
        super().__init__(subscription, settings)
        self.meta = AUTO_SPLIT  # the mode and ordering rule, set by the first consumer
        self._ranges: HashRanges[Consumer] | StickyHashRanges[Consumer] = HashRanges()
        # Consumers that joined while entries were outstanding -> the read position at their join.
        self._recently_joined: dict[Consumer, Position] = {}
        # Where _first_outstanding's last scan stopped: everything before it was acknowledged or held.
        self._outstanding_from: Position | None = None

    # ---- consumers ----

    def add_consumer(self, consumer: Consumer) -> None:
        meta = consumer.key_shared or AUTO_SPLIT
        if not self.consumers:
            if (meta.mode, meta.allow_out_of_order_delivery) != (self.meta.mode, self.meta.allow_out_of_order_delivery):
                self._ranges = StickyHashRanges() if meta.mode is KeySharedMode.STICKY else HashRanges()
            self.meta = meta
        elif (meta.mode, meta.allow_out_of_order_delivery) != (self.meta.mode, self.meta.allow_out_of_order_delivery):
            raise ConsumerBusyError(
                f"Key_Shared subscription {self._sub.name} has consumers in {_describe(self.meta)}; this consumer "
                f"asks for {_describe(meta)}: subscribe alike, or once they are gone")
        if isinstance(self._ranges, StickyHashRanges):
            self._ranges.add(consumer, meta.ranges)  # ConsumerBusyError on a range conflict
        else:
            self._ranges.add(consumer)
        self.consumers.append(consumer)
        if (len(self.consumers) > 1 and not self.meta.allow_out_of_order_delivery
                and self._entries_outstanding()):
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
            owner = self._ranges.owner_of(hash_value)  # None: STICKY, and nobody owns it
            if owner is not None and room.get(owner, 0) > 0 and self._may_receive(owner, position):
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
                if consumer is not None and consumer.can_receive and self._may_receive(consumer, position):
                    self._deliver(consumer, entry)
                    continue
            leftovers.append(entry)
            first_by_hash.setdefault(hash_value, position)
        return leftovers

    def _requeue(self, entries: Entries) -> None:
        for entry in entries:
            self._replay.add(entry.position, self._hash(entry))


def _describe(meta: KeySharedMeta) -> str:
    ordering = "out-of-order delivery allowed" if meta.allow_out_of_order_delivery else "key order kept"
    return f"{meta.mode.name} mode ({ordering})"
