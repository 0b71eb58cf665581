"""Managed cursors: the mark-delete position, individually acknowledged ranges kept compact and
folded into the mark-delete position across ledger boundaries, backlog, and persistence."""

from __future__ import annotations

import json

import pytest
from herald.broker.core.cursor import AckRanges, InitialPosition, ManagedCursor
from herald.broker.core.managed_ledger import Position
from herald.common.errors import AlreadyExistsError, BadVersionError
from herald.metadata.store import MetadataStore

P = Position


class FakeLedger:
    """Ledgers as (id, entry count); number_of_entries as the managed ledger counts them."""

    def __init__(self, *ledgers: tuple[int, int]) -> None:
        self.ledgers = list(ledgers)

    @property
    def last_confirmed_position(self) -> Position:
        for ledger_id, entries in reversed(self.ledgers):
            if entries:
                return P(ledger_id, entries - 1)
        return P(self.ledgers[0][0], -1)

    @property
    def first_position(self) -> Position:
        for ledger_id, entries in self.ledgers:
            if entries:
                return P(ledger_id, 0)
        return P(self.ledgers[-1][0], 0)

    def has_entry(self, position: Position) -> bool:
        return any(position.ledger_id == ledger_id and 0 <= position.entry_id < entries
                   for ledger_id, entries in self.ledgers)

    def number_of_entries(self, after: Position, up_to: Position) -> int:
        return sum(1 for ledger_id, entries in self.ledgers for e in range(entries)
                   if after < P(ledger_id, e) <= up_to)

    def normalize(self, position: Position) -> Position:
        for ledger_id, entries in self.ledgers:
            if ledger_id == position.ledger_id and position.entry_id < entries:
                return P(ledger_id, max(0, position.entry_id))
            if ledger_id > position.ledger_id and entries:
                return P(ledger_id, 0)
        last_id, last_entries = self.ledgers[-1]
        if position.ledger_id == last_id:
            return P(last_id, max(0, position.entry_id))
        return P(last_id, last_entries)


# ---- AckRanges ----

def test_ranges_merge_adjacent_entries_in_any_order() -> None:
    ranges = AckRanges()
    for entry_id in (5, 3, 4, 7, 9, 8):
        assert ranges.add(1, entry_id)
    assert ranges.to_json() == [[1, 3, 5], [1, 7, 9]]
    assert ranges.count == 6
    assert not ranges.add(1, 4)  # already there
    assert ranges.add(1, 6)
    assert ranges.to_json() == [[1, 3, 9]] and ranges.count == 7


def test_ranges_never_span_ledgers() -> None:
    ranges = AckRanges()
    ranges.add(1, 9)
    ranges.add(2, 0)
    ranges.add(2, 1)
    assert ranges.to_json() == [[1, 9, 9], [2, 0, 1]]
    assert ranges.contains(1, 9) and ranges.contains(2, 1)
    assert not ranges.contains(1, 10) and not ranges.contains(2, 2) and not ranges.contains(0, 0)


def test_remove_up_to_keeps_the_tail_of_a_straddling_range() -> None:
    ranges = AckRanges()
    for entry_id in (*range(2, 8), 10, 11):
        ranges.add(1, entry_id)
    ranges.add(2, 3)
    ranges.remove_up_to(P(1, 4))
    assert ranges.to_json() == [[1, 5, 7], [1, 10, 11], [2, 3, 3]]
    assert ranges.count == 6
    ranges.remove_up_to(P(1, 100))
    assert ranges.to_json() == [[2, 3, 3]] and ranges.count == 1


def test_ranges_round_trip_through_json() -> None:
    ranges = AckRanges()
    for ledger_id, entry_id in ((1, 1), (1, 2), (3, 7)):
        ranges.add(ledger_id, entry_id)
    again = AckRanges.from_json(json.loads(json.dumps(ranges.to_json())))
    assert again.to_json() == ranges.to_json() and again.count == 3
    assert list(again.positions()) == [P(1, 1), P(1, 2), P(3, 7)]


def test_many_in_order_acks_stay_one_range() -> None:
    ranges = AckRanges()
    for entry_id in range(1, 10_000):
        ranges.add(5, entry_id)
    assert len(ranges) == 1 and ranges.count == 9_999


# ---- ManagedCursor ----

def cursor(ledger: FakeLedger, store: MetadataStore, mark_delete: Position) -> ManagedCursor:
    return ManagedCursor(ledger, store, "public/default/persistent/t", "sub", mark_delete)


async def test_in_order_acks_move_the_mark_delete_position(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 10)), store, P(1, -1))
    c.ack([P(1, 0), P(1, 1)])
    assert c.mark_delete_position == P(1, 1) and c.individually_acked == []
    assert c.backlog == 8 and c.dirty


async def test_acks_out_of_order_fold_in_when_the_gap_closes(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 10)), store, P(1, -1))
    c.ack([P(1, 2), P(1, 3), P(1, 5)])
    assert c.mark_delete_position == P(1, -1)
    assert c.individually_acked == [[1, 2, 3], [1, 5, 5]]
    assert c.backlog == 7
    assert c.is_acked(P(1, 3)) and not c.is_acked(P(1, 4))
    c.ack([P(1, 0), P(1, 1)])
    assert c.mark_delete_position == P(1, 3)
    c.ack([P(1, 4)])
    assert c.mark_delete_position == P(1, 5) and c.individually_acked == []
    assert c.backlog == 4


async def test_mark_delete_crosses_ledger_boundaries_and_empty_ledgers(store: MetadataStore) -> None:
    ledger = FakeLedger((1, 3), (2, 0), (3, 2))
    c = cursor(ledger, store, P(1, -1))
    c.ack([P(3, 0), P(1, 1), P(1, 2)])
    assert c.mark_delete_position == P(1, -1)
    c.ack([P(1, 0)])
    # 1:0..1:2 then 3:0, with the empty ledger 2 between: all folded in.
    assert c.mark_delete_position == P(3, 0) and c.individually_acked == []
    assert c.backlog == 1


async def test_cumulative_ack_drops_ranges_below_it(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 10)), store, P(1, -1))
    c.ack([P(1, 3), P(1, 4), P(1, 7)])
    c.ack_cumulative(P(1, 3))
    assert c.mark_delete_position == P(1, 4)
    assert c.individually_acked == [[1, 7, 7]]
    c.ack_cumulative(P(1, 2))  # behind: nothing changes
    assert c.mark_delete_position == P(1, 4)
    c.ack_cumulative(P(1, 100))  # past the end: clamped
    assert c.mark_delete_position == P(1, 9) and c.backlog == 0


async def test_acks_of_unknown_positions_are_ignored(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 5), (3, 2)), store, P(1, 1))
    c.ack([P(1, 0), P(1, 5), P(2, 0), P(9, 0)])
    assert c.mark_delete_position == P(1, 1) and c.individually_acked == [] and not c.dirty


async def test_read_position_follows_the_mark_delete_position(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 10)), store, P(1, 2))
    assert c.read_position == P(1, 3)
    c.advance_read_position(P(1, 8))
    c.ack_cumulative(P(1, 4))
    assert c.read_position == P(1, 8)
    c.rewind()
    assert c.read_position == P(1, 5)
    c.ack_cumulative(P(1, 9))
    assert c.read_position == P(1, 10)


async def test_new_cursor_starts_at_its_initial_position(store: MetadataStore) -> None:
    ledger = FakeLedger((4, 0), (5, 3))
    name = "public/default/persistent/t"
    earliest = await ManagedCursor.open(ledger, store, name, "early", InitialPosition.EARLIEST)
    latest = await ManagedCursor.open(ledger, store, name, "late", InitialPosition.LATEST)
    assert earliest.mark_delete_position == P(5, -1) and earliest.backlog == 3
    assert latest.mark_delete_position == P(5, 2) and latest.backlog == 0
    assert await store.get(earliest.key) is not None  # persisted at creation


async def test_cursor_state_survives_reopening(store: MetadataStore) -> None:
    ledger = FakeLedger((1, 10))
    name = "public/default/persistent/t"
    first = await ManagedCursor.open(ledger, store, name, "sub", InitialPosition.EARLIEST)
    first.ack([P(1, 0), P(1, 1), P(1, 4), P(1, 6)])
    await first.close()
    again = await ManagedCursor.open(ledger, store, name, "sub", InitialPosition.LATEST)
    assert again.mark_delete_position == P(1, 1)
    assert again.individually_acked == [[1, 4, 4], [1, 6, 6]]
    assert again.read_position == P(1, 2)
    assert [c.name for c in await ManagedCursor.load_all(ledger, store, name)] == ["sub"]


async def test_flush_writes_only_when_dirty_and_detects_another_writer(store: MetadataStore) -> None:
    ledger = FakeLedger((1, 10))
    c = await ManagedCursor.open(ledger, store, "n", "sub", InitialPosition.EARLIEST)
    version = (await store.get(c.key)).version  # type: ignore[union-attr]
    await c.flush()
    assert (await store.get(c.key)).version == version  # type: ignore[union-attr]
    await store.put(c.key, b'{"mark_delete":[1,5],"acked":[]}')  # another broker
    c.ack([P(1, 0)])
    with pytest.raises(BadVersionError):
        await c.flush()
    assert c.fenced
    await c.close()  # no raise once fenced


async def test_delete_removes_the_cursor(store: MetadataStore) -> None:
    c = await ManagedCursor.open(FakeLedger((1, 1)), store, "n", "sub", InitialPosition.LATEST)
    await c.delete()
    assert await store.get(c.key) is None


# ---- moved by the broker: reset, skip; created at a position; non-durable ----

async def test_reset_makes_the_target_the_next_entry_and_forgets_acks(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 10)), store, P(1, 2))
    c.ack([P(1, 5), P(1, 7)])
    c.advance_read_position(P(1, 9))
    c.dirty = False
    c.reset(P(1, 1))
    assert c.mark_delete_position == P(1, 0) and c.individually_acked == []
    assert c.read_position == P(1, 1) and c.backlog == 9 and c.dirty
    c.reset(P(1, 0))  # the first entry of a ledger: mark-delete just before it
    assert c.mark_delete_position == P(1, -1) and c.backlog == 10


async def test_unacked_positions_skip_acked_entries_and_empty_ledgers(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 3), (2, 0), (3, 3)), store, P(1, 0))
    c.ack([P(1, 2), P(3, 0)])
    assert c.unacked_positions(3) == [P(1, 1), P(3, 1), P(3, 2)]
    assert c.unacked_positions(10) == [P(1, 1), P(3, 1), P(3, 2)]
    assert c.unacked_positions(0) == []


async def test_skip_acknowledges_the_oldest_unacknowledged_entries(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 10)), store, P(1, -1))
    c.ack([P(1, 1), P(1, 2), P(1, 6)])
    assert c.skip(2) == 2  # 1:0 and 1:3 (1:1 and 1:2 were acked already)
    assert c.mark_delete_position == P(1, 3) and c.individually_acked == [[1, 6, 6]]
    assert c.skip(0) == 0 and c.mark_delete_position == P(1, 3)
    assert c.skip(2) == 2  # 1:4, 1:5; the acked 1:6 folds in
    assert c.mark_delete_position == P(1, 6) and c.backlog == 3
    assert c.skip(100) == 3 and c.backlog == 0
    assert c.skip(1) == 0


async def test_skip_all_clears_the_backlog(store: MetadataStore) -> None:
    c = cursor(FakeLedger((1, 4), (2, 3)), store, P(1, 0))
    c.ack([P(2, 1)])
    assert c.skip(None) == 5
    assert c.mark_delete_position == P(2, 2) and c.backlog == 0 and c.individually_acked == []


async def test_created_cursor_starts_at_its_position_and_refuses_a_second_creation(store: MetadataStore) -> None:
    ledger = FakeLedger((1, 10))
    c = await ManagedCursor.create(ledger, store, "n", "sub", P(1, 4))
    assert c.mark_delete_position == P(1, 3) and c.read_position == P(1, 4) and c.backlog == 6
    assert json.loads((await store.get(c.key)).value)["mark_delete"] == [1, 3]  # type: ignore[union-attr]
    with pytest.raises(AlreadyExistsError, match="subscription 'sub' already exists"):
        await ManagedCursor.create(ledger, store, "n", "sub", P(1, 0))


async def test_non_durable_cursor_never_touches_the_metadata_store(store: MetadataStore) -> None:
    ledger = FakeLedger((1, 10))
    reader = ManagedCursor.non_durable(ledger, store, "n", "reader", P(1, 5))
    assert not reader.durable and reader.read_position == P(1, 5) and reader.backlog == 5
    reader.ack([P(1, 5)])
    await reader.flush()
    await reader.close()
    assert await store.get(reader.key) is None
    assert await ManagedCursor.load_all(ledger, store, "n") == []
    await store.put(reader.key, b'{"mark_delete":[1,1],"acked":[]}')  # a durable one of that name elsewhere
    await reader.delete()
    assert await store.get(reader.key) is not None

