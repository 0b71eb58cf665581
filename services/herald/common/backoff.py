"""Exponential backoff for reconnects and retries: 100 ms initial, doubling, 60 s max (Pulsar's
client defaults). Clients and services share it so every retry loop in Herald behaves alike."""

from __future__ import annotations

import random


class Backoff:
    """Delays that double from `initial` up to `maximum`; `reset()` after a success.

    `jitter` (a fraction, 0 by default) takes up to that share off each delay at random, so that
    many clients cut off by the same failure do not all come back in the same instant.
    """

    __slots__ = ("_current", "initial", "jitter", "maximum", "multiplier")

    def __init__(
        self, initial: float = 0.1, maximum: float = 60.0, multiplier: float = 2.0, jitter: float = 0.0
    ) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"backoff needs 0 < initial <= maximum, got {initial} and {maximum}")
        if multiplier < 1:
            raise ValueError(f"backoff multiplier must be at least 1, got {multiplier}")
        if not 0 <= jitter < 1:
            raise ValueError(f"backoff jitter must be in [0, 1), got {jitter}")
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
        self._current = initial

    def next(self) -> float:
        """The delay to wait now; the following call returns a longer one, up to the maximum."""
        delay = self._current
        self._current = min(self._current * self.multiplier, self.maximum)
        if self.jitter:
            delay -= delay * self.jitter * random.random()
        return delay

    def reset(self) -> None:
        self._current = self.initial
