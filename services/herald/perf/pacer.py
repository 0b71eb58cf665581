"""A fixed-rate pacer that never drifts: message i is due at start + i / rate, computed from the
start every time, so that a late wake-up is caught up by sending what is due rather than pushing
every later send back (sleeping 1/rate per message would drift by each sleep's overshoot)."""

from __future__ import annotations

import math


class RatePacer:
    """How many messages are due at a given time, for `rate` messages per second from `start`
    (0 = unlimited: everything is always due). Times are seconds on any monotonic clock."""

    __slots__ = ("rate", "sent", "start")

    def __init__(self, rate: float, start: float) -> None:
        if not rate >= 0 or math.isinf(rate):
            raise ValueError(f"rate must be zero (unlimited) or a positive number of messages per second, got {rate!r}")
        self.rate = rate
        self.start = start
        self.sent = 0  # messages handed out so far (taken by the caller)

    def due(self, now: float, limit: int) -> int:
        """How many messages may be sent now (at most `limit`): those due by `now` and not yet
        taken. Counts them as taken."""
        if self.rate == 0:
            count = limit
        else:
            # Message i (0-based) is due at start + i / rate: floor(elapsed * rate) + 1 are due.
            elapsed = now - self.start
            owed = math.floor(elapsed * self.rate) + 1 - self.sent if elapsed >= 0 else 0
            count = max(0, min(limit, owed))
        self.sent += count
        return count

    def next_due(self) -> float:
        """When the next message not yet taken is due (start for an unlimited rate)."""
        if self.rate == 0:
            return self.start
        return self.start + self.sent / self.rate
