"""Herald's own entry format: one entry is one producer batch, written by Herald's producer, stored
and forwarded unchanged by broker and storage, and unpacked by the consumer. (herald.common.codec.entry
reads this format and Pulsar's alike; pulsar_entry is Pulsar's.)

    entry   = magic:u16 | crc32c:u32 | metadata_length:u32 | EntryMetadata (protobuf) | payload
    payload = record*             (after decompression, when compression is set)
    record  = value_length:u32 | flags:u8 | [key_length:u16 key] | [event_time:i64]
              | [sequence_id:i64] | [property_count:u16 (key_length:u16 key value_length:u32 value)*]
              | value
    flags   = FLAG_KEY 1 | FLAG_EVENT_TIME 2 | FLAG_SEQUENCE_ID 4 | FLAG_PROPERTIES 8
              | FLAG_COMPACTED_OUT 16 (an empty value: the compactor removed the message from its
                entry in a compacted ledger, keeping its place so batch indexes stay stable)

The checksum covers everything after itself. Records are packed with struct, never one protobuf
object per message: this is the client's hot path.

A record takes MIN_RECORD_SIZE bytes at least, which bounds how many messages an entry can hold
(herald.common.codec.entry.records_capacity).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

from google.protobuf.message import DecodeError

from herald.api.v1 import entry_pb2
from herald.common.codec.checksum import crc32c
from herald.common.errors import ChecksumError, InvalidArgumentError

MAGIC = 0x0E0C
_HEADER = struct.Struct(">HII")
HEADER_SIZE = _HEADER.size
_MAGIC_CRC = struct.Struct(">HI")
_META_LENGTH = struct.Struct(">I")
_CRC_START = _MAGIC_CRC.size  # the checksum covers everything after magic and crc

RECORD_HEADER = struct.Struct("<IB")
FLAG_KEY = 1
FLAG_EVENT_TIME = 2
FLAG_SEQUENCE_ID = 4
FLAG_PROPERTIES = 8
FLAG_COMPACTED_OUT = 16
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
MIN_RECORD_SIZE = RECORD_HEADER.size  # a record with an empty value and no flags
# The max message size limits the message; its entry adds a header, metadata and record framing
# (keys, properties) on top, and so may its uncompressed payload.
ENTRY_FRAMING_ALLOWANCE = 10 * 1024

EntryMetadata = entry_pb2.EntryMetadata


def encode_entry(metadata: entry_pb2.EntryMetadata, payload: bytes | bytearray) -> bytes:
    meta = metadata.SerializeToString()
    body = _META_LENGTH.pack(len(meta)) + meta + payload  # what the checksum covers
    return _MAGIC_CRC.pack(MAGIC, crc32c(body)) + body


def split(entry: bytes | memoryview, verify: bool = True) -> tuple[entry_pb2.EntryMetadata, memoryview]:
    """An entry's metadata and payload; a corrupt entry (or one of another format) raises
    ChecksumError, metadata that does not parse InvalidArgumentError."""
    if len(entry) < HEADER_SIZE:
        raise ChecksumError(f"entry of {len(entry)} bytes is shorter than its {HEADER_SIZE}-byte header")
    magic, crc, meta_length = _HEADER.unpack_from(entry)
    if magic != MAGIC:
        raise ChecksumError(f"entry has bad magic {magic:#06x}")
    view = memoryview(entry)
    if verify and crc32c(view[_CRC_START:]) != crc:
        raise ChecksumError("Checksum failed: the entry is corrupt")
    end = HEADER_SIZE + meta_length
    if end > len(entry):
        raise ChecksumError("entry metadata runs past the end of the entry")
    metadata = entry_pb2.EntryMetadata()
    try:
        metadata.ParseFromString(view[HEADER_SIZE:end])  # type: ignore[arg-type]  # upb takes buffers
    except DecodeError as exc:
        raise InvalidArgumentError(f"entry metadata does not parse: {exc}") from None
    return metadata, view[end:]


def checksum_ok(entry: bytes | memoryview) -> bool:
    if len(entry) < HEADER_SIZE:
        return False
    magic, crc, _ = _HEADER.unpack_from(entry)
    return bool(magic == MAGIC and crc32c(memoryview(entry)[_CRC_START:]) == crc)


def records_claimed(metadata: entry_pb2.EntryMetadata) -> int:
    """How many records an entry's (restored) payload may hold, for iter_records' max_records:
    its num_messages (the broker checks it at publish), 1 for a chunked message's payload. (Any
    format's EntryMetadata: Pulsar's entries are read as one too.)"""
    return 1 if metadata.num_chunks > 0 else max(1, metadata.num_messages)


def pack_record(
    buffer: bytearray,
    value: bytes,
    key: str | None = None,
    event_time: int = 0,
    sequence_id: int | None = None,
    properties: dict[str, str] | None = None,
) -> None:
    """Append one message to a batch payload. The plain case (value only) is one struct call."""
    if key is None and not event_time and sequence_id is None and not properties:
        buffer += RECORD_HEADER.pack(len(value), 0)
        buffer += value
        return
    flags = 0
    extra = bytearray()
    if key is not None:
        flags |= FLAG_KEY
        raw = key.encode()
        extra += _U16.pack(len(raw))
        extra += raw
    if event_time:
        flags |= FLAG_EVENT_TIME
        extra += _I64.pack(event_time)
    if sequence_id is not None:
        flags |= FLAG_SEQUENCE_ID
        extra += _I64.pack(sequence_id)
    if properties:
        flags |= FLAG_PROPERTIES
        extra += _U16.pack(len(properties))
        for name, text in properties.items():
            raw_name, raw_value = name.encode(), text.encode()
            extra += _U16.pack(len(raw_name))
            extra += raw_name
            extra += _U32.pack(len(raw_value))
            extra += raw_value
    buffer += RECORD_HEADER.pack(len(value), flags)
    buffer += extra
    buffer += value


class Record(NamedTuple):
    value: bytes
    key: str | None
    event_time: int
    sequence_id: int | None
    properties: dict[str, str]
    # Removed by topic compaction (its place in the batch kept): consumers skip it.
    compacted_out: bool = False
    # Pulsar's null value (a message sent with no value at all); Herald's records have none.
    null_value: bool = False


_NO_PROPERTIES: dict[str, str] = {}
C = TypeVar("C")  # what build_messages hands its makers (the consumer's entry)
M = TypeVar("M")  # what they make (the consumer's Message)


def iter_records(payload: bytes | memoryview, max_records: int | None = None) -> Iterator[Record]:
    """The messages of a batch payload, in order; a malformed payload raises InvalidArgumentError,
    and so does one holding more than `max_records` (the count its metadata claims: a consumer
    makes an object of each record, and 5 MiB of zeros, a few KB compressed, are a million empty
    records under metadata claiming one)."""
    data = bytes(payload)
    end = len(data)
    offset = 0
    unpack_header = RECORD_HEADER.unpack_from
    left = end if max_records is None else max_records  # a record takes MIN_RECORD_SIZE bytes at least
    try:
        while offset < end:
            if left <= 0:
                raise _too_many(max_records)
            left -= 1
            length, flags = unpack_header(data, offset)
            offset += 5
            if not flags:
                stop = offset + length
                if stop > end:
                    raise InvalidArgumentError("batch record runs past the end of the entry")
                yield Record(data[offset:stop], None, 0, None, _NO_PROPERTIES)
                offset = stop
                continue
            record, offset = _flagged_record(data, offset, length, flags)
            yield record
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"malformed batch payload: {exc}") from exc


def build_messages(
    payload: bytes | memoryview, max_records: int, plain: Callable[[bytes, int, C], M],
    detailed: Callable[[Record, int, C], M], context: C,
) -> tuple[list[M], list[int]]:
    """What iter_records reads (same checks, same errors), in one pass that makes the consumer's
    objects as it goes: `plain(value, index, context)` for a record that is nothing but its value
    (no key, properties, event time or sequence id: the common case, with no Record tuple and no
    generator step per message), `detailed(record, index, context)` for any other. Records the
    compactor removed (FLAG_COMPACTED_OUT) make no object: their indexes come back second."""
    data = bytes(payload)
    end = len(data)
    offset = index = 0
    unpack_header = RECORD_HEADER.unpack_from
    made: list[M] = []
    append = made.append
    compacted: list[int] = []
    try:
        while offset < end:
            if index >= max_records:
                raise _too_many(max_records)
            length, flags = unpack_header(data, offset)
            offset += 5
            if not flags:
                stop = offset + length
                if stop > end:
                    raise InvalidArgumentError("batch record runs past the end of the entry")
                append(plain(data[offset:stop], index, context))
                offset = stop
            else:
                record, offset = _flagged_record(data, offset, length, flags)
                if record.compacted_out:
                    compacted.append(index)
                else:
                    append(detailed(record, index, context))
            index += 1
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"malformed batch payload: {exc}") from exc
    return made, compacted


def _too_many(max_records: int | None) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"the entry holds more than the {max_records} message(s) its metadata says (num_messages)")


def _flagged_record(data: bytes, offset: int, length: int, flags: int) -> tuple[Record, int]:
    """The record whose header (`length`, `flags`: not 0) ends at `offset`, and the offset after it."""
    key = None
    event_time = 0
    sequence_id = None
    properties = _NO_PROPERTIES
    if flags & FLAG_KEY:
        (n,) = _U16.unpack_from(data, offset)
        key = data[offset + 2 : offset + 2 + n].decode()
        offset += 2 + n
    if flags & FLAG_EVENT_TIME:
        (event_time,) = _I64.unpack_from(data, offset)
        offset += 8
    if flags & FLAG_SEQUENCE_ID:
        (sequence_id,) = _I64.unpack_from(data, offset)
        offset += 8
    if flags & FLAG_PROPERTIES:
        (count,) = _U16.unpack_from(data, offset)
        offset += 2
        properties = {}
        for _ in range(count):
            (n,) = _U16.unpack_from(data, offset)
            name = data[offset + 2 : offset + 2 + n].decode()
            offset += 2 + n
            (n,) = _U32.unpack_from(data, offset)
            properties[name] = data[offset + 4 : offset + 4 + n].decode()
            offset += 4 + n
    stop = offset + length
    if stop > len(data):
        raise InvalidArgumentError("batch record runs past the end of the entry")
    return Record(data[offset:stop], key, event_time, sequence_id, properties, bool(flags & FLAG_COMPACTED_OUT)), stop
