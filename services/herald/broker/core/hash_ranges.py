"""Key_Shared's hash ranges: every entry's sticky key hashes into 0..65535 as Pulsar's broker hashes it
(StickyKeyConsumerSelector: Murmur3 32-bit, seed 0, of the key's bytes, & 0x7fffffff, modulo 65536),
so a consumer's range means the same keys whichever client family produced them, and the range is
shared among the connected consumers, one key always going to one consumer while it stays connected.

AUTO_SPLIT (HashRanges, Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector), the default: the first
consumer owns everything; a joining consumer takes the lower half of the largest slice (the lowest
one among equals), so a join moves keys from one consumer only; a leaving consumer's slice goes to
its upper neighbour (the lower one when it owned the top), so a leave moves keys to one consumer only.
STICKY (StickyHashRanges, Pulsar's HashRangeExclusiveStickyKeyConsumerSelector): each consumer brings
its own ranges; one overlapping a connected consumer's is refused ("Range conflict"), and a hash no
consumer owns waits for one. Used by the Key_Shared dispatcher (broker.core.key_shared) and by
non-persistent Key_Shared subscriptions alike.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

import mmh3

from herald.common.codec.entry import EntryMetadata
from herald.common.errors import ConsumerBusyError, InvalidArgumentError, NotAllowedError

HASH_RANGE_SIZE = 65536  # hashes are 0..65535
NONE_KEY = b"NONE_KEY"  # Pulsar's sticky key for an entry with no key

Owner = TypeVar("Owner", bound=Hashable)


class KeySharedMode(enum.IntEnum):
    """How a Key_Shared subscription's consumers get their hash ranges (Pulsar's numbers)."""

    AUTO_SPLIT = 0
    STICKY = 1

    @classmethod
    def parse(cls, number: int) -> KeySharedMode:
        try:
            return cls(number)
        except ValueError:
            raise InvalidArgumentError(f"Key_Shared mode {number} is invalid: use AUTO_SPLIT or STICKY") from None


@dataclass(frozen=True, slots=True)
class KeySharedMeta:
    """What a Key_Shared consumer asks for: the mode, its own ranges (STICKY: inclusive (start, end)
    pairs within 0..65535) and whether its subscription may deliver a key's entries out of order
    when consumers change (Pulsar's allowOutOfOrderDelivery)."""

    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order_delivery: bool = False

    @classmethod
    def parse(cls, mode: int, ranges: Sequence[tuple[int, int]], allow_out_of_order_delivery: bool) -> KeySharedMeta:
        """Checked: InvalidArgumentError for an unknown mode, ranges outside 0..65535, empty, or
        overlapping each other, STICKY without ranges or AUTO_SPLIT with some."""
        parsed = KeySharedMode.parse(mode)
        pairs = tuple(sorted((int(start), int(end)) for start, end in ranges))
        if parsed is KeySharedMode.AUTO_SPLIT and pairs:
            raise InvalidArgumentError("hash ranges are for STICKY Key_Shared consumers: AUTO_SPLIT assigns them")
        if parsed is KeySharedMode.STICKY and not pairs:
            raise InvalidArgumentError("a STICKY Key_Shared consumer must bring its hash ranges (within 0..65535)")
        for start, end in pairs:
            if not 0 <= start <= end < HASH_RANGE_SIZE:
                raise InvalidArgumentError(
                    f"hash range [{start}, {end}] is invalid: ranges are inclusive, start <= end, within 0..65535")
        for (_, end), (start, next_end) in itertools.pairwise(pairs):
            if start <= end:
                raise InvalidArgumentError(
                    f"the consumer's hash ranges overlap ([..{end}] and [{start}, {next_end}]): give disjoint ranges")
        return cls(parsed, pairs, bool(allow_out_of_order_delivery))


AUTO_SPLIT = KeySharedMeta()


def key_hash(key: bytes) -> int:
    """A key's place in the hash range, as Pulsar's broker computes it: Murmur3 32-bit (seed 0) of
    the key's bytes, masked to non-negative, modulo the range size. Stable across processes,
    restarts and client families."""
    return (mmh3.hash(key, 0) & 0x7FFFFFFF) % HASH_RANGE_SIZE


def sticky_key(metadata: EntryMetadata) -> bytes:
    """The key an entry is dispatched by (Pulsar's peekStickyKey): its ordering key, else its
    partition key's UTF-8 bytes; entries with neither share NONE_KEY."""
    return metadata.ordering_key or metadata.partition_key.encode() or NONE_KEY


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


class StickyHashRanges(Generic[Owner]):
    """STICKY: each consumer owns the ranges it brought; a hash nobody owns has no owner (its
    entries wait for one). Ranges of connected consumers never overlap."""

    def __init__(self) -> None:
        self._starts: list[int] = []  # ascending
        self._slices: list[HashRange[Owner]] = []

    def __len__(self) -> int:
        return len({item.owner for item in self._slices})

    def add(self, owner: Owner, ranges: Sequence[tuple[int, int]]) -> None:
        """Give `owner` its ranges; ConsumerBusyError ("Range conflict") when one overlaps a
        connected consumer's, and nothing changes."""
        for start, end in ranges:
            i = bisect.bisect_right(self._starts, end)
            if i and self._slices[i - 1].end >= start:
                taken = self._slices[i - 1]
                raise ConsumerBusyError(
                    f"Range conflict: [{start}, {end}] overlaps [{taken.start}, {taken.end}] of consumer "
                    f"{getattr(taken.owner, 'name', taken.owner)}: choose ranges no connected consumer has")
        for start, end in ranges:
            i = bisect.bisect_left(self._starts, start)
            self._starts.insert(i, start)
            self._slices.insert(i, HashRange(start, end, owner))

    def remove(self, owner: Owner) -> None:
        kept = [item for item in self._slices if item.owner != owner]
        self._slices = kept
        self._starts = [item.start for item in kept]

    def owner_of(self, hash_value: int) -> Owner | None:
        i = bisect.bisect_right(self._starts, hash_value)
        if i and self._slices[i - 1].end >= hash_value:
            return self._slices[i - 1].owner
        return None

    def owned_by(self, owner: Owner) -> list[tuple[int, int]]:
        return [(item.start, item.end) for item in self._slices if item.owner == owner]

    def ranges(self) -> list[HashRange[Owner]]:
        return list(self._slices)
