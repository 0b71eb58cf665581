"""Key_Shared's hash ranges: auto-split on join, merge on leave, every hash always owned."""

from __future__ import annotations

import itertools

import pytest
from herald.broker.core.key_shared import HASH_RANGE_SIZE, HashRange, HashRanges, key_hash, sticky_key
from herald.common.codec.entry import EntryMetadata
from herald.common.errors import NotAllowedError
from hypothesis import given, settings
from hypothesis import strategies as st


def test_key_hash_is_stable_and_in_range() -> None:
    assert key_hash(b"order-17") == key_hash(b"order-17")
    assert 0 <= key_hash(b"") < HASH_RANGE_SIZE
    # crc32c, not Python's per-process hash(): the same value in every process.
    assert key_hash(b"123456789") == 0xE3069283 % HASH_RANGE_SIZE


def test_sticky_key_prefers_the_ordering_key_then_the_partition_key() -> None:
    assert sticky_key(EntryMetadata(ordering_key=b"o", partition_key="p")) == b"o"
    assert sticky_key(EntryMetadata(partition_key="p")) == b"p"
    assert sticky_key(EntryMetadata()) == b""


def test_first_consumer_owns_everything_and_joiners_split_the_largest_slice() -> None:
    ranges: HashRanges[str] = HashRanges()
    ranges.add("a")
    assert ranges.ranges() == [HashRange(0, 65535, "a")]
    ranges.add("b")  # takes the lower half of a's slice
    assert ranges.ranges() == [HashRange(0, 32767, "b"), HashRange(32768, 65535, "a")]
    ranges.add("c")  # two equal slices: the lowest one is split
    assert ranges.ranges() == [HashRange(0, 16383, "c"), HashRange(16384, 32767, "b"),
                               HashRange(32768, 65535, "a")]
    ranges.add("d")  # a's slice is the largest now
    assert ranges.ranges() == [HashRange(0, 16383, "c"), HashRange(16384, 32767, "b"),
                               HashRange(32768, 49151, "d"), HashRange(49152, 65535, "a")]
    assert ranges.owner_of(0) == "c" and ranges.owner_of(16384) == "b" and ranges.owner_of(65535) == "a"


def test_a_leaving_consumer_slice_goes_to_one_neighbour() -> None:
    ranges: HashRanges[str] = HashRanges()
    for name in "abc":
        ranges.add(name)
    ranges.remove("b")  # the middle slice goes to the upper neighbour
    assert ranges.ranges() == [HashRange(0, 16383, "c"), HashRange(16384, 65535, "a")]
    ranges.remove("a")  # the top slice goes to the lower neighbour
    assert ranges.ranges() == [HashRange(0, 65535, "c")]
    ranges.remove("c")
    assert ranges.ranges() == [] and len(ranges) == 0
    with pytest.raises(IndexError):
        ranges.owner_of(5)


def test_a_join_moves_keys_away_from_one_consumer_only() -> None:
    ranges: HashRanges[str] = HashRanges()
    for name in "abcde":
        ranges.add(name)
    before = {h: ranges.owner_of(h) for h in range(0, HASH_RANGE_SIZE, 7)}
    ranges.add("f")
    moved = {(before[h], ranges.owner_of(h)) for h in before if before[h] != ranges.owner_of(h)}
    assert len({old for old, _ in moved}) == 1 and {new for _, new in moved} == {"f"}


def test_more_consumers_than_hashes_are_refused() -> None:
    ranges: HashRanges[int] = HashRanges()
    for owner in range(HASH_RANGE_SIZE):
        ranges.add(owner)
    with pytest.raises(NotAllowedError, match=r"^a Key_Shared subscription takes at most 65536 consumers"):
        ranges.add(HASH_RANGE_SIZE)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 9)), max_size=60))
def test_slices_always_cover_the_range_once_one_per_consumer(steps: list[tuple[bool, int]]) -> None:
    ranges: HashRanges[int] = HashRanges()
    present: set[int] = set()
    for joins, owner in steps:
        if joins:
            ranges.add(owner)
            present.add(owner)
        else:
            ranges.remove(owner)
            present.discard(owner)
        slices = ranges.ranges()
        assert sorted(s.owner for s in slices) == sorted(present)  # one contiguous slice each
        if slices:
            assert slices[0].start == 0 and slices[-1].end == HASH_RANGE_SIZE - 1
            assert all(a.end + 1 == b.start for a, b in itertools.pairwise(slices))
            assert all(s.start <= s.end for s in slices)
