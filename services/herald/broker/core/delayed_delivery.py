"""Delayed delivery (Pulsar's InMemoryDelayedDeliveryTracker): entries whose deliver-at time is
still ahead are held here, by time, instead of being dispatched; the dispatcher takes them back when
they are due and sleeps until the earliest one is.

Only positions are held, not data: a held entry stays unacknowledged on the cursor, so it is read
again when due, and after a restart (the tracker is in memory) it is simply read and held again.
"""

from __future__ import annotations

import heapq

from herald.broker.core.ledger_list import Position


class DelayedDeliveryTracker:
    def __init__(self) -> None:
        self._heap: list[tuple[int, Position]] = []  # (deliver at, unix ms; position)
        self._held: set[Position] = set()

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, position: Position) -> bool:
        return position in self._held

    def add(self, position: Position, deliver_at_ms: int) -> bool:
        """Hold an entry until deliver_at_ms; False when it is held already."""
        if position in self._held:
            return False
        self._held.add(position)
        heapq.heappush(self._heap, (deliver_at_ms, position))
        return True

    def take_due(self, now_ms: int) -> list[Position]:
        """Release the entries due at now_ms (deliver-at <= now), earliest first."""
        due: list[Position] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            _, position = heapq.heappop(heap)
            self._held.discard(position)
            due.append(position)
        return due

    def next_due_ms(self) -> int | None:
        """The earliest deliver-at time held, or None when nothing is held."""
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()
        self._held.clear()
