"""herald perf's rate pacer: message i is due at start + i / rate, whatever the wake-ups."""

from __future__ import annotations

import math

import pytest
from herald.perf.pacer import RatePacer
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(rate=st.floats(min_value=0.5, max_value=1e6), start=st.floats(min_value=0, max_value=1e6),
       steps=st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=60),
       limit=st.integers(min_value=1, max_value=10_000))
def test_pacer_never_sends_ahead_and_catches_up_without_drift(
        rate: float, start: float, steps: list[float], limit: int) -> None:
    pacer = RatePacer(rate, start)
    now = start
    for step in steps:
        now += step
        taken = pacer.due(now, limit)
        due_by_now = math.floor((now - start) * rate) + 1
        # Never ahead of the schedule computed from the start...
        assert pacer.sent <= due_by_now
        # ...and never behind it except by what the limit held back (no drift from late wake-ups).
        assert taken == limit or pacer.sent == due_by_now
        # The next message is due at start + sent / rate: after now once caught up.
        if pacer.sent == due_by_now:
            assert pacer.next_due() > now or math.isclose(pacer.next_due(), now, rel_tol=1e-9)


def test_pacer_after_a_long_stall_hands_out_every_message_owed_at_once() -> None:
    pacer = RatePacer(100, start=10.0)
    assert pacer.due(10.0, 1000) == 1  # message 0 is due at the start
    assert pacer.due(10.005, 1000) == 0
    assert pacer.next_due() == pytest.approx(10.01)
    assert pacer.due(12.0, 1000) == 200  # messages 1..200 were due by 12.0: none is lost to the stall
    assert pacer.due(12.0, 1000) == 0


def test_unlimited_rate_hands_out_the_limit_every_time() -> None:
    pacer = RatePacer(0, start=5.0)
    assert pacer.due(5.0, 500) == 500
    assert pacer.due(5.0, 7) == 7
    assert pacer.sent == 507


@pytest.mark.parametrize("rate", [-1.0, math.inf, math.nan])
def test_pacer_refuses_a_rate_that_is_not_zero_or_positive(rate: float) -> None:
    with pytest.raises(ValueError, match="rate must be zero"):
        RatePacer(rate, 0.0)
