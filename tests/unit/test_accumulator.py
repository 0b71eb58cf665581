"""The producer's accumulator: when a batch closes, what the closed entry holds, and how its
messages learn their ids."""

from __future__ import annotations

import asyncio
import time

import pytest
from herald.api.v1 import entry_pb2
from herald.client.accumulator import BatchAccumulator, KeyBasedAccumulator, PendingOp, Waiter
from herald.common.codec.compression import decompress
from herald.common.codec.entry import decode_entry, entry_checksum_ok, iter_records
from herald.common.codec.message_id import MessageId
from herald.common.errors import HeraldError, ProducerClosedError
from hypothesis import given, settings
from hypothesis import strategies as st


def make(
    emitted: list[PendingOp], *, max_messages: int = 1000, max_bytes: int = 128 * 1024, max_delay: float = 60.0,
    batched: bool = True,
) -> BatchAccumulator:
    return BatchAccumulator(max_messages=max_messages, max_bytes=max_bytes, max_delay=max_delay, batched=batched,
                            emit=emitted.append, loop=asyncio.get_running_loop(), producer_name="p")


def add(acc: BatchAccumulator, value: bytes, sequence_id: int, **kwargs: object) -> asyncio.Future[MessageId]:
    future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
    acc.append(value, kwargs.get("key"), kwargs.get("properties"), kwargs.get("event_time", 0),  # type: ignore[arg-type]
               sequence_id, future)
    return future


async def test_batch_closes_when_it_holds_max_messages() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, max_messages=3)
    for seq in range(7):
        add(acc, b"x", seq)
    assert [op.num_messages for op in emitted] == [3, 3]
    assert [(op.sequence_id, op.highest_sequence_id) for op in emitted] == [(0, 2), (3, 5)]
    assert acc.count == 1
    acc.flush()
    assert [op.num_messages for op in emitted] == [3, 3, 1]
    assert acc.count == 0


async def test_batch_closes_before_a_message_that_would_pass_max_bytes() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, max_bytes=100)
    add(acc, b"a" * 40, 0)  # 45 bytes with its record header
    add(acc, b"b" * 40, 1)  # 90
    assert emitted == []
    add(acc, b"c" * 40, 2)  # would be 135: the first two close without it
    assert [op.num_messages for op in emitted] == [2]
    assert acc.count == 1 and acc.nbytes == 45


async def test_message_larger_than_max_bytes_goes_alone() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, max_bytes=100)
    add(acc, b"small", 0)
    add(acc, b"L" * 500, 1)
    assert [op.num_messages for op in emitted] == [1, 1]
    assert acc.count == 0


async def test_batch_closes_after_the_max_publish_delay_from_its_first_message() -> None:
    emitted: list[PendingOp] = []
    closed = asyncio.Event()

    def emit(op: PendingOp) -> None:
        emitted.append(op)
        closed.set()

    acc = BatchAccumulator(max_messages=1000, max_bytes=1 << 20, max_delay=0.01, batched=True, emit=emit,
                           loop=asyncio.get_running_loop())
    add(acc, b"one", 0)
    add(acc, b"two", 1)
    assert emitted == []
    await asyncio.wait_for(closed.wait(), 5)
    assert [op.num_messages for op in emitted] == [2]
    # A batch closed early by size cancels its timer: nothing more is emitted for it.
    closed.clear()
    acc.max_messages = 1
    add(acc, b"three", 2)
    assert [op.num_messages for op in emitted] == [2, 1]


async def test_records_round_trip_through_the_entry() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    add(acc, b"plain", 10)
    add(acc, b"keyed", 11, key="k", properties={"a": "1", "b": "2"}, event_time=1234)
    add(acc, b"", 12)
    acc.flush()
    (op,) = emitted
    metadata, payload = decode_entry(op.entry)
    assert (metadata.producer_name, metadata.sequence_id, metadata.highest_sequence_id) == ("p", 10, 12)
    assert metadata.num_messages == 3 and metadata.batched
    assert metadata.publish_time > 0
    assert metadata.uncompressed_size == len(payload)
    records = list(iter_records(payload))
    assert [r.value for r in records] == [b"plain", b"keyed", b""]
    assert records[1].key == "k" and records[1].properties == {"a": "1", "b": "2"}
    assert records[1].event_time == 1234
    # Contiguous sequence ids are implied by the batch's first; none is written per record.
    assert [r.sequence_id for r in records] == [None, None, None]


async def test_non_contiguous_sequence_ids_are_written_per_record() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    add(acc, b"a", 5)
    add(acc, b"b", 100)
    add(acc, b"c", 101)
    add(acc, b"d", 8)
    acc.flush()
    (op,) = emitted
    assert (op.sequence_id, op.highest_sequence_id) == (5, 101)
    assert [r.sequence_id for r in iter_records(decode_entry(op.entry)[1])] == [None, 100, 101, None]


async def test_entry_checksum_verifies_and_catches_corruption() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    add(acc, b"payload", 0)
    acc.flush()
    entry = emitted[0].entry
    assert entry_checksum_ok(entry)
    corrupt = bytearray(entry)
    corrupt[-2] ^= 0x01
    assert not entry_checksum_ok(bytes(corrupt))


async def test_unbatched_messages_each_close_an_entry_of_their_own() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, batched=False)
    first = add(acc, b"a", 0)
    add(acc, b"b", 1)
    assert [op.num_messages for op in emitted] == [1, 1]
    assert not decode_entry(emitted[0].entry)[0].batched
    emitted[0].complete(3, 4, -1)
    assert await first == MessageId(3, 4, -1, -1)


async def test_receipt_gives_each_message_its_batch_index() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    futures = [add(acc, b"m", seq) for seq in range(3)]
    seen: list[tuple[HeraldError | None, MessageId | None]] = []
    acc.append(b"cb", None, None, 0, 3, lambda error, mid: seen.append((error, mid)))
    acc.flush()
    emitted[0].complete(7, 9, 2)
    assert [f.result() for f in futures] == [MessageId(7, 9, 2, i) for i in range(3)]
    assert seen == [(None, MessageId(7, 9, 2, 3))]


async def test_failure_reaches_every_future_and_callback_and_flush_waiter() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    future = add(acc, b"m", 0)
    seen: list[HeraldError | None] = []
    waiter: Waiter = lambda error, mid: seen.append(error)  # noqa: E731
    acc.append(b"cb", None, None, 0, 1, waiter)
    acc.flush()
    op = emitted[0]
    op.flushed = asyncio.get_running_loop().create_future()
    error = ProducerClosedError("producer closed")
    op.fail(error)
    with pytest.raises(ProducerClosedError):
        await future
    with pytest.raises(ProducerClosedError):
        await op.flushed
    assert seen == [error]


async def test_failing_the_open_batch_empties_it() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    future = add(acc, b"m", 0)
    assert acc.fail(ProducerClosedError("producer closed")) == 1
    assert acc.count == 0 and acc.nbytes == 0
    with pytest.raises(ProducerClosedError, match="producer closed"):
        await future
    acc.flush()
    assert emitted == []


def test_a_raising_callback_does_not_stop_the_others() -> None:
    seen: list[MessageId | None] = []

    def bad(error: HeraldError | None, mid: MessageId | None) -> None:
        raise RuntimeError("user bug")

    op = PendingOp(0, 1, 2, b"", True, [bad, lambda error, mid: seen.append(mid)])
    op.complete(1, 1, -1)
    assert seen == [MessageId(1, 1, -1, 1)]


values = st.binary(max_size=200)
keys = st.none() | st.text(max_size=10)
props = st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)


@settings(max_examples=50)
@given(st.lists(st.tuples(values, keys, props, st.integers(0, 2**40)), min_size=1, max_size=50))
def test_any_batch_round_trips(messages: list[tuple[bytes, str | None, dict[str, str] | None, int]]) -> None:
    async def run() -> list[PendingOp]:
        emitted: list[PendingOp] = []
        acc = make(emitted, max_bytes=1000)
        for seq, (value, key, properties, event_time) in enumerate(messages):
            acc.append(value, key, properties, event_time, seq, lambda error, mid: None)
        acc.flush()
        return emitted

    emitted = asyncio.run(run())
    got = [(r.value, r.key, r.properties or None, r.event_time)
           for op in emitted for r in iter_records(decode_entry(op.entry)[1])]
    assert got == [(v, k, p or None, t) for v, k, p, t in messages]
    assert sum(op.num_messages for op in emitted) == len(messages)
    assert all(op.sequence_id + op.num_messages - 1 == op.highest_sequence_id for op in emitted)


# ---- sequence ids ----

async def test_messages_without_a_sequence_id_take_the_next_one() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    acc.next_sequence_id = 40
    for _ in range(3):
        acc.append(b"m", None, None, 0, None, asyncio.get_running_loop().create_future())
    acc.append(b"explicit", None, None, 0, 100, asyncio.get_running_loop().create_future())
    acc.append(b"after", None, None, 0, None, asyncio.get_running_loop().create_future())
    acc.flush()
    (op,) = emitted
    assert (op.sequence_id, op.highest_sequence_id) == (40, 101)
    assert [r.sequence_id for r in iter_records(decode_entry(op.entry)[1])] == [None, None, None, 100, 101]
    assert acc.next_sequence_id == 102


async def test_an_explicit_sequence_id_below_the_next_does_not_move_it_back() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    add(acc, b"a", 10)
    add(acc, b"b", 3)
    assert acc.next_sequence_id == 11


# ---- keys of an entry (Default batching) ----

async def test_entry_carries_the_key_all_its_messages_share() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    for seq in range(3):
        acc.append(b"v", "k", {"p": "1"} if seq == 1 else None, 0, seq, _noop, b"ok")
    acc.flush()
    metadata = decode_entry(emitted[0].entry)[0]
    assert (metadata.partition_key, metadata.ordering_key) == ("k", b"ok")


@pytest.mark.parametrize(("second", "expected"), [
    (("other", None), ("", b"")),  # another key
    (("k", b"ordering"), ("k", b"")),  # the same key, and an ordering key the others lack
    ((None, None), ("", b"")),  # no key at all
])
async def test_entry_carries_only_the_keys_all_its_messages_share(
    second: tuple[str | None, bytes | None], expected: tuple[str, bytes],
) -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    acc.append(b"v", "k", None, 0, 0, _noop)
    acc.append(b"v", second[0], None, 0, 1, _noop, second[1])
    acc.append(b"v", "k", None, 0, 2, _noop)
    acc.flush()
    metadata = decode_entry(emitted[0].entry)[0]
    assert (metadata.partition_key, metadata.ordering_key) == expected


async def test_an_unkeyed_first_message_leaves_the_entry_without_a_key() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    acc.append(b"v", None, None, 0, 0, _noop)
    acc.append(b"v", "k", None, 0, 1, _noop)
    acc.flush()
    assert decode_entry(emitted[0].entry)[0].partition_key == ""
    # The next batch starts afresh: its one key is the entry's.
    acc.append(b"v", "k", None, 0, 2, _noop)
    acc.flush()
    assert decode_entry(emitted[1].entry)[0].partition_key == "k"


async def test_an_unbatched_message_gives_its_entry_its_key() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, batched=False)
    acc.append(b"v", "k", None, 0, 0, _noop, b"o")
    metadata = decode_entry(emitted[0].entry)[0]
    assert (metadata.partition_key, metadata.ordering_key, metadata.batched) == ("k", b"o", False)


# ---- an entry of its own (deliver-at times) ----

async def test_a_message_sent_alone_follows_the_open_batch_in_an_unbatched_entry() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    first = add(acc, b"a", 0)
    add(acc, b"b", 1)
    alone: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
    acc.append_alone(b"later", "k", None, 0, None, alone, None, 1_900_000_000_000)
    after = add(acc, b"c", 3)
    assert [op.num_messages for op in emitted] == [2, 1]
    metadata, payload = decode_entry(emitted[1].entry)
    assert metadata.deliver_at_time == 1_900_000_000_000 and not metadata.batched
    assert (metadata.sequence_id, metadata.partition_key) == (2, "k")
    assert [r.value for r in iter_records(payload)] == [b"later"]
    # The batch after it is a normal one again, with no deliver-at time.
    acc.flush()
    metadata = decode_entry(emitted[2].entry)[0]
    assert (metadata.deliver_at_time, metadata.batched) == (0, True)
    emitted[1].complete(1, 7, -1)
    assert await alone == MessageId(1, 7, -1, -1)
    assert not first.done() and not after.done()


# ---- compression ----

@pytest.mark.parametrize("codec", [entry_pb2.LZ4, entry_pb2.ZLIB, entry_pb2.ZSTD])
async def test_closed_batch_payload_is_compressed_once_and_decompresses_to_its_records(codec: int) -> None:
    emitted: list[PendingOp] = []
    acc = BatchAccumulator(max_messages=1000, max_bytes=1 << 20, max_delay=60.0, batched=True, emit=emitted.append,
                           loop=asyncio.get_running_loop(), producer_name="p", compression=codec)
    values = [b"hello %d " % i * 20 for i in range(50)]
    for seq, value in enumerate(values):
        acc.append(value, "k" if seq % 2 else None, None, 0, seq, _noop)
    acc.flush()
    (op,) = emitted
    metadata, payload = decode_entry(op.entry)
    assert metadata.compression == codec
    assert len(payload) < metadata.uncompressed_size == op.size
    records = list(iter_records(decompress(codec, payload, metadata.uncompressed_size, metadata.uncompressed_size)))
    assert [r.value for r in records] == values


async def test_an_uncompressed_batch_says_so() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    add(acc, b"plain", 0)
    acc.flush()
    metadata, payload = decode_entry(emitted[0].entry)
    assert metadata.compression == entry_pb2.NONE and metadata.uncompressed_size == len(payload)


# ---- KeyBased batching ----

def make_key_based(emitted: list[PendingOp], *, max_messages: int = 1000, max_delay: float = 60.0,
                   max_bytes: int = 128 * 1024) -> KeyBasedAccumulator:
    return KeyBasedAccumulator(max_messages=max_messages, max_bytes=max_bytes, max_delay=max_delay,
                               emit=emitted.append, loop=asyncio.get_running_loop(), producer_name="p")


def keyed(acc: KeyBasedAccumulator, value: bytes, key: str | None, ordering_key: bytes | None = None,
          ) -> asyncio.Future[MessageId]:
    future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
    acc.append(value, key, None, 0, None, future, ordering_key)
    return future


def contents(op: PendingOp) -> tuple[str, list[bytes]]:
    metadata, payload = decode_entry(op.entry)
    return metadata.partition_key, [r.value for r in iter_records(payload)]


async def test_key_based_batching_keeps_one_batch_per_key() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted)
    acc.next_sequence_id = 10
    for value, key in [(b"a1", "a"), (b"b1", "b"), (b"a2", "a"), (b"n1", None), (b"b2", "b")]:
        keyed(acc, value, key)
    assert emitted == [] and acc.count == 5 and acc.open_batches == 3
    acc.flush()
    # Closed in the order the batches were started, each entry holding one key.
    assert [contents(op) for op in emitted] == [("a", [b"a1", b"a2"]), ("b", [b"b1", b"b2"]), ("", [b"n1"])]
    # Sequence ids are given at closing: contiguous in an entry, ascending from entry to entry.
    assert [(op.sequence_id, op.highest_sequence_id) for op in emitted] == [(10, 11), (12, 13), (14, 14)]
    assert all(r.sequence_id is None for op in emitted for r in iter_records(decode_entry(op.entry)[1]))
    assert acc.next_sequence_id == 15 and acc.count == 0


async def test_key_based_batching_groups_by_ordering_key_before_key() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted)
    keyed(acc, b"1", "x", b"order")
    keyed(acc, b"2", "y", b"order")
    keyed(acc, b"3", "x")
    acc.flush()
    first, second = (decode_entry(op.entry)[0] for op in emitted)
    assert (first.ordering_key, first.partition_key, first.num_messages) == (b"order", "", 2)
    assert (second.ordering_key, second.partition_key, second.num_messages) == (b"", "x", 1)


async def test_key_based_batches_close_by_their_own_limits() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted, max_messages=2)
    keyed(acc, b"a1", "a")
    keyed(acc, b"b1", "b")
    keyed(acc, b"a2", "a")  # a's batch is full: it closes alone
    assert [contents(op) for op in emitted] == [("a", [b"a1", b"a2"])]
    assert (emitted[0].sequence_id, emitted[0].highest_sequence_id) == (0, 1)
    keyed(acc, b"a3", "a")
    acc.flush()
    assert [contents(op) for op in emitted[1:]] == [("b", [b"b1"]), ("a", [b"a3"])]
    assert [op.sequence_id for op in emitted] == [0, 2, 3]


async def test_key_based_batch_closes_after_the_max_publish_delay() -> None:
    emitted: list[PendingOp] = []
    both = asyncio.Event()

    def emit(op: PendingOp) -> None:
        emitted.append(op)
        if len(emitted) == 2:
            both.set()

    acc = KeyBasedAccumulator(max_messages=1000, max_bytes=1 << 20, max_delay=0.01, emit=emit,
                              loop=asyncio.get_running_loop())
    keyed(acc, b"a1", "a")
    keyed(acc, b"b1", "b")
    assert emitted == []
    await asyncio.wait_for(both.wait(), 5)
    assert sorted(contents(op) for op in emitted) == [("a", [b"a1"]), ("b", [b"b1"])]
    assert sorted(op.sequence_id for op in emitted) == [0, 1]


async def test_key_based_message_with_an_explicit_sequence_id_goes_alone_after_the_open_batches() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted)
    keyed(acc, b"a1", "a")
    keyed(acc, b"b1", "b")
    acc.append(b"explicit", "a", None, 0, 50, _noop)
    keyed(acc, b"a2", "a")
    acc.flush()
    assert [contents(op) for op in emitted] == [("a", [b"a1"]), ("b", [b"b1"]), ("a", [b"explicit"]),
                                                 ("a", [b"a2"])]
    assert [op.sequence_id for op in emitted] == [0, 1, 50, 51]
    assert not emitted[2].batched


async def test_key_based_message_sent_alone_flushes_every_open_batch_first() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted)
    keyed(acc, b"a1", "a")
    keyed(acc, b"b1", "b")
    acc.append_alone(b"later", "c", None, 0, None, _noop, None, 123)
    assert [contents(op) for op in emitted] == [("a", [b"a1"]), ("b", [b"b1"]), ("c", [b"later"])]
    assert decode_entry(emitted[2].entry)[0].deliver_at_time == 123
    assert [op.sequence_id for op in emitted] == [0, 1, 2]


async def test_key_based_failure_reaches_every_open_batch() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted)
    futures = [keyed(acc, b"v", key) for key in ("a", "b", "a")]
    assert acc.fail(ProducerClosedError("producer closed")) == 3
    for future in futures:
        with pytest.raises(ProducerClosedError):
            await future
    acc.flush()
    assert emitted == []
    keyed(acc, b"again", "a")
    acc.flush()
    assert emitted[0].sequence_id == 0


async def test_key_based_drops_idle_batches_of_many_keys() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted, max_messages=1)
    for i in range(2500):
        keyed(acc, b"v", f"key-{i}")  # each closes at once: its batch stays, empty
    assert len(acc._batches) <= 1001
    assert len(emitted) == 2500


async def test_key_based_producer_name_and_limits_reach_every_batch() -> None:
    emitted: list[PendingOp] = []
    acc = make_key_based(emitted)
    keyed(acc, b"v", "a")
    acc.producer_name = "renamed"
    acc.set_limits(10, 0)
    keyed(acc, b"w" * 20, "a")  # over the new max_bytes: the open batch closes first
    keyed(acc, b"x", "b")
    acc.flush()
    assert [decode_entry(op.entry)[0].producer_name for op in emitted] == ["renamed"] * 3
    assert [op.num_messages for op in emitted] == [1, 1, 1]


# ---- what an entry's receipt settles ----

async def test_pending_op_settles_its_messages_and_counts_their_bytes() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted)
    add(acc, b"12345", 0)
    add(acc, b"678", 1)
    acc.flush()
    (op,) = emitted
    assert (op.settles, op.size, op.chunks_after) == (2, 2 * 5 + 5 + 3, 0)
    assert op.created <= time.monotonic()


def _noop(error: HeraldError | None, message_id: MessageId | None) -> None:
    pass
