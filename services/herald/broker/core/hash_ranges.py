"""Key_Shared's hash ranges (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector): every entry's key
hashes into 0..65535, and the range is split among the connected consumers, each owning one
contiguous slice, so one key always goes to one consumer while it stays connected.

Auto-split: the first consumer owns everything; a joining consumer takes the lower half of the
largest slice (the lowest one among equals), so a join moves keys from one consumer only; a leaving
consumer's slice goes to its upper neighbour (the lower one when it owned the top), so a leave moves
keys to one consumer only. Used by the Key_Shared dispatcher (broker.core.key_shared) and by
non-persistent Key_Shared subscriptions alike.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

from herald.common.codec.checksum import crc32c
from herald.common.codec.entry import EntryMetadata
from herald.common.errors import NotAllowedError

HASH_RANGE_SIZE = 65536  # hashes are 0..65535

Owner = TypeVar("Owner", bound=Hashable)


def key_hash(key: bytes) -> int:
    """A key's place in the hash range: crc32c (stable across processes and restarts, unlike
    Python's hash()) modulo the range size."""
    return crc32c(key) % HASH_RANGE_SIZE


def sticky_key(metadata: EntryMetadata) -> bytes:
    """The key an entry is dispatched by: its ordering key, else its partition key; entries with
    neither share the empty key."""
    return metadata.ordering_key or metadata.partition_key.encode()


class HashRange(NamedTuple, Generic[Owner]):
    start: int  # inclusive
    end: int  # inclusive
    owner: Owner


class HashRanges(Generic[Owner]):
    """Slices of 0..65535, each owned by one consumer; every hash has an owner while any consumer
    is attached."""

    def __init__(self) -> None:
        self._ends: list[int] = []  # the last hash of each slice, ascending
        self._owners: list[Owner] = []
        self._members: set[Owner] = set()
        # (-size, start) of the slices, largest (then lowest) first; entries of slices that have
        # changed since are stale and skipped.
        self._by_size: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self._owners)

    def add(self, owner: Owner) -> None:
        """Give a joining consumer the lower half of the largest slice."""
        if owner in self._members:
            return
        if not self._ends:
            self._ends.append(HASH_RANGE_SIZE - 1)
            self._owners.append(owner)
            self._members.add(owner)
            self._by_size = [(-HASH_RANGE_SIZE, 0)]
            return
        largest, start, size = self._largest()
        if size < 2:
            raise NotAllowedError(
                f"a Key_Shared subscription takes at most {HASH_RANGE_SIZE} consumers: close one first")
        middle = start + size // 2 - 1
        self._ends.insert(largest, middle)
        self._owners.insert(largest, owner)
        self._members.add(owner)
        heapq.heappush(self._by_size, (-(middle - start + 1), start))
        heapq.heappush(self._by_size, (-(start + size - middle - 1), middle + 1))

    def remove(self, owner: Owner) -> None:
        """A leaving consumer's slice goes to its upper neighbour (or the lower one at the top)."""
        if owner not in self._members:
            return
        self._members.discard(owner)
        i = self._owners.index(owner)
        if i == len(self._owners) - 1 and i > 0:
            self._ends[i - 1] = self._ends[i]  # the lower neighbour grows up to the top
            grown = i - 1
        else:
            grown = i  # the upper neighbour's slice now starts lower
        del self._ends[i], self._owners[i]
        if self._ends:
            start = self._ends[grown - 1] + 1 if grown else 0
            heapq.heappush(self._by_size, (-(self._ends[grown] - start + 1), start))
        if len(self._by_size) > 4 * len(self._ends) + 16:
            self._by_size = [(-(end - start + 1), start) for start, end, _ in self.ranges()]
            heapq.heapify(self._by_size)

    def _largest(self) -> tuple[int, int, int]:
        """(index, start, size) of the largest slice, the lowest among equals."""
        while True:
            negative_size, start = self._by_size[0]
            i = bisect.bisect_left(self._ends, start)
            if (self._ends[i - 1] + 1 if i else 0) == start and self._ends[i] - start + 1 == -negative_size:
                return i, start, -negative_size
            heapq.heappop(self._by_size)  # stale

    def owner_of(self, hash_value: int) -> Owner:
        """The consumer owning a hash; IndexError when no consumer is attached."""
        return self._owners[bisect.bisect_left(self._ends, hash_value)]

    def owned_by(self, owner: Owner) -> list[tuple[int, int]]:
        """The (start, end) slices one consumer owns, inclusive (for stats)."""
        return [(start, end) for start, end, holder in self.ranges() if holder is owner]

    def ranges(self) -> list[HashRange[Owner]]:
        return [HashRange(self._ends[i - 1] + 1 if i else 0, end, owner)
                for i, (end, owner) in enumerate(zip(self._ends, self._owners, strict=True))]
