"""The producer's split of a message too large for the topic into chunk entries: each fits the max
message size with its header and metadata, they share a uuid and carry consecutive chunk and
sequence ids, and their payloads put back together in order are the message's payload."""

from __future__ import annotations

import asyncio
import os

import pytest
from herald.api.v1 import entry_pb2
from herald.client import chunking
from herald.client.accumulator import BatchAccumulator, PendingOp
from herald.common.codec.compression import decompress
from herald.common.codec.entry import EntryMetadata, decode_entry, iter_records
from herald.common.codec.message_id import MessageId
from herald.common.errors import MessageTooLargeError, ProducerClosedError
from hypothesis import given, settings
from hypothesis import strategies as st


def metadata(sequence_id: int = 7, **fields: object) -> EntryMetadata:
    return EntryMetadata(producer_name="prod", sequence_id=sequence_id, highest_sequence_id=sequence_id,
                         num_messages=1, publish_time=1_700_000_000_000, **fields)  # type: ignore[arg-type]


def reassemble(entries: list[bytes]) -> tuple[list[EntryMetadata], bytes]:
    parts = [decode_entry(entry) for entry in entries]
    return [meta for meta, _ in parts], b"".join(bytes(payload) for _, payload in parts)


def test_chunks_fit_the_limit_share_a_uuid_and_rebuild_the_payload() -> None:
    payload = os.urandom(10_000)
    entries = chunking.split(metadata(deliver_at_time=99, partition_key="k"), payload, 1024)
    metas, rebuilt = reassemble(entries)
    assert rebuilt == payload
    assert all(len(entry) <= 1024 for entry in entries)
    assert len(entries) == len(metas) == -(-10_000 // chunking.chunk_payload_size(metadata(), 1024))
    assert [m.chunk_id for m in metas] == list(range(len(entries)))
    assert {m.uuid for m in metas} == {"prod-7"}
    assert {(m.num_chunks, m.total_chunk_size) for m in metas} == {(len(entries), 10_000)}
    # One sequence id per chunk, consecutive from the message's.
    assert [(m.sequence_id, m.highest_sequence_id) for m in metas] == [(7 + i, 7 + i) for i in range(len(entries))]
    assert all((m.num_messages, m.batched, m.deliver_at_time, m.partition_key) == (1, False, 99, "k") for m in metas)


@settings(max_examples=50)
@given(st.binary(min_size=1, max_size=5000), st.integers(300, 2000), st.integers(0, 2**62))
def test_any_payload_splits_into_fitting_chunks_that_rebuild_it(payload: bytes, limit: int, sequence_id: int) -> None:
    entries = chunking.split(metadata(sequence_id), payload, limit)
    metas, rebuilt = reassemble(entries)
    assert rebuilt == payload
    assert all(len(entry) <= limit for entry in entries)
    assert [m.sequence_id for m in metas] == list(range(sequence_id, sequence_id + len(entries)))


def test_a_limit_with_no_room_for_a_payload_is_refused() -> None:
    with pytest.raises(MessageTooLargeError, match="leaves no room for a chunk's payload"):
        chunking.split(metadata(), b"x" * 100, 40)


def test_a_payload_past_what_a_chunked_message_may_carry_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunking, "MAX_CHUNKED_SIZE", 1000)
    with pytest.raises(MessageTooLargeError, match="1001 bytes is larger than 1000 bytes"):
        chunking.split(metadata(), b"x" * 1001, 500)


# ---- the accumulator's side ----

def make(emitted: list[PendingOp], chunk_limit: int, compression: int = entry_pb2.NONE) -> BatchAccumulator:
    return BatchAccumulator(max_messages=1000, max_bytes=1 << 20, max_delay=60.0, batched=False,
                            emit=emitted.append, loop=asyncio.get_running_loop(), producer_name="prod",
                            compression=compression, chunk_limit=chunk_limit)


def send(acc: BatchAccumulator, value: bytes, **options: object) -> asyncio.Future[MessageId]:
    future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
    acc.append(value, options.get("key"), options.get("properties"), 0,  # type: ignore[arg-type]
               options.get("sequence_id"), future)  # type: ignore[arg-type]
    return future


async def test_a_message_over_the_limit_becomes_chunk_ops_the_last_holding_its_waiter() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, chunk_limit=2048)
    acc.next_sequence_id = 10
    value = os.urandom(5000)
    future = send(acc, value, key="k", properties={"a": "b"})
    after = send(acc, b"small")
    chunks, small = emitted[:-1], emitted[-1]
    assert len(chunks) == 3
    assert [op.sequence_id for op in chunks] == [10, 11, 12] and small.sequence_id == 13
    assert acc.next_sequence_id == 14
    assert [op.chunks_after for op in chunks] == [2, 1, 0]
    assert [op.settles for op in chunks] == [0, 0, 1] and small.settles == 1
    assert [len(op.waiters) for op in chunks] == [0, 0, 1]
    assert chunks[-1].size > 5000 and chunks[0].size == 0
    assert all(not op.batched and op.num_messages == 1 and len(op.entry) <= 2048 for op in chunks)
    _, payload = reassemble([op.entry for op in chunks])
    (record,) = iter_records(payload)
    assert (record.value, record.key, record.properties) == (value, "k", {"a": "b"})
    assert decode_entry(small.entry)[0].num_chunks == 0
    # The message is stored once its last chunk is: its id is that chunk's.
    for entry_id, op in enumerate(chunks):
        op.complete(3, entry_id, -1)
    assert await future == MessageId(3, 2, -1, -1)
    assert not after.done()


async def test_a_message_that_fits_is_not_chunked() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, chunk_limit=2048)
    send(acc, b"x" * 1000)
    (op,) = emitted
    meta = decode_entry(op.entry)[0]
    assert (meta.num_chunks, meta.uuid, op.chunks_after) == (0, "", 0)


@pytest.mark.parametrize("codec", [entry_pb2.LZ4, entry_pb2.ZLIB, entry_pb2.ZSTD])
async def test_a_compressed_message_is_chunked_after_compression(codec: int) -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, chunk_limit=1024, compression=codec)
    value = os.urandom(3000)  # does not compress: still several chunks
    send(acc, value)
    metas, payload = reassemble([op.entry for op in emitted])
    assert len(metas) > 1
    assert {(m.compression, m.total_chunk_size) for m in metas} == {(codec, len(payload))}
    (record,) = iter_records(decompress(codec, payload, metas[0].uncompressed_size, metas[0].uncompressed_size))
    assert record.value == value


async def test_compression_that_makes_a_message_fit_sends_it_as_one_chunk() -> None:
    # Larger than the limit before compression: an unchunked entry may not declare that much
    # uncompressed (consumers bound decompression by the max message size), a chunk may.
    emitted: list[PendingOp] = []
    acc = make(emitted, chunk_limit=1024, compression=entry_pb2.ZSTD)
    send(acc, b"a" * 50_000)
    (op,) = emitted
    metadata = decode_entry(op.entry)[0]
    assert (metadata.num_chunks, metadata.uncompressed_size, op.settles) == (1, 50_005, 1)
    send(acc, b"a" * 1000)  # within the limit: no chunk
    assert decode_entry(emitted[1].entry)[0].num_chunks == 0


async def test_a_message_that_cannot_be_chunked_goes_whole_for_the_broker_to_refuse() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, chunk_limit=40)
    send(acc, b"x" * 100)
    (op,) = emitted
    meta, payload = decode_entry(op.entry)
    assert (meta.num_chunks, op.settles) == (0, 1)
    assert [r.value for r in iter_records(payload)] == [b"x" * 100]


async def test_failing_a_chunk_op_fails_only_the_last_ones_waiter() -> None:
    emitted: list[PendingOp] = []
    acc = make(emitted, chunk_limit=1024)
    future = send(acc, os.urandom(3000))
    seen: list[BaseException | None] = []
    for op in emitted:
        op.fail(ProducerClosedError("producer closed"))
        seen.append(future.exception() if future.done() else None)
    assert seen[:-1] == [None] * (len(emitted) - 1)
    assert isinstance(seen[-1], ProducerClosedError)
