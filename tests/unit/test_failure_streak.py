"""A failing retry loop's log lines (herald.common.failure_streak): pure code, a clock of the
test's own."""

from __future__ import annotations

from herald.common.failure_streak import FailureStreak

from tests.helpers import ManualClock


def test_a_streak_is_told_at_its_start_every_interval_and_at_its_end() -> None:
    clock = ManualClock()
    streak = FailureStreak("heartbeat to lookup at 10.0.0.1:6660", interval=10.0, clock=clock)
    assert streak.succeeded() is None  # nothing to end
    lines = []
    for _ in range(100):  # every 0.25 s for 25 s
        lines.append(streak.failed("UNAVAILABLE"))
        clock.now += 0.25
    told = [line for line in lines if line is not None]
    assert told == [
        "heartbeat to lookup at 10.0.0.1:6660 failed: UNAVAILABLE",
        "heartbeat to lookup at 10.0.0.1:6660 still failing after 10s (41 attempts): UNAVAILABLE",
        "heartbeat to lookup at 10.0.0.1:6660 still failing after 20s (81 attempts): UNAVAILABLE",
    ]
    assert streak.failing
    assert streak.succeeded() == "heartbeat to lookup at 10.0.0.1:6660 works again after 25.0s (100 failed attempts)"
    assert not streak.failing and streak.succeeded() is None


def test_a_new_streak_starts_afresh() -> None:
    clock = ManualClock()
    streak = FailureStreak("watch", interval=10.0, clock=clock)
    streak.failed("lost")
    clock.now += 3
    streak.succeeded()
    clock.now += 1
    assert streak.failed("lost again") == "watch failed: lost again"
    assert streak.attempts == 1
