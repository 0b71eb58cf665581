"""Exponential backoff: 100 ms initial, doubling, 60 s max, reset after a success."""

from __future__ import annotations

import itertools

import pytest
from herald.common.backoff import Backoff


def test_delays_double_from_100ms_up_to_60s() -> None:
    backoff = Backoff()
    delays = [backoff.next() for _ in range(12)]
    assert delays[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert delays[-1] == 60.0
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert max(delays) == 60.0


def test_reset_starts_over() -> None:
    backoff = Backoff(initial=1.0, maximum=8.0)
    for _ in range(5):
        backoff.next()
    assert backoff.next() == 8.0
    backoff.reset()
    assert backoff.next() == 1.0


def test_jitter_only_shortens_delays() -> None:
    backoff = Backoff(initial=1.0, maximum=1.0, jitter=0.5)
    delays = [backoff.next() for _ in range(200)]
    assert all(0.5 <= delay <= 1.0 for delay in delays)
    assert len(set(delays)) > 1


@pytest.mark.parametrize(
    "kwargs", [{"initial": 0}, {"initial": 2.0, "maximum": 1.0}, {"multiplier": 0.5}, {"jitter": 1.0}]
)
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)
