"""One reader of both entry formats (issue 18, items 1 to 3): herald.common.codec.entry tells a
Pulsar producer's entry from Herald's by its magic and reads either as Herald's EntryMetadata and
Records (keys, properties, event times, sequence ids, batch indexes), decompressing SNAPPY as
Pulsar's clients write it (raw snappy blocks) within the same bounds as the other codecs; the
broker's publish checks hold a Pulsar entry to Pulsar's layout; the dlq-worker moves a Pulsar entry
it cannot unpack in Pulsar's format."""

from __future__ import annotations

import struct
import zlib
from typing import cast

import cramjam
import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.api.v1 import entry_pb2
from herald.broker.core.producer import Producer, ProducerHost
from herald.common.codec import compression, pulsar_entry
from herald.common.codec.entry import (
    EntryMetadata,
    Record,
    encode_entry,
    entry_checksum_ok,
    entry_permits,
    open_entry,
    pack_record,
    read_metadata,
    records_capacity,
    unpack_entry,
)
from herald.common.errors import ChecksumError, InvalidArgumentError, MessageTooLargeError
from herald.dlq.publication import Publication, entries_after

from tests.unit.test_entry_claims import deliver, offline_consumer

LIMIT = 5 * 1024 * 1024
MIB = 1024 * 1024


def pulsar_batch(
    producer: str, sequence_id: int, messages: list[tuple[bytes, pulsar.SingleMessageMetadata]],
    codec: int = pulsar.NONE, **fields: object,
) -> bytes:
    """A Pulsar producer's batch entry as the C++ client frames it: each message's size (u32), its
    SingleMessageMetadata (payload_size set) and its data, the whole payload compressed by `codec`."""
    parts = []
    for value, single in messages:
        single.payload_size = len(value)
        meta = single.SerializeToString()
        parts.append(struct.pack(">I", len(meta)) + meta + value)
    payload = b"".join(parts)
    metadata = pulsar.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1_700_000,
                                      num_messages_in_batch=len(messages), uncompressed_size=len(payload),
                                      **fields)  # type: ignore[arg-type]
    if codec != pulsar.NONE:
        metadata.compression = codec  # type: ignore[assignment]
    return pulsar_entry.encode(metadata, compression.compress(codec, payload))


def pulsar_single(producer: str, sequence_id: int, value: bytes, codec: int = pulsar.NONE,
                  **fields: object) -> bytes:
    """A Pulsar producer's unbatched message: its key, properties and event time in the metadata."""
    metadata = pulsar.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1_700_000,
                                      uncompressed_size=len(value), **fields)  # type: ignore[arg-type]
    if codec != pulsar.NONE:
        metadata.compression = codec  # type: ignore[assignment]
    return pulsar_entry.encode(metadata, compression.compress(codec, value))


def sample_batch(codec: int = pulsar.NONE) -> bytes:
    return pulsar_batch("pp", 7, [
        (b"first", pulsar.SingleMessageMetadata(partition_key="k1", event_time=11,
                                                properties=[pulsar.KeyValue(key="a", value="1")])),
        (b"second", pulsar.SingleMessageMetadata(sequence_id=8)),
        (b"third" * 50, pulsar.SingleMessageMetadata(partition_key="k3")),
    ], codec)


# ---- reading either format ----

def test_a_pulsar_batch_reads_as_herald_metadata_and_records() -> None:
    entry = sample_batch()
    metadata = read_metadata(entry)
    assert (metadata.producer_name, metadata.sequence_id, metadata.highest_sequence_id, metadata.num_messages,
            metadata.batched, metadata.publish_time) == ("pp", 7, 9, 3, True, 1_700_000)
    read, records = unpack_entry(entry, LIMIT)
    assert read == metadata
    assert records == [Record(b"first", "k1", 11, None, {"a": "1"}), Record(b"second", None, 0, 8, {}),
                       Record(b"third" * 50, "k3", 0, None, {})]


def test_a_herald_entry_reads_as_before() -> None:
    payload = bytearray()
    pack_record(payload, b"v", "key", 5, None, {"p": "q"})
    entry = encode_entry(EntryMetadata(producer_name="h", sequence_id=1, highest_sequence_id=1, num_messages=1,
                                       batched=True), payload)
    metadata, records = unpack_entry(entry, LIMIT)
    assert metadata.producer_name == "h" and records == [Record(b"v", "key", 5, None, {"p": "q"})]
    assert entry_checksum_ok(entry) and open_entry(entry).pulsar is None


def test_an_unbatched_pulsar_message_carries_key_properties_and_event_time_in_its_metadata() -> None:
    entry = pulsar_single("pp", 3, b"value", partition_key="key", event_time=4,
                          properties=[pulsar.KeyValue(key="x", value="y")])
    metadata, records = unpack_entry(entry, LIMIT)
    assert not metadata.batched and metadata.num_messages == 1 and metadata.partition_key == "key"
    assert records == [Record(b"value", "key", 4, None, {"x": "y"})]
    assert entry_permits(entry) == 1


@pytest.mark.parametrize("codec", [pulsar.SNAPPY, pulsar.ZLIB, pulsar.LZ4, pulsar.ZSTD])
def test_compressed_pulsar_entries_are_restored(codec: int) -> None:
    _, records = unpack_entry(sample_batch(codec), LIMIT)
    assert [r.value for r in records] == [b"first", b"second", b"third" * 50]
    _, (single,) = unpack_entry(pulsar_single("pp", 0, b"x" * 1000, codec), LIMIT)
    assert single.value == b"x" * 1000


def test_a_corrupt_pulsar_entry_fails_its_checksum() -> None:
    entry = bytearray(sample_batch())
    entry[-1] ^= 0x40
    assert entry_checksum_ok(sample_batch()) and not entry_checksum_ok(bytes(entry))
    with pytest.raises(ChecksumError, match="Checksum failed"):
        read_metadata(bytes(entry))


def test_a_sequence_id_past_what_herald_stores_is_refused_clearly() -> None:
    entry = pulsar_single("pp", 2**63, b"v")  # a uint64 on Pulsar's wire; Herald's ids are int64
    with pytest.raises(InvalidArgumentError, match="sequence_id is 9223372036854775808"):
        read_metadata(entry)


def test_a_pulsar_chunk_is_read_by_a_consumer_only() -> None:
    entry = pulsar_single("pp", 0, b"part", uuid="pp-0", chunk_id=0, num_chunks_from_msg=2, total_chunk_msg_size=8)
    metadata = read_metadata(entry)
    assert (metadata.uuid, metadata.chunk_id, metadata.num_chunks, metadata.total_chunk_size) == ("pp-0", 0, 2, 8)
    with pytest.raises(InvalidArgumentError, match="chunk 0 of 2"):
        unpack_entry(entry, LIMIT)


def test_what_a_pulsar_batch_can_hold_bounds_its_permits() -> None:
    # A batched message takes 6 bytes at least (its size and a SingleMessageMetadata): 60 bytes hold 10.
    lying = pulsar_entry.encode(pulsar.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0,
                                                       num_messages_in_batch=2**31 - 1), b"\0" * 60)
    assert entry_permits(lying) == 10
    assert records_capacity(read_metadata(lying), 60, pulsar_format=True) == 10
    opened = open_entry(sample_batch())
    with pytest.raises(InvalidArgumentError, match="more messages than the 2 its metadata says"):
        list(opened.records(opened.payload, 2))


# ---- SNAPPY ----

def test_snappy_is_the_raw_block_format_and_numbered_as_pulsar_and_herald_number_it() -> None:
    assert compression.SNAPPY == pulsar.SNAPPY == entry_pb2.SNAPPY == 4
    data = b"abc" * 1000
    block = compression.compress(compression.SNAPPY, data)
    assert bytes(cramjam.snappy.decompress_raw(block)) == data  # what snappy::Uncompress reads
    assert compression.decompress(compression.SNAPPY, block, len(data), LIMIT) == data


def test_a_snappy_bomb_is_refused_before_it_is_inflated() -> None:
    block = compression.compress(compression.SNAPPY, b"\0" * (8 * 1024 * 1024))
    with pytest.raises(MessageTooLargeError):
        compression.decompress(compression.SNAPPY, block, 8 * 1024 * 1024, LIMIT)
    # The block's own claim of its size must be the declared one, else nothing is restored.
    with pytest.raises(InvalidArgumentError, match="restores to 8388608 bytes, not 100"):
        compression.decompress(compression.SNAPPY, block, 100, LIMIT)


# ---- the broker's publish checks on a Pulsar entry ----

def producer(name: str = "pp") -> Producer:
    return Producer(cast(ProducerHost, None), name, 1)  # check() does not touch the topic


def check(entry: bytes, num_messages: int, name: str = "pp", max_message_size: int = LIMIT) -> EntryMetadata:
    return producer(name).check(entry, num_messages, encryption_required=False, max_message_size=max_message_size)


def test_a_pulsar_batch_passes_the_publish_checks() -> None:
    assert check(sample_batch(pulsar.SNAPPY), 3).num_messages == 3
    assert check(pulsar_single("pp", 0, b""), 1).num_messages == 1  # an empty message is one message


def test_a_pulsar_entry_of_another_producer_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="names producer 'pp', but it was sent by producer 'other'"):
        check(sample_batch(), 3, name="other")


def test_a_pulsar_batch_count_must_agree_with_the_send_and_fit_its_payload() -> None:
    with pytest.raises(InvalidArgumentError, match="num_messages=2, but the entry's metadata says 3"):
        check(sample_batch(), 2)
    lying = pulsar_entry.encode(pulsar.MessageMetadata(producer_name="pp", sequence_id=0, publish_time=0,
                                                       num_messages_in_batch=100), b"\0" * 60)
    with pytest.raises(InvalidArgumentError, match="holds at most 10 \\(a message takes 6 bytes at least\\)"):
        check(lying, 100)


def test_a_pulsar_entry_declaring_more_than_the_max_message_size_is_refused() -> None:
    data = zlib.compress(b"\0" * MIB)
    entry = pulsar_entry.encode(pulsar.MessageMetadata(producer_name="pp", sequence_id=0, publish_time=0,
                                                       compression=pulsar.ZLIB, uncompressed_size=MIB), data)
    with pytest.raises(MessageTooLargeError, match="decompresses to 1048576 bytes"):
        check(entry, 1, max_message_size=1024)


def test_a_corrupt_pulsar_entry_is_refused_at_publish() -> None:
    entry = bytearray(sample_batch())
    entry[20] ^= 1
    with pytest.raises(ChecksumError, match="Checksum failed on the broker"):
        check(bytes(entry), 3)


def test_pulsar_chunks_are_checked_as_slices_of_one_message() -> None:
    assert check(pulsar_single("pp", 0, b"part", uuid="u", chunk_id=1, num_chunks_from_msg=2,
                               total_chunk_msg_size=8), 1).chunk_id == 1
    with pytest.raises(InvalidArgumentError, match="chunk 2 of a message of 2 chunks"):
        check(pulsar_single("pp", 0, b"part", uuid="u", chunk_id=2, num_chunks_from_msg=2,
                            total_chunk_msg_size=8), 1)
    with pytest.raises(InvalidArgumentError, match="more than the 2 bytes its metadata says the whole message"):
        check(pulsar_single("pp", 0, b"part", uuid="u", chunk_id=0, num_chunks_from_msg=2,
                            total_chunk_msg_size=2), 1)


# ---- the dlq-worker moves a Pulsar entry it cannot unpack in Pulsar's format ----

def test_an_opaque_pulsar_dead_letter_is_moved_in_its_own_format() -> None:
    stored = pulsar_single("pp", 5, b"secret", encryption_keys=[pulsar.EncryptionKeys(key="k", value=b"v")],
                           deliver_at_time=99)
    opened = open_entry(stored)
    publication = Publication(opaque=(opened.metadata, bytes(opened.payload)), opaque_pulsar=stored)
    (send,) = entries_after(publication, "dlq-name", -1, LIMIT)
    moved = read_metadata(send.entry)
    assert open_entry(send.entry).pulsar is not None and moved.producer_name == "dlq-name"
    assert (moved.sequence_id, moved.deliver_at_time, send.num_messages) == (0, 0, 1)
    assert bytes(open_entry(send.entry).payload) == b"secret"
    assert producer("dlq-name").check(send.entry, send.num_messages, encryption_required=False,
                                      max_message_size=LIMIT).encryption_keys == ["k"]


# ---- Herald's client puts a Pulsar producer's chunks together ----

async def test_herald_s_client_reassembles_a_chunked_pulsar_message() -> None:
    # As the C++ client chunks (ProducerImpl: one sequence id, uuid "<producer>-<sequence id>",
    # the whole compressed message's size in total_chunk_msg_size, the same metadata on each chunk).
    whole = b"hello chunked world" * 10
    compressed = compression.compress(compression.SNAPPY, whole)
    half = len(compressed) // 2
    consumer = offline_consumer()
    for chunk_id, piece in enumerate((compressed[:half], compressed[half:])):
        metadata = pulsar.MessageMetadata(
            producer_name="pp", sequence_id=9, publish_time=1, uuid="pp-9", chunk_id=chunk_id, num_chunks_from_msg=2,
            total_chunk_msg_size=len(compressed), compression=pulsar.SNAPPY, uncompressed_size=len(whole),
            partition_key="key", properties=[pulsar.KeyValue(key="a", value="b")], event_time=77)
        deliver(consumer, pulsar_entry.encode(metadata, piece), entry_id=chunk_id)
    (message,) = consumer._queue
    assert (message.value, message.key, message.properties, message.event_time, message.sequence_id) == (
        whole, "key", {"a": "b"}, 77, 9)
    assert message.message_id.entry_id == 1 and consumer.corrupt_entries == 0
    await consumer._shutdown()
