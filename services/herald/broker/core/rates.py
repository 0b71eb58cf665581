"""Message rates for stats: counters (messages, bytes) sampled whenever a topic's stats are taken,
and each rate computed over a sliding window of those samples.

Sampling on demand (no timer per topic): every stats pass reads the counters of every producer,
consumer, subscription and of the topic, and each meter's rate is the growth since its newest sample
at least `window` seconds old (for a meter younger than the window, since its first sample). A meter
keeps a sample at most every window / 8 seconds, so it holds about nine however often stats are
asked for. When stats have not been asked for longer than the window, the rate is the average since
the last pass. Something first seen in a pass did not exist at the previous pass, so its meter starts
from zero at that pass (or at the meters' creation, the topic's load): its first rate is an average
over a little more than its life, never an overestimate.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping

Counters = tuple[int, ...]
Rates = tuple[float, ...]


class RateMeter:
    """The rates of a fixed set of counters that only grow (a decrease counts as no growth)."""

    __slots__ = ("_samples", "_spacing", "_window")

    def __init__(self, window: float, started_at: float, width: int) -> None:
        self._window = window
        self._spacing = window / 8
        self._samples: deque[tuple[float, Counters]] = deque([(started_at, (0,) * width)])

    def rates(self, now: float, counters: Counters) -> Rates:
        samples = self._samples
        # The base is the newest sample at least a window old: drop the ones before it.
        while len(samples) > 1 and samples[1][0] <= now - self._window:
            samples.popleft()
        base_time, base = samples[0]
        if now - samples[-1][0] >= self._spacing:
            samples.append((now, counters))
        elapsed = now - base_time
        if elapsed <= 0:
            return (0.0,) * len(counters)
        return tuple(max(0, value - before) / elapsed for value, before in zip(counters, base, strict=True))


class RateMeters:
    """Meters by key for everything one topic reports; a pass sees every key still alive."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        if window <= 0:
            raise ValueError(f"the rate window must be positive, got {window}")
        self._window = window
        self._clock = clock
        self._meters: dict[Hashable, RateMeter] = {}
        self._previous_pass = clock()

    def sample(self, readings: Mapping[Hashable, Counters]) -> dict[Hashable, Rates]:
        """The rates of every key read in this pass; meters of keys not read any more are dropped."""
        now = self._clock()
        meters = self._meters
        for gone in [key for key in meters if key not in readings]:
            del meters[gone]
        rates: dict[Hashable, Rates] = {}
        for key, counters in readings.items():
            meter = meters.get(key)
            if meter is None:
                meter = meters[key] = RateMeter(self._window, self._previous_pass, len(counters))
            rates[key] = meter.rates(now, counters)
        self._previous_pass = now
        return rates
