"""Entries in Pulsar's format: read as Herald's metadata by the core, their messages as Herald's
records, and Herald's entries turned into Pulsar's for Pulsar consumers with nothing lost."""

from __future__ import annotations

import struct

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.api.v1 import entry_pb2
from herald.common.codec import pulsar_entry
from herald.common.codec.compression import compress
from herald.common.codec.entry import Record, encode_entry, pack_record
from herald.common.errors import ChecksumError, InvalidArgumentError
from hypothesis import given
from hypothesis import strategies as st

LIMIT = 5 * 1024 * 1024


def batch(messages: list[tuple[bytes, pulsar.SingleMessageMetadata]]) -> bytes:
    parts = []
    for value, single in messages:
        single.payload_size = len(value)
        meta = single.SerializeToString()
        parts.append(struct.pack(">I", len(meta)) + meta + value)
    return b"".join(parts)


def test_a_batch_reads_as_herald_metadata_and_records() -> None:
    payload = batch([
        (b"a", pulsar.SingleMessageMetadata(partition_key="k1", event_time=5, sequence_id=10,
                                            properties=[pulsar.KeyValue(key="p", value="1")])),
        (b"bb", pulsar.SingleMessageMetadata()),
    ])
    metadata = pulsar.MessageMetadata(producer_name="standalone-0-1", sequence_id=10, publish_time=1700,
                                      num_messages_in_batch=2, uncompressed_size=len(payload))
    entry = pulsar_entry.encode(metadata, payload)
    assert pulsar_entry.is_pulsar_entry(entry) and pulsar_entry.checksum_ok(entry)
    read, rest = pulsar_entry.split(entry)
    converted = pulsar_entry.to_entry_metadata(read)
    assert (converted.producer_name, converted.sequence_id, converted.highest_sequence_id, converted.num_messages,
            converted.publish_time, converted.batched) == ("standalone-0-1", 10, 11, 2, 1700, True)
    assert list(pulsar_entry.iter_pulsar_records(read, rest, 2)) == [
        Record(b"a", "k1", 5, 10, {"p": "1"}), Record(b"bb", None, 0, None, {})]


def test_a_plain_message_carries_its_key_and_properties_in_the_entry_metadata() -> None:
    metadata = pulsar.MessageMetadata(producer_name="p", sequence_id=3, publish_time=9, partition_key="key",
                                      event_time=4, properties=[pulsar.KeyValue(key="x", value="y")])
    read, rest = pulsar_entry.split(pulsar_entry.encode(metadata, b"value"))
    assert pulsar_entry.to_entry_metadata(read).num_messages == 1
    assert list(pulsar_entry.iter_pulsar_records(read, rest)) == [Record(b"value", "key", 4, None, {"x": "y"})]


def test_a_corrupt_entry_fails_its_checksum() -> None:
    entry = bytearray(pulsar_entry.encode(pulsar.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0),
                                          b"data"))
    entry[-1] ^= 0xFF
    assert not pulsar_entry.checksum_ok(bytes(entry))
    with pytest.raises(ChecksumError, match="Checksum failed"):
        pulsar_entry.split(bytes(entry))


@pytest.mark.parametrize(("payload", "claim", "error"), [
    (b"\x00\x00", 1, "size runs past"),
    (struct.pack(">I", 50) + b"\x18\x01", 1, "metadata runs past"),
    (struct.pack(">I", 2) + b"\x18\x09" + b"x", 1, "data runs past"),
    (batch([(b"a", pulsar.SingleMessageMetadata()), (b"b", pulsar.SingleMessageMetadata())]), 1, "more messages"),
])
def test_batch_framing_that_lies_is_refused(payload: bytes, claim: int, error: str) -> None:
    metadata = pulsar.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0, num_messages_in_batch=claim)
    with pytest.raises(InvalidArgumentError, match=error):
        list(pulsar_entry.iter_pulsar_records(metadata, payload, claim))


records = st.lists(st.tuples(
    st.binary(max_size=64), st.none() | st.text(max_size=10), st.integers(min_value=0, max_value=2**40),
    st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=3)), min_size=1, max_size=20)


@given(records, st.sampled_from([entry_pb2.NONE, entry_pb2.LZ4, entry_pb2.ZLIB, entry_pb2.ZSTD]))
def test_a_herald_batch_becomes_a_pulsar_batch_with_nothing_lost(
    messages: list[tuple[bytes, str | None, int, dict[str, str]]], codec: int,
) -> None:
    packed = bytearray()
    for value, key, event_time, properties in messages:
        pack_record(packed, value, key, event_time, None, properties)
    metadata = entry_pb2.EntryMetadata(
        producer_name="herald-1", sequence_id=40, highest_sequence_id=40 + len(messages) - 1,
        num_messages=len(messages), publish_time=123, batched=True, compression=codec, uncompressed_size=len(packed))
    entry = encode_entry(metadata, compress(codec, packed))
    converted = pulsar_entry.from_herald_entry(entry, LIMIT)
    read, rest = pulsar_entry.split(converted)
    assert (read.producer_name, read.sequence_id, read.publish_time, read.num_messages_in_batch) == (
        "herald-1", 40, 123, len(messages))
    assert list(pulsar_entry.iter_pulsar_records(read, rest, len(messages))) == [
        Record(value, key, event_time, 40 + index, properties)
        for index, (value, key, event_time, properties) in enumerate(messages)]


def test_an_unbatched_herald_message_becomes_a_plain_pulsar_message() -> None:
    packed = bytearray()
    pack_record(packed, b"only", "k", 77, None, {"a": "b"})
    entry = encode_entry(entry_pb2.EntryMetadata(producer_name="h", sequence_id=5, num_messages=1, publish_time=1),
                         packed)
    read, rest = pulsar_entry.split(pulsar_entry.from_herald_entry(entry, LIMIT))
    assert not pulsar_entry.is_batched(read)
    assert (read.partition_key, read.event_time, bytes(rest)) == ("k", 77, b"only")
    assert [(p.key, p.value) for p in read.properties] == [("a", "b")]
