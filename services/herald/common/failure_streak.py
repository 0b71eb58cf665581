"""A repeated operation failing again and again, told in a few log lines rather than one per
attempt: a broker retries its heartbeat every 0.25 s while lookup is away, and logged each failure
(over a thousand lines in a soak). The first failure is told at once, then one line every
`interval` seconds with how long and how often, then the end of the streak. No I/O: the caller
logs the lines it is given."""

from __future__ import annotations

import time
from collections.abc import Callable


class FailureStreak:
    def __init__(self, what: str, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self._interval = interval
        self._clock = clock
        self._since: float | None = None
        self._told = 0.0
        self.attempts = 0

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, reason: str) -> str | None:
        """One more failure; the line to log now (a warning), or None."""
        now = self._clock()
        self.attempts += 1
        if self._since is None:
            self._since = self._told = now
            return f"{self.what} failed: {reason}"
        if now - self._told < self._interval:
            return None
        self._told = now
        return (f"{self.what} still failing after {now - self._since:.0f}s ({self.attempts} attempts): "
                f"{reason}")

    def succeeded(self) -> str | None:
        """It worked; the line that ends a streak (for the info log), or None when there was none."""
        if self._since is None:
            return None
        line = f"{self.what} works again after {self._clock() - self._since:.1f}s ({self.attempts} failed attempts)"
        self._since, self.attempts = None, 0
        return line
