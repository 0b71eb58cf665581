"""Key_Shared's hash ranges: auto-split on join, merge on leave, every hash always owned."""

from __future__ import annotations

import base64
import itertools

import mmh3
import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar_api
from herald.broker.core.hash_ranges import KeySharedMeta, KeySharedMode, StickyHashRanges
from herald.broker.core.key_shared import HASH_RANGE_SIZE, HashRange, HashRanges, key_hash, sticky_key
from herald.common.codec import pulsar_entry
from herald.common.codec.entry import EntryMetadata
from herald.common.errors import ConsumerBusyError, InvalidArgumentError, NotAllowedError
from hypothesis import given, settings
from hypothesis import strategies as st


def test_key_hash_is_stable_and_in_range() -> None:
    assert key_hash(b"order-17") == key_hash(b"order-17")
    assert 0 <= key_hash(b"") < HASH_RANGE_SIZE


def test_key_hash_is_pulsars_murmur3_of_the_key_masked_modulo_the_range() -> None:
    # Pulsar's StickyKeyConsumerSelector: Murmur3 x86 32-bit (seed 0) & 0x7fffffff, % 65536, so a
    # range means the same keys to Herald and to Pulsar. Reference values of MurmurHash3_x86_32.
    assert key_hash(b"hello") == (0x248BFA47 & 0x7FFFFFFF) % HASH_RANGE_SIZE
    assert key_hash(b"The quick brown fox jumps over the lazy dog") == (0x2E4FF723 & 0x7FFFFFFF) % HASH_RANGE_SIZE
    assert key_hash(b"") == 0  # Murmur3 of nothing with seed 0 is 0


def test_sticky_key_prefers_the_ordering_key_then_the_partition_key() -> None:
    assert sticky_key(EntryMetadata(ordering_key=b"o", partition_key="p")) == b"o"
    assert sticky_key(EntryMetadata(partition_key="p")) == b"p"
    assert sticky_key(EntryMetadata()) == b"NONE_KEY"  # Pulsar's key for entries with none


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


def test_a_base64_partition_key_hashes_by_its_bytes() -> None:
    # A bytes key travels base64-encoded (partition_key_b64_encoded); Pulsar's broker hashes its bytes.
    metadata = pulsar_entry.to_entry_metadata(pulsar_api.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1,
        partition_key=base64.b64encode(b"\x00\xffkey").decode(), partition_key_b64_encoded=True))
    assert key_hash(sticky_key(metadata)) == (mmh3.hash(b"\x00\xffkey", 0) & 0x7FFFFFFF) % HASH_RANGE_SIZE


def test_key_shared_meta_checks_what_a_consumer_asks_for() -> None:
    assert KeySharedMeta.parse(0, [], False) == KeySharedMeta()
    sticky = KeySharedMeta.parse(1, [(100, 200), (0, 9)], True)
    assert sticky == KeySharedMeta(KeySharedMode.STICKY, ((0, 9), (100, 200)), True)
    for mode, ranges, message in [
        (1, [(0, 65536)], "within 0..65535"), (1, [(-1, 5)], "within 0..65535"),
        (1, [(10, 5)], "start <= end"), (1, [], "must bring its hash ranges"),
        (1, [(0, 10), (10, 20)], "overlap"), (0, [(0, 10)], "AUTO_SPLIT assigns them"),
        (7, [], "mode 7 is invalid"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            KeySharedMeta.parse(mode, ranges, False)


def test_sticky_consumers_own_exactly_their_ranges_and_conflicts_are_refused() -> None:
    ranges: StickyHashRanges[str] = StickyHashRanges()
    ranges.add("a", [(0, 99), (200, 299)])
    ranges.add("b", [(100, 199)])
    assert ranges.owner_of(0) == "a" and ranges.owner_of(99) == "a" and ranges.owner_of(250) == "a"
    assert ranges.owner_of(100) == "b" and ranges.owner_of(199) == "b"
    assert ranges.owner_of(300) is None and ranges.owner_of(65535) is None  # nobody's: waits
    with pytest.raises(ConsumerBusyError, match=r"Range conflict: \[150, 160\] overlaps \[100, 199\] of consumer b"):
        ranges.add("c", [(1000, 2000), (150, 160)])
    assert ranges.owner_of(1500) is None  # a refused consumer got nothing
    assert ranges.owned_by("a") == [(0, 99), (200, 299)] and len(ranges) == 2
    ranges.remove("b")
    ranges.add("c", [(150, 160)])  # free again once b left
    assert ranges.owner_of(155) == "c" and ranges.owner_of(120) is None
