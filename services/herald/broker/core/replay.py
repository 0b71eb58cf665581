"""The replay set: entries put back for delivery again (a Shared consumer left, asked, or negatively
acknowledged; entries read that nobody could take), served before new entries, lowest position first."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from herald.broker.core.ledger_list import Position


class ReplaySet:
    """Entries to deliver again, taken lowest position first, each with its key hash when known
    (Key_Shared needs it to pick only entries whose consumer can take them)."""

    def __init__(self) -> None:
        self._heap: list[Position] = []  # may hold stale positions, skipped when popped
        self._hashes: dict[Position, int | None] = {}

    def __len__(self) -> int:
        return len(self._hashes)

    def __contains__(self, position: Position) -> bool:
        return position in self._hashes

    def add(self, position: Position, key_hash: int | None = None) -> None:
        if position in self._hashes:
            if key_hash is not None:
                self._hashes[position] = key_hash
            return
        self._hashes[position] = key_hash
        heapq.heappush(self._heap, position)

    def pop(self) -> Position | None:
        heap = self._heap
        while heap:
            position = heapq.heappop(heap)
            if position in self._hashes:
                del self._hashes[position]
                return position
        return None

    def remove(self, position: Position) -> None:
        self._hashes.pop(position, None)
        if len(self._heap) > 2 * len(self._hashes) + 64:
            self._heap = sorted(self._hashes)  # drop the stale ones; a sorted list is a heap

    def hash_of(self, position: Position) -> int | None:
        return self._hashes.get(position)

    def in_order(self) -> list[Position]:
        return sorted(self._hashes)

    def items(self) -> Iterable[tuple[Position, int | None]]:
        return self._hashes.items()

    def clear(self) -> None:
        self._heap.clear()
        self._hashes.clear()
