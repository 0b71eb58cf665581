"""The entry codec: header, checksum, and the batch records inside."""

from __future__ import annotations

import pytest
from herald.common.codec.entry import (
    EntryMetadata,
    build_messages,
    decode_entry,
    encode_entry,
    entry_checksum_ok,
    iter_records,
    pack_record,
    read_metadata,
)
from herald.common.codec.entry import Record as RecordTuple
from herald.common.errors import ChecksumError, InvalidArgumentError
from hypothesis import given
from hypothesis import strategies as st

texts = st.text(max_size=20)
records = st.tuples(
    st.binary(max_size=300),
    st.none() | texts,
    st.integers(min_value=0, max_value=2**62),
    st.none() | st.integers(min_value=-(2**62), max_value=2**62),
    st.dictionaries(texts, texts, max_size=4),
)


Record = tuple[bytes, str | None, int, int | None, dict[str, str]]


@given(st.lists(records, max_size=30))
def test_records_round_trip_through_an_entry(batch: list[Record]) -> None:
    payload = bytearray()
    for value, key, event_time, sequence_id, properties in batch:
        pack_record(payload, value, key, event_time, sequence_id, properties)
    metadata = EntryMetadata(
        producer_name="p", sequence_id=7, highest_sequence_id=7 + len(batch), num_messages=len(batch)
    )
    entry = encode_entry(metadata, payload)
    decoded_metadata, decoded_payload = decode_entry(entry)
    assert decoded_metadata == metadata
    decoded = [(r.value, r.key, r.event_time, r.sequence_id, r.properties) for r in iter_records(decoded_payload)]
    assert decoded == batch


def test_flipped_byte_fails_the_checksum() -> None:
    payload = bytearray()
    pack_record(payload, b"hello")
    entry = bytearray(encode_entry(EntryMetadata(producer_name="p", num_messages=1), payload))
    assert entry_checksum_ok(bytes(entry))
    entry[-1] ^= 0xFF
    assert not entry_checksum_ok(bytes(entry))
    with pytest.raises(ChecksumError, match="Checksum failed"):
        decode_entry(bytes(entry))
    # Without verification the metadata is still readable (the broker's dedup replay uses this).
    assert read_metadata(bytes(entry), verify=False).producer_name == "p"


def test_truncated_or_foreign_bytes_are_refused() -> None:
    with pytest.raises(ChecksumError, match="shorter"):
        decode_entry(b"abc")
    with pytest.raises(ChecksumError, match="magic"):
        decode_entry(b"\x00" * 32)
    assert not entry_checksum_ok(b"\x00")


def test_record_running_past_the_payload_is_refused() -> None:
    payload = bytearray()
    pack_record(payload, b"hello world")
    with pytest.raises(InvalidArgumentError, match="past the end"):
        list(iter_records(bytes(payload[:-3])))
    with pytest.raises(InvalidArgumentError, match="malformed"):
        list(iter_records(b"\x01\x00"))


def _plain(value: bytes, index: int, context: str) -> tuple[str, int, bytes]:
    return ("plain", index, value)


def _detailed(record: RecordTuple, index: int, context: str) -> tuple[str, int, bytes]:
    return ("detailed", index, record.value)


@given(st.lists(records, max_size=30))
def test_build_messages_makes_one_object_per_record_as_iter_records_reads_them(batch: list[Record]) -> None:
    """The consumer's one-pass unpack: a record that is nothing but its value goes to the plain
    maker, any other to the detailed one with the Record iter_records reads, each with its index."""
    payload = bytearray()
    for value, key, event_time, sequence_id, properties in batch:
        pack_record(payload, value, key, event_time, sequence_id, properties)
    made, compacted = build_messages(bytes(payload), len(batch), _plain, _detailed, "context")
    expected = [
        ("detailed" if (key is not None or event_time or sequence_id is not None or properties) else "plain", i,
         value) for i, (value, key, event_time, sequence_id, properties) in enumerate(batch)]
    assert (made, compacted) == (expected, [])


def test_build_messages_refuses_what_iter_records_refuses() -> None:
    payload = bytearray()
    pack_record(payload, b"hello world")
    pack_record(payload, b"keyed", key="k")
    with pytest.raises(InvalidArgumentError, match="past the end"):
        build_messages(bytes(payload[:14]), 2, _plain, _detailed, "")  # the plain one cut
    with pytest.raises(InvalidArgumentError, match="past the end"):
        build_messages(bytes(payload[:-2]), 2, _plain, _detailed, "")  # the keyed one cut
    with pytest.raises(InvalidArgumentError, match="malformed"):
        build_messages(b"\x01\x00", 1, _plain, _detailed, "")
    with pytest.raises(InvalidArgumentError, match="more than the 1 message"):
        build_messages(bytes(payload), 1, _plain, _detailed, "")
