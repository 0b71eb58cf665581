"""Partition routing: the key hashes match Pulsar's (Java's String.hashCode and Pulsar's
Murmur3_32Hash, checked against published values and against transliterations of the Java code),
and each routing mode sends messages where Pulsar's routers would."""

from __future__ import annotations

import random
import struct

import pytest
from herald.client.config import HashingScheme, PartitionsRoutingMode, ProducerConfig
from herald.client.message import OutgoingMessage
from herald.client.routing import (
    MAX_CACHED_KEYS,
    RoundRobinRouter,
    Router,
    SinglePartitionRouter,
    custom_partition,
    java_string_hash,
    key_hash,
    make_router,
    murmur3_32_hash,
)
from herald.common.errors import InvalidArgumentError
from hypothesis import given
from hypothesis import strategies as st

INT_MAX = 0x7FFFFFFF
TOPIC = "persistent://public/default/routed"


def java_hash_reference(text: str) -> int:
    """String.hashCode() as Java computes it, signed 32-bit overflow and all, then Pulsar's
    `& Integer.MAX_VALUE`."""
    data = text.encode("utf-16-le", "surrogatepass")
    units = struct.unpack(f"<{len(data) // 2}H", data)
    h = 0
    for unit in units:
        h = 31 * h + unit
        h = (h + 2**31) % 2**32 - 2**31  # int overflow
    return h & INT_MAX


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def murmur_reference(text: str) -> int:
    """Pulsar's org.apache.pulsar.common.util.Murmur3_32Hash.makeHash over the UTF-8 bytes,
    transliterated: little-endian 4-byte blocks, unsigned tail bytes, seed 0."""
    data = text.encode()
    c1, c2, h1 = 0xCC9E2D51, 0x1B873593, 0

    def mix_k1(k1: int) -> int:
        return (_rotl((k1 * c1) & 0xFFFFFFFF, 15) * c2) & 0xFFFFFFFF

    full = len(data) - len(data) % 4
    for at in range(0, full, 4):
        h1 ^= mix_k1(int.from_bytes(data[at:at + 4], "little"))
        h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    k1 = 0
    for i, byte in enumerate(data[full:]):
        k1 ^= byte << (i * 8)
    h1 ^= mix_k1(k1)
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 & INT_MAX


# ---- the hashes -------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Hello World", -862545276 & INT_MAX),  # Java: "Hello World".hashCode() == -862545276
    ("polygenelubricants", 0),  # Java: hashCode() == Integer.MIN_VALUE, whose low 31 bits are 0
    ("é", 233),
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a non-BMP character hashes as its two UTF-16 surrogates
])
def test_java_string_hash_matches_javas_string_hashcode(key: str, expected: int) -> None:
    assert java_string_hash(key) == expected


@given(st.text(st.characters(exclude_categories=()), max_size=80))  # lone surrogates too, as Java has them
def test_java_string_hash_matches_the_java_algorithm_on_any_text(key: str) -> None:
    assert java_string_hash(key) == java_hash_reference(key)


@pytest.mark.parametrize(("key", "expected"), [
    ("", 0),
    ("hello", 0x248BFA47),
    ("The quick brown fox jumps over the lazy dog", 0x2E4FF723),
])
def test_murmur3_hash_matches_published_murmur3_x86_32_values(key: str, expected: int) -> None:
    assert murmur3_32_hash(key) == expected & INT_MAX


@given(st.text(max_size=80))
def test_murmur3_hash_matches_pulsars_murmur3_32hash_on_any_text(key: str) -> None:
    assert murmur3_32_hash(key) == murmur_reference(key)


def test_hashing_scheme_picks_the_hash() -> None:
    assert key_hash(HashingScheme.JavaStringHash) is java_string_hash
    assert key_hash(HashingScheme.Murmur3_32Hash) is murmur3_32_hash


# ---- the routers ------------------------------------------------------------------------------


def router_of(config: ProducerConfig, num_partitions: int, seed: int) -> Router:
    router = make_router(config, num_partitions, random.Random(seed))
    assert router is not None
    return router


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


@pytest.mark.parametrize("scheme", list(HashingScheme))
@pytest.mark.parametrize("mode", [PartitionsRoutingMode.RoundRobinDistribution,
                                  PartitionsRoutingMode.UseSinglePartition])
def test_keyed_message_goes_to_its_key_hash_mod_partitions(scheme: HashingScheme,
                                                           mode: PartitionsRoutingMode) -> None:
    for batching in (True, False):
        config = ProducerConfig(hashing_scheme=scheme, message_routing_mode=mode, batching_enabled=batching)
        router = make_router(config, 7, random.Random(1))
        assert router is not None
        for i in range(200):
            key = f"key-{i}"
            assert router.choose(key, 7) == key_hash(scheme)(key) % 7
            assert router.choose(key, 7) == router.choose(key, 7)  # cached: the same answer


def test_round_robin_with_batching_sends_one_window_to_one_partition_and_the_next_to_the_next() -> None:
    clock = FakeClock()
    router = RoundRobinRouter(java_string_hash, window=0.010, start=2, clock=clock)
    clock.now_ns = 50_000_000  # window 5
    first = [router.choose(None, 4) for _ in range(10)]
    clock.now_ns = 59_999_999  # still window 5
    first.append(router.choose(None, 4))
    assert first == [(5 + 2) % 4] * 11
    seen = []
    for window in range(6, 14):
        clock.now_ns = window * 10_000_000
        seen.append(router.choose(None, 4))
    assert seen == [(window + 2) % 4 for window in range(6, 14)]
    assert router.choose(None, 5) == (13 + 2) % 5  # the topic grew within the window


def test_round_robin_without_batching_sends_each_message_to_the_next_partition() -> None:
    router = RoundRobinRouter(java_string_hash, window=None, start=3)
    assert [router.choose(None, 5) for _ in range(10)] == [3, 4, 0, 1, 2, 3, 4, 0, 1, 2]
    # Keyed messages in between do not skip a partition.
    assert router.choose("k", 5) == java_string_hash("k") % 5
    assert router.choose(None, 5) == 3


def test_round_robin_spreads_over_new_partitions_when_the_count_grows() -> None:
    router = RoundRobinRouter(java_string_hash, window=None, start=0)
    assert {router.choose(None, 2) for _ in range(4)} == {0, 1}
    assert {router.choose(None, 5) for _ in range(5)} == {0, 1, 2, 3, 4}


def test_round_robin_starts_at_a_random_partition() -> None:
    starts = {router_of(ProducerConfig(batching_enabled=False), 8, seed).choose(None, 8) for seed in range(40)}
    assert len(starts) > 1 and starts <= set(range(8))


def test_single_partition_sends_every_unkeyed_message_to_the_one_chosen_at_start() -> None:
    config = ProducerConfig(message_routing_mode=PartitionsRoutingMode.UseSinglePartition)
    router = make_router(config, 6, random.Random(7))
    assert isinstance(router, SinglePartitionRouter)
    chosen = {router.choose(None, 6) for _ in range(100)}
    assert len(chosen) == 1 and chosen <= set(range(6))
    assert {router.choose(None, 9) for _ in range(10)} == chosen  # still there after growth
    picks = {router_of(config, 6, seed).choose(None, 6) for seed in range(40)}
    assert len(picks) > 1


def test_key_hash_cache_stays_bounded() -> None:
    router = RoundRobinRouter(java_string_hash, window=None, start=0)
    for i in range(MAX_CACHED_KEYS * 2 + 5):
        assert router.choose(f"k{i}", 3) == java_string_hash(f"k{i}") % 3
    assert len(router._cache) <= MAX_CACHED_KEYS


def test_custom_partition_mode_has_no_key_router() -> None:
    assert make_router(ProducerConfig(message_router=lambda message, n: 0), 3) is None


# ---- custom routers ---------------------------------------------------------------------------


def test_custom_router_sees_the_message_and_the_partition_count() -> None:
    seen: list[tuple[OutgoingMessage, int]] = []

    def router(message: OutgoingMessage, num_partitions: int) -> int:
        seen.append((message, num_partitions))
        return int(message.properties["to"]) if message.properties else 0

    message = OutgoingMessage(b"v", key="k", properties={"to": "2"})
    assert custom_partition(router, message, 3, TOPIC) == 2
    assert seen == [(message, 3)]


@pytest.mark.parametrize("answer", [-1, 3, 100])
def test_custom_router_index_out_of_range_is_an_invalid_argument(answer: int) -> None:
    with pytest.raises(InvalidArgumentError, match=f"returned partition {answer} .* has 3 partitions"):
        custom_partition(lambda message, n: answer, OutgoingMessage(b"v"), 3, TOPIC)


@pytest.mark.parametrize("answer", [None, "1", 1.0, True])
def test_custom_router_answer_that_is_no_int_is_an_invalid_argument(answer: object) -> None:
    with pytest.raises(InvalidArgumentError, match="must return a partition index"):
        custom_partition(lambda message, n: answer, OutgoingMessage(b"v"), 3, TOPIC)  # type: ignore[arg-type,return-value]


def test_custom_router_int_subclass_answer_is_taken() -> None:
    class Index(int):
        pass

    assert custom_partition(lambda message, n: Index(1), OutgoingMessage(b"v"), 3, TOPIC) == 1


def test_custom_router_error_is_raised_as_it_is() -> None:
    class Boom(Exception):
        pass

    def router(message: OutgoingMessage, num_partitions: int) -> int:
        raise Boom("no partition for you")

    with pytest.raises(Boom, match="no partition for you"):
        custom_partition(router, OutgoingMessage(b"v"), 3, TOPIC)
