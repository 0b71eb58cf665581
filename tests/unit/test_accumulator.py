"""The producer's accumulator: when a batch closes, what the closed entry holds, and how its
messages learn their ids."""

from __future__ import annotations

import asyncio

import pytest
from herald.client.accumulator import BatchAccumulator, PendingOp, Waiter
from herald.common.entry import decode_entry, entry_checksum_ok, iter_records
from herald.common.errors import HeraldError, ProducerClosedError
from herald.common.message_id import MessageId
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
