"""What an entry's metadata claims is never what anything is sized by (issue 16, items 3 and 5):
the flow permits an entry takes (permits_of, the broker's and the consumer's alike) stay within what
its payload can hold; the consumer sizes ack bitmaps and batch handling by the records it decodes
and gives back at once the permits the broker took beyond them; a chunked message announcing more
than max_chunked_message_size is refused chunk by chunk, and one whose whole payload would
decompress past it is dropped without being inflated."""

from __future__ import annotations

import logging
import tracemalloc
import zlib

import pytest
from herald.api.v1 import broker_pb2, entry_pb2
from herald.broker.core.dispatcher import ReadEntry
from herald.broker.core.managed_ledger import Position
from herald.client.chunk_assembly import ChunkAssembler
from herald.client.config import ClientConfig, ConsumerConfig, ReaderConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.topic_consumer import TopicConsumer
from herald.common.codec.entry import (
    EntryMetadata,
    encode_entry,
    entry_permits,
    pack_record,
    permits_of,
    records_capacity,
)
from herald.common.codec.message_id import MessageId
from herald.common.errors import InvalidArgumentError, MessageTooLargeError

from tests.unit.test_chunk_assembly import NOW_MS, chunks, delivered

TOPIC = "persistent://public/default/claims"
MIB = 1024 * 1024


def batch(claimed: int, *values: bytes, **fields: object) -> bytes:
    payload = bytearray()
    for value in values:
        pack_record(payload, value)
    metadata = EntryMetadata(producer_name="p", sequence_id=0, highest_sequence_id=0, num_messages=claimed,
                             batched=True, **fields)  # type: ignore[arg-type]
    return encode_entry(metadata, payload)


def offline_consumer(**options: object) -> TopicConsumer[bytes]:
    config = ClientConfig("herald://127.0.0.1:1")
    pool = ConnectionPool(config)
    return TopicConsumer(TOPIC, ConsumerConfig("sub", ack_group_time=10.0, **options),  # type: ignore[arg-type]
                         config, pool, LookupService(pool, config), lambda _c: None)


def deliver(consumer: TopicConsumer[bytes], data: bytes, entry_id: int = 0) -> None:
    consumer._protocol.on_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=entry_id, data=data)])


# ---- what an entry can hold, and the permits it takes ----

@pytest.mark.parametrize(("claimed", "fields", "payload_size", "capacity", "permits"), [
    (3, {}, 15, 3, 3),  # honest
    (2**31 - 1, {}, 8, 1, 1),  # one record of 3 bytes
    (0, {}, 8, 1, 1),
    (-1, {}, 8, 1, 1),
    (1000, {"compression": entry_pb2.ZLIB, "uncompressed_size": 100}, 20, 20, 20),
    (5, {"compression": entry_pb2.ZLIB, "uncompressed_size": -7}, 20, 0, 1),
    (1, {"num_chunks": 3, "total_chunk_size": 3000}, 1000, 600, 1),  # a chunk takes 1
    (2**31 - 1, {"num_chunks": 3, "total_chunk_size": 3000}, 1000, 600, 1),
], ids=["honest", "int32-max", "zero", "negative", "compressed", "negative-size", "chunk", "lying-chunk"])
def test_an_entry_takes_its_claim_in_permits_within_what_its_payload_can_hold(
    claimed: int, fields: dict[str, object], payload_size: int, capacity: int, permits: int,
) -> None:
    metadata = EntryMetadata(num_messages=claimed, **fields)  # type: ignore[arg-type]
    assert records_capacity(metadata, payload_size) == capacity
    assert permits_of(metadata, payload_size) == permits


def test_an_entry_whose_metadata_cannot_be_read_takes_one_permit() -> None:
    assert entry_permits(b"\x00" * 3) == 1
    assert entry_permits(encode_entry(EntryMetadata(), b"")[:10] + b"\xff" * 20) == 1
    assert entry_permits(batch(2**31 - 1, b"one")) == 1


def test_the_broker_counts_a_stored_lying_entry_by_what_it_can_hold() -> None:
    assert ReadEntry(Position(1, 0), batch(2**31 - 1, b"one")).num_messages == 1
    assert ReadEntry(Position(1, 1), batch(3, b"a", b"b", b"c")).num_messages == 3
    assert ReadEntry(Position(1, 2), b"garbage").num_messages == 1


def test_entry_metadata_that_does_not_parse_is_an_invalid_argument() -> None:
    from herald.common.codec.entry import decode_entry

    header = encode_entry(EntryMetadata(), b"")  # magic, crc, metadata length 0
    garbled = bytearray(header)
    garbled[6:10] = (3).to_bytes(4, "big")
    garbled += b"\xff\xff\xff"
    with pytest.raises(InvalidArgumentError, match="entry metadata does not parse"):
        decode_entry(bytes(garbled), verify=False)


# ---- the consumer sizes everything by the records it decodes ----

async def test_a_batch_claiming_int32_max_messages_costs_the_consumer_one_message() -> None:
    consumer = offline_consumer()
    tracemalloc.start()
    try:
        deliver(consumer, batch(2**31 - 1, b"one"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MIB, f"unpacking the entry took {peak} bytes"  # an ack bitmap of the claim: 256 MiB
    message = await consumer.receive(timeout=0)
    assert message is not None and message.value == b"one" and message._entry.num_messages == 1
    assert consumer._protocol.permits == 1  # the broker took 1 (permits_of); the message taken gave it back
    await consumer._shutdown()


async def test_a_batch_holding_more_records_than_it_claims_is_dropped_with_its_permits_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It used to be unpacked whole: 5 MiB of zeros under num_messages=1 were a million messages for
    # one permit (found by tests/fuzz/test_hostile_fuzz.py). No producer writes such an entry.
    consumer = offline_consumer()
    with caplog.at_level(logging.ERROR):
        deliver(consumer, batch(1, b"a", b"b", b"c"))
    assert consumer.corrupt_entries == 1 and not consumer._queue
    assert consumer._protocol.permits == 1  # the broker took 1 permit: given back at once
    assert "the entry holds more than the 1 message(s) its metadata says (num_messages)" in caplog.text
    deliver(consumer, batch(3, b"a", b"b", b"c"), entry_id=1)  # as many as it claims: delivered
    assert [m.value for m in consumer._queue] == [b"a", b"b", b"c"]
    await consumer._shutdown()


async def test_a_batch_claiming_more_than_it_holds_gives_the_difference_back_at_once() -> None:
    consumer = offline_consumer()
    deliver(consumer, batch(10, b"x" * 20, b"y" * 20))  # 50 bytes: room for 10 claimed, 2 held
    assert consumer._protocol.permits == 8
    assert [m.value for m in consumer._queue] == [b"x" * 20, b"y" * 20]
    await consumer._shutdown()


async def test_a_dropped_entry_gives_its_permits_back() -> None:
    consumer = offline_consumer()
    corrupt = bytearray(batch(3, b"a", b"b", b"c"))
    corrupt[-1] ^= 1
    deliver(consumer, bytes(corrupt))
    assert consumer.corrupt_entries == 1 and not consumer._queue
    assert consumer._protocol.permits == 3
    await consumer._shutdown()


async def test_a_bomb_in_a_batch_is_dropped_with_an_error_and_its_permits_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = offline_consumer()
    bomb = zlib.compress(bytes(64 * MIB), 9)
    with caplog.at_level(logging.ERROR):
        deliver(consumer, encode_entry(EntryMetadata(
            producer_name="p", num_messages=1, batched=True, compression=entry_pb2.ZLIB, uncompressed_size=100),
            bomb))
    assert consumer.corrupt_entries == 1 and not consumer._queue and consumer._protocol.permits == 1
    assert "decompresses with ZLIB to more than the 100 bytes its metadata says" in caplog.text
    await consumer._shutdown()


async def test_an_entry_decompressing_past_the_consumers_max_message_size_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = offline_consumer(max_message_size=1000)
    payload = bytearray()
    pack_record(payload, bytes(20_000))
    with caplog.at_level(logging.ERROR):
        deliver(consumer, encode_entry(EntryMetadata(
            producer_name="p", num_messages=1, batched=True, compression=entry_pb2.ZLIB,
            uncompressed_size=len(payload)), zlib.compress(payload)))
    assert consumer.corrupt_entries == 1
    assert f"to {len(payload)} bytes, more than the {1000 + 10 * 1024} bytes taken here" in caplog.text
    await consumer._shutdown()


# ---- chunked messages ----

def test_a_chunk_announcing_more_than_the_largest_chunked_message_is_refused() -> None:
    made = ChunkAssembler(10, False, 60.0, max_size=1000)
    (first, data), *_ = chunks(b"v" * 2000, 500)
    with pytest.raises(MessageTooLargeError, match=r"announces 200\d bytes, more than the 1000 taken here"):
        made.add((1, 0), first, data, 0.0, NOW_MS)
    assert len(made) == 0


async def test_a_chunked_message_larger_than_max_chunked_message_size_is_dropped_chunk_by_chunk() -> None:
    consumer = offline_consumer(max_chunked_message_size=1000)
    pieces = chunks(b"v" * 20_000, 5_000)
    consumer._protocol.on_entries(delivered(pieces))
    assert not consumer._queue and consumer.corrupt_entries == len(pieces)
    assert consumer._protocol.permits == len(pieces)  # a chunk takes one permit, given back
    await consumer._shutdown()


async def test_a_compressed_chunked_bomb_is_dropped_without_being_inflated() -> None:
    consumer = offline_consumer()
    # The whole payload (32 KiB of chunks) inflates to 64 MiB but claims the 100 bytes of its record.
    pieces = chunks(b"z" * 90, 10_000, compression=entry_pb2.ZLIB)
    bomb = zlib.compress(bytes(64 * MIB), 9)
    parts = [bomb[at:at + 10_000] for at in range(0, len(bomb), 10_000)]
    template = pieces[0][0]
    entries = []
    for index, part in enumerate(parts):
        metadata = EntryMetadata()
        metadata.CopyFrom(template)
        metadata.chunk_id, metadata.num_chunks, metadata.total_chunk_size = index, len(parts), len(bomb)
        entries.append((metadata, part))
    tracemalloc.start()
    try:
        consumer._protocol.on_entries(delivered(entries))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert consumer.corrupt_entries == 1 and not consumer._queue
    assert peak < 4 * len(bomb) + MIB, f"the bomb took {peak} bytes"
    await consumer._shutdown()


# ---- the settings ----

@pytest.mark.parametrize("name", ["max_message_size", "max_chunked_message_size"])
def test_the_consumers_size_bounds_are_positive_numbers_of_bytes(name: str) -> None:
    assert getattr(ConsumerConfig("s"), name) == {"max_message_size": 5 * MIB,
                                                 "max_chunked_message_size": 128 * MIB}[name]
    for bad in (0, -1, 1.5, "5"):
        with pytest.raises(InvalidArgumentError, match=f"{name} must be a positive integer"):
            ConsumerConfig("s", **{name: bad})  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match=f"{name} must be a positive integer"):
            ReaderConfig(MessageId.earliest, **{name: bad})  # type: ignore[arg-type]
