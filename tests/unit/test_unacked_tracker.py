"""The ack-timeout tracker: ceil(timeout / tick) + 1 time buckets; a position not removed within the
timeout comes out of tick() (once), acknowledged ones never do."""

from __future__ import annotations

import pytest
from herald.client.unacked_tracker import UnackedTracker


@pytest.mark.parametrize(("timeout", "tick", "buckets"), [(10, 1, 11), (10, 3, 5), (10.5, 1, 12), (1, 5, 2)])
def test_bucket_count_is_ceil_of_timeout_over_tick_plus_one(timeout: float, tick: float, buckets: int) -> None:
    assert UnackedTracker(timeout, tick).buckets == buckets


def test_a_position_expires_after_the_timeout_and_not_before() -> None:
    tracker = UnackedTracker(10, 1)  # 11 buckets: expiry on the 11th tick after the add
    tracker.add((1, 5))
    for _ in range(10):
        assert tracker.tick() == []
    assert tracker.tick() == [(1, 5)]
    assert len(tracker) == 0
    assert all(tracker.tick() == [] for _ in range(30))  # reported once


def test_an_acknowledged_position_never_expires() -> None:
    tracker = UnackedTracker(3, 1)
    tracker.add((1, 1))
    tracker.add((1, 2))
    tracker.tick()
    assert tracker.remove((1, 1))
    assert not tracker.remove((1, 1))
    expired = [position for _ in range(5) for position in tracker.tick()]
    assert expired == [(1, 2)]


def test_adding_a_tracked_position_again_keeps_its_first_clock() -> None:
    tracker = UnackedTracker(2, 1)  # 3 buckets
    assert tracker.add((1, 1))
    tracker.tick()
    tracker.tick()
    assert not tracker.add((1, 1))
    assert tracker.tick() == [(1, 1)]


def test_positions_added_at_different_ticks_expire_in_turn_and_in_order() -> None:
    tracker = UnackedTracker(2, 1)
    tracker.add((2, 0))
    tracker.add((1, 9))
    tracker.tick()
    tracker.add((1, 3))
    assert tracker.tick() == []
    assert tracker.tick() == [(1, 9), (2, 0)]
    assert tracker.tick() == [(1, 3)]


def test_cumulative_removal_drops_every_position_up_to_it() -> None:
    tracker = UnackedTracker(2, 1)
    for entry in range(5):
        tracker.add((1, entry))
    tracker.add((2, 0))
    assert tracker.remove_up_to((1, 2)) == 3
    assert (1, 2) not in tracker and (1, 3) in tracker
    expired = [position for _ in range(3) for position in tracker.tick()]
    assert expired == [(1, 3), (1, 4), (2, 0)]


def test_clear_forgets_everything() -> None:
    tracker = UnackedTracker(1, 1)
    tracker.add((1, 1))
    tracker.clear()
    assert len(tracker) == 0
    assert [p for _ in range(3) for p in tracker.tick()] == []
    assert tracker.add((1, 1))  # tracked again from scratch
