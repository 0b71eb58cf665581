"""Which partition a partitioned producer sends each message to (SEEDS §2, Pulsar's message routers):
a message with a key goes to hash(key) mod n, one without by the routing mode; a custom router
decides every message. The choice is made once per message, so it costs a few operations and no
object beyond a cached key hash."""

from __future__ import annotations

import abc
import random
import sys
import time
from collections.abc import Callable

import mmh3

from herald.client.config import HashingScheme, MessageRouter, PartitionsRoutingMode, ProducerConfig
from herald.client.message import OutgoingMessage
from herald.common.errors import InvalidArgumentError

_INT_MAX = 0x7FFFFFFF  # Java's Integer.MAX_VALUE: Pulsar's hashes keep the low 31 bits
_UINT32 = 0xFFFFFFFF
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"  # read back as native 16-bit units
# Java hashes are computed in Python, a loop over the key: each router keeps the last keys' hashes.
MAX_CACHED_KEYS = 4096

KeyHash = Callable[[str], int]


def java_string_hash(key: str) -> int:
    """Pulsar's JavaStringHash: Java's `key.hashCode()` (31 * h + c over the UTF-16 code units,
    32-bit) & Integer.MAX_VALUE, so that Java and Python producers route a key alike."""
    # Java's chars are UTF-16 code units (a lone surrogate included); ASCII ones are its bytes.
    units: bytes | memoryview = (
        key.encode() if key.isascii() else memoryview(key.encode(_UTF16, "surrogatepass")).cast("H"))
    h = 0
    for unit in units:
        h = (31 * h + unit) & _UINT32
    return h & _INT_MAX


def murmur3_32_hash(key: str) -> int:
    """Pulsar's Murmur3_32Hash: MurmurHash3 x86 32-bit, seed 0, of the key's UTF-8 bytes,
    & Integer.MAX_VALUE."""
    return mmh3.hash(key) & _INT_MAX  # mmh3 hashes a str's UTF-8 bytes


def key_hash(scheme: HashingScheme) -> KeyHash:
    """The hash function of a hashing scheme."""
    return java_string_hash if scheme is HashingScheme.JavaStringHash else murmur3_32_hash


class Router(abc.ABC):
    """Chooses the partition of a message from its key, for one producer."""

    __slots__ = ("_cache", "_hash")

    def __init__(self, hash_key: KeyHash) -> None:
        self._hash = hash_key
        self._cache: dict[str, int] = {}

    def key_partition(self, key: str, num_partitions: int) -> int:
        cache = self._cache
        h = cache.get(key)
        if h is None:
            if len(cache) >= MAX_CACHED_KEYS:
                cache.clear()
            h = cache[key] = self._hash(key)
        return h % num_partitions

    @abc.abstractmethod
    def choose(self, key: str | None, num_partitions: int) -> int:
        """The partition, in 0..num_partitions-1, of a message with this key (None: no key)."""


class RoundRobinRouter(Router):
    """Pulsar's RoundRobinPartitionMessageRouter. Batching on: every message of one batching window
    (time / max publish delay) goes to one partition, so it fills one batch; the next window to the
    next partition. Batching off: one message to each partition in turn. Either way it starts at a
    random partition, so that many producers do not all start at partition 0."""

    __slots__ = ("_clock", "_next", "_num_partitions", "_partition", "_start", "_window_end", "_window_ns")

    def __init__(self, hash_key: KeyHash, window: float | None, start: int,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        super().__init__(hash_key)
        self._window_ns = None if window is None else max(1, round(window * 1e9))
        self._start = start
        self._next = start
        self._clock = clock
        # The current window's partition, for that many partitions, until the window ends: one
        # clock reading and a comparison per message, the arithmetic once per window.
        self._window_end = 0
        self._num_partitions = 0
        self._partition = 0

    def choose(self, key: str | None, num_partitions: int) -> int:
        if key is not None:
            return self.key_partition(key, num_partitions)
        if self._window_ns is not None:
            if self._clock() < self._window_end and num_partitions == self._num_partitions:
                return self._partition
            return self._next_window(num_partitions)
        index = self._next
        self._next = index + 1
        return index % num_partitions

    def _next_window(self, num_partitions: int) -> int:
        window = self._window_ns
        assert window is not None
        index = self._clock() // window
        self._window_end = (index + 1) * window
        self._num_partitions = num_partitions
        self._partition = partition = (index + self._start) % num_partitions
        return partition


class SinglePartitionRouter(Router):
    """Pulsar's SinglePartitionMessageRouter: every message without a key to one partition, chosen
    at random when the producer starts."""

    __slots__ = ("_index",)

    def __init__(self, hash_key: KeyHash, index: int) -> None:
        super().__init__(hash_key)
        self._index = index

    def choose(self, key: str | None, num_partitions: int) -> int:
        if key is not None:
            return self.key_partition(key, num_partitions)
        return self._index


def make_router(config: ProducerConfig, num_partitions: int, rng: random.Random | None = None) -> Router | None:
    """The router of a producer's routing mode; None with CustomPartition (see custom_partition)."""
    rng = rng or random.Random()
    hash_key = key_hash(config.hashing_scheme)
    mode = config.message_routing_mode
    if mode is PartitionsRoutingMode.CustomPartition:
        return None
    if mode is PartitionsRoutingMode.UseSinglePartition:
        return SinglePartitionRouter(hash_key, rng.randrange(num_partitions))
    window = config.batching_max_publish_delay if config.batching_enabled else None
    return RoundRobinRouter(hash_key, window, rng.randrange(num_partitions))


def custom_partition(router: MessageRouter, message: OutgoingMessage, num_partitions: int, topic: str) -> int:
    """Ask the application's router for a message's partition. Whatever the router raises fails
    that send; an answer that is no partition index fails it with InvalidArgumentError."""
    partition = router(message, num_partitions)
    if partition.__class__ is not int:
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise InvalidArgumentError(
                f"message_router returned {partition!r} for a message to {topic}: it must return a partition "
                f"index, an int from 0 to {num_partitions - 1}")
        partition = int(partition)
    if not 0 <= partition < num_partitions:
        raise InvalidArgumentError(
            f"message_router returned partition {partition} for a message to {topic}, which has {num_partitions} "
            f"partitions: return an index from 0 to {num_partitions - 1}")
    return partition
