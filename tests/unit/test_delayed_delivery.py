"""The delayed-delivery tracker: entries held by deliver-at time, released when due, earliest first."""

from __future__ import annotations

from herald.broker.core.delayed_delivery import DelayedDeliveryTracker
from herald.broker.core.managed_ledger import Position


def test_entries_are_released_when_due_earliest_first() -> None:
    tracker = DelayedDeliveryTracker()
    assert tracker.next_due_ms() is None
    assert tracker.add(Position(1, 0), 3000)
    assert tracker.add(Position(1, 1), 1000)
    assert tracker.add(Position(1, 2), 2000)
    assert len(tracker) == 3 and Position(1, 1) in tracker
    assert tracker.next_due_ms() == 1000
    assert tracker.take_due(999) == []
    assert tracker.take_due(2000) == [Position(1, 1), Position(1, 2)]
    assert len(tracker) == 1 and tracker.next_due_ms() == 3000
    assert tracker.take_due(10_000) == [Position(1, 0)]
    assert len(tracker) == 0 and tracker.next_due_ms() is None


def test_an_entry_is_held_once() -> None:
    tracker = DelayedDeliveryTracker()
    assert tracker.add(Position(2, 5), 100)
    assert not tracker.add(Position(2, 5), 50)  # read again (a rewind): still held once, at its time
    assert tracker.take_due(60) == []
    assert tracker.take_due(100) == [Position(2, 5)]
    assert tracker.add(Position(2, 5), 200)  # released, then read again: held again


def test_clear_forgets_everything() -> None:
    tracker = DelayedDeliveryTracker()
    tracker.add(Position(1, 0), 10)
    tracker.clear()
    assert len(tracker) == 0 and tracker.take_due(100) == [] and tracker.next_due_ms() is None
