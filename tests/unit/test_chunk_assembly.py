"""Chunked messages put back together: the assembler's bookkeeping (order, interleaving, the
pending limit, expiry, strays, corrupt sizes) and the consumer's side of it (decompression, the
message's ids, acknowledging every chunk), with entries built by herald.common.codec.entry and
herald.common.codec.compression as a producer writes them."""

from __future__ import annotations

import logging
import time

import pytest
from herald.api.v1 import broker_pb2, entry_pb2
from herald.client.chunk_assembly import ChunkAssembler
from herald.client.config import ClientConfig, ConsumerConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.schema import StringSchema
from herald.client.topic_consumer import TopicConsumer
from herald.common.codec.compression import compress
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record
from herald.common.codec.message_id import MessageId
from herald.common.errors import InvalidArgumentError

TOPIC = "persistent://public/default/chunks"


def chunks(
    value: bytes, size: int, *, key: str | None = None, properties: dict[str, str] | None = None,
    compression: int = entry_pb2.NONE, sequence_id: int = 10, uuid: str = "p-10", publish_time: int | None = None,
) -> list[tuple[EntryMetadata, bytes]]:
    """The chunks of one message as the producer writes them: its record (compressed) in slices."""
    record = bytearray()
    pack_record(record, value, key=key, properties=properties)
    payload = compress(compression, record)
    parts = [payload[at:at + size] for at in range(0, len(payload), size)]
    published = int(time.time() * 1000) if publish_time is None else publish_time
    return [
        (EntryMetadata(producer_name="p", sequence_id=sequence_id + i, highest_sequence_id=sequence_id + i,
                       num_messages=1, publish_time=published, compression=compression,  # type: ignore[arg-type]
                       uncompressed_size=len(record), batched=False, uuid=uuid, chunk_id=i, num_chunks=len(parts),
                       total_chunk_size=len(payload)), part)
        for i, part in enumerate(parts)
    ]


def assembler(max_pending: int = 10, auto_ack: bool = False, expire: float = 60.0) -> ChunkAssembler:
    return ChunkAssembler(max_pending, auto_ack, expire)


NOW_MS = int(time.time() * 1000)


# ---- the assembler ----

def test_chunks_in_order_make_the_whole_payload_with_every_position() -> None:
    made = assembler()
    pieces = chunks(b"v" * 1000, 300)
    assert len(pieces) == 4
    results = [made.add((1, i), metadata, data, 0.0, NOW_MS) for i, (metadata, data) in enumerate(pieces)]
    assert results[:3] == [None, None, None]
    whole = results[3]
    assert whole is not None
    assert whole.payload == b"".join(data for _, data in pieces)
    assert whole.positions == ((1, 0), (1, 1), (1, 2), (1, 3))
    assert whole.first_sequence_id == 10
    assert len(made) == 0 and not made.to_acknowledge and not made.to_redeliver


def test_interleaved_messages_are_assembled_apart() -> None:
    made = assembler()
    first = chunks(b"a" * 50, 20, uuid="p-1", sequence_id=1)
    second = chunks(b"b" * 50, 20, uuid="p-4", sequence_id=4)
    done = []
    entry = 0
    for one, two in zip(first, second, strict=True):
        for metadata, data in (one, two):
            result = made.add((1, entry), metadata, data, 0.0, NOW_MS)
            entry += 1
            if result is not None:
                done.append(result)
    assert [d.first_sequence_id for d in done] == [1, 4]
    assert done[0].positions == ((1, 0), (1, 2), (1, 4)) and done[1].positions == ((1, 1), (1, 3), (1, 5))


@pytest.mark.parametrize("auto_ack", [True, False], ids=["auto-ack", "left-for-redelivery"])
def test_past_the_pending_limit_the_oldest_incomplete_message_is_dropped(auto_ack: bool) -> None:
    made = assembler(max_pending=2, auto_ack=auto_ack)
    for n, uuid in enumerate(["a", "b", "c"]):
        metadata, data = chunks(b"x" * 25, 10, uuid=uuid)[0]
        made.add((1, n), metadata, data, 0.0, NOW_MS)
    assert len(made) == 2 and made.dropped == 1
    if auto_ack:
        assert (made.to_acknowledge, made.to_redeliver) == ([(1, 0)], [])
    else:
        assert (made.to_acknowledge, made.to_redeliver) == ([], [(1, 0)])
    # "a" is gone: its next chunk is a stray now.
    metadata, data = chunks(b"x" * 25, 10, uuid="a")[1]
    assert made.add((1, 9), metadata, data, 0.0, NOW_MS) is None


def test_an_incomplete_message_expires_and_its_chunks_are_acknowledged() -> None:
    made = assembler(expire=5.0)
    pieces = chunks(b"x" * 25, 10)
    made.add((1, 0), *pieces[0], 100.0, NOW_MS)
    made.add((1, 1), *pieces[1], 101.0, NOW_MS)
    assert made.next_expiry() == 105.0
    assert made.expire(104.9) == 0
    assert made.expire(105.0) == 1
    assert made.to_acknowledge == [(1, 0), (1, 1)]
    assert made.next_expiry() is None and made.dropped == 1


def test_a_chunk_out_of_order_drops_its_message() -> None:
    made = assembler()
    pieces = chunks(b"x" * 40, 10)
    made.add((1, 0), *pieces[0], 0.0, NOW_MS)
    assert made.add((1, 2), *pieces[2], 0.0, NOW_MS) is None  # chunk 1 never came
    assert len(made) == 0
    assert made.to_redeliver == [(1, 0), (1, 2)] and made.to_acknowledge == []


def test_a_stray_chunk_older_than_the_expiry_is_acknowledged() -> None:
    made = assembler(expire=60.0)
    old = chunks(b"x" * 40, 10, publish_time=NOW_MS - 61_000)
    assert made.add((1, 3), *old[3], 0.0, NOW_MS) is None  # its first chunks are long gone
    assert made.to_acknowledge == [(1, 3)] and made.to_redeliver == []


def test_a_first_chunk_delivered_again_starts_the_message_over() -> None:
    made = assembler()
    pieces = chunks(b"x" * 25, 10)
    made.add((1, 0), *pieces[0], 0.0, NOW_MS)
    made.add((1, 1), *pieces[1], 0.0, NOW_MS)
    results = [made.add((1, 10 + i), metadata, data, 0.0, NOW_MS) for i, (metadata, data) in enumerate(pieces)]
    whole = results[-1]
    assert whole is not None and whole.positions == ((1, 10), (1, 11), (1, 12))
    assert made.to_redeliver == [(1, 0), (1, 1)]


def test_chunks_larger_than_announced_are_dropped_as_corrupt(caplog: pytest.LogCaptureFixture) -> None:
    made = assembler()
    pieces = chunks(b"x" * 25, 10)
    metadata, data = pieces[2]
    with caplog.at_level(logging.ERROR):
        made.add((1, 0), *pieces[0], 0.0, NOW_MS)
        made.add((1, 1), *pieces[1], 0.0, NOW_MS)
        assert made.add((1, 2), metadata, data + b"extra", 0.0, NOW_MS) is None
    assert "chunked message p-10 dropped" in caplog.text
    assert made.to_redeliver == [(1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize(("field", "value"), [("uuid", ""), ("chunk_id", 99), ("chunk_id", -1)])
def test_chunk_metadata_that_makes_no_sense_is_refused(field: str, value: object) -> None:
    metadata, data = chunks(b"x" * 25, 10)[0]
    setattr(metadata, field, value)
    with pytest.raises(InvalidArgumentError, match="bad chunk metadata"):
        assembler().add((1, 0), metadata, data, 0.0, NOW_MS)


# ---- the consumer's side ----

def offline_consumer(**options: object) -> TopicConsumer[str]:
    config = ClientConfig("herald://127.0.0.1:1")
    pool = ConnectionPool(config)
    consumer: TopicConsumer[str] = TopicConsumer(
        TOPIC, ConsumerConfig("sub", **options), config, pool, LookupService(pool, config),  # type: ignore[arg-type]
        lambda _c: None, StringSchema())
    return consumer


def delivered(pieces: list[tuple[EntryMetadata, bytes]], first_entry: int = 0) -> list[broker_pb2.DeliveredEntry]:
    return [broker_pb2.DeliveredEntry(ledger_id=7, entry_id=first_entry + i, data=encode_entry(metadata, data))
            for i, (metadata, data) in enumerate(pieces)]


@pytest.mark.parametrize("compression", [entry_pb2.NONE, entry_pb2.LZ4, entry_pb2.ZLIB, entry_pb2.ZSTD])
async def test_the_consumer_queues_a_chunked_message_once_whole_under_its_last_chunks_id(compression: int) -> None:
    consumer = offline_consumer(ack_group_time=0)
    text = "chunked " * 500
    pieces = chunks(text.encode(), 700, key="k", properties={"a": "b"}, compression=compression, sequence_id=20)
    entries = delivered(pieces)
    consumer._protocol.on_entries(entries[:-1])
    assert not consumer._queue
    consumer._protocol.on_entries(entries[-1:])
    (message,) = consumer._queue
    assert (message.value, message.key, message.properties) == (text, "k", {"a": "b"})
    assert message.message_id == MessageId(7, len(entries) - 1, -1, -1)
    assert message.sequence_id == 20
    assert consumer.stats().messages_received == 1
    await consumer._shutdown()


async def test_acknowledging_a_chunked_message_acknowledges_every_chunk() -> None:
    consumer = offline_consumer(ack_group_time=10.0)
    pieces = chunks(b"y" * 100, 30)
    consumer._protocol.on_entries(delivered(pieces, first_entry=3))
    message = await consumer.receive(0)
    assert message is not None
    consumer.acknowledge(message.message_id)  # by id works as well as by message
    individual, _ = consumer._protocol.tracker.take()
    assert individual == [(7, 3), (7, 4), (7, 5), (7, 6)]
    await consumer._shutdown()


async def test_a_chunked_message_that_does_not_decompress_is_dropped_with_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = offline_consumer()
    pieces = chunks(b"z" * 100, 30, compression=entry_pb2.ZSTD)
    metadata, data = pieces[-1]
    pieces[-1] = (metadata, bytes(len(data)))  # the right size, but not zstd
    with caplog.at_level(logging.ERROR):
        consumer._protocol.on_entries(delivered(pieces))
    assert not consumer._queue
    assert consumer.stats().dropped_entries == 1
    assert "dropped corrupt entry" in caplog.text
    await consumer._shutdown()


async def test_a_compressed_batch_is_decompressed_by_the_consumer() -> None:
    consumer = offline_consumer()
    payload = bytearray()
    for value in ("one", "two", "three"):
        pack_record(payload, value.encode())
    metadata = EntryMetadata(producer_name="p", sequence_id=0, highest_sequence_id=2, num_messages=3, batched=True,
                             compression=entry_pb2.LZ4, uncompressed_size=len(payload), publish_time=1)
    entry = encode_entry(metadata, compress(entry_pb2.LZ4, payload))
    consumer._protocol.on_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=0, data=entry)])
    assert [m.value for m in consumer._queue] == ["one", "two", "three"]
    await consumer._shutdown()


async def test_a_payload_that_does_not_decompress_to_its_announced_size_is_dropped() -> None:
    consumer = offline_consumer()
    payload = bytearray()
    pack_record(payload, b"x" * 50)
    metadata = EntryMetadata(producer_name="p", num_messages=1, batched=False, compression=entry_pb2.ZLIB,
                             uncompressed_size=len(payload) + 1, publish_time=1)
    entry = encode_entry(metadata, compress(entry_pb2.ZLIB, payload))
    consumer._protocol.on_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=0, data=entry)])
    assert not consumer._queue and consumer.corrupt_entries == 1
    await consumer._shutdown()


async def test_the_oldest_incomplete_message_dropped_by_the_consumer_is_acknowledged_when_told() -> None:
    consumer = offline_consumer(max_pending_chunked_message=1, auto_ack_oldest_chunked_message_on_queue_full=True,
                                ack_group_time=10.0)
    first = chunks(b"a" * 30, 10, uuid="a")
    second = chunks(b"b" * 30, 10, uuid="b")
    consumer._protocol.on_entries(delivered(first[:2], first_entry=0))
    consumer._protocol.on_entries(delivered(second[:1], first_entry=5))
    individual, _ = consumer._protocol.tracker.take()
    assert individual == [(7, 0), (7, 1)]
    assert consumer.stats().dropped_entries == 1
    await consumer._shutdown()
