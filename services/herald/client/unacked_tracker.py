"""The ack-timeout tracker (Pulsar's UnAckedMessageTracker): entries whose messages the application
received and has not acknowledged, kept in time buckets, ceil(ack_timeout / tick) + 1 of them. Each
tick retires the oldest bucket: what is still in it has waited at least the ack timeout, and the
consumer asks the broker to deliver it again. Pure bookkeeping: the consumer owns the tick timer."""

from __future__ import annotations

import math
from collections import deque

Position = tuple[int, int]  # (ledger id, entry id)


class UnackedTracker:
    """Positions handed to the application, by the tick they were handed out in."""

    __slots__ = ("_buckets", "_where")

    def __init__(self, timeout: float, tick: float) -> None:
        count = math.ceil(timeout / tick) + 1
        self._buckets: deque[set[Position]] = deque(set() for _ in range(count))
        self._where: dict[Position, set[Position]] = {}

    @property
    def buckets(self) -> int:
        return len(self._buckets)

    def add(self, position: Position) -> bool:
        """Start the clock for a position (False when it is tracked already: its clock runs on)."""
        if position in self._where:
            return False
        bucket = self._buckets[-1]
        bucket.add(position)
        self._where[position] = bucket
        return True

    def remove(self, position: Position) -> bool:
        """The position was acknowledged (or given up on): stop tracking it."""
        bucket = self._where.pop(position, None)
        if bucket is None:
            return False
        bucket.discard(position)
        return True

    def remove_up_to(self, position: Position) -> int:
        """A cumulative acknowledgement: stop tracking every position up to this one."""
        covered = [tracked for tracked in self._where if tracked <= position]
        for tracked in covered:
            self._where.pop(tracked).discard(tracked)
        return len(covered)

    def tick(self) -> list[Position]:
        """Retire the oldest bucket; the positions still in it timed out (in position order)."""
        oldest = self._buckets.popleft()
        expired = sorted(oldest)
        for position in expired:
            del self._where[position]
        oldest.clear()
        self._buckets.append(oldest)
        return expired

    def clear(self) -> None:
        for bucket in self._buckets:
            bucket.clear()
        self._where.clear()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, position: object) -> bool:
        return position in self._where
