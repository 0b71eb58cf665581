"""Entries in Pulsar's format: what an official Pulsar producer sends after its SEND command, and
what Herald stores for it unchanged.

    entry   = magic:u16 (0x0e01) | crc32c:u32 | metadata_size:u32 | MessageMetadata | payload
    payload = one message's data, or (a batch) per message:
              size:u32 | SingleMessageMetadata | data           (after decompression)

The checksum covers metadata_size, the metadata and the payload. Reading one as Herald's
EntryMetadata (`to_entry_metadata`) lets the broker core treat both families alike; its messages
come out as Herald Records (`iter_pulsar_records`); `from_herald_entry` builds a Pulsar entry from
a Herald one for a Pulsar consumer. herald.common.codec.herald_entry is Herald's own format, and
herald.common.codec.entry the one reader of both that everyone else uses."""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Collection, Iterator

from google.protobuf.message import DecodeError

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.codec import herald_entry
from herald.common.codec.checksum import crc32c
from herald.common.codec.compression import decompress
from herald.common.codec.herald_entry import EntryMetadata, Record, iter_records, records_claimed
from herald.common.errors import ChecksumError, InvalidArgumentError

PULSAR_MAGIC = 0x0E01
_HEADER = struct.Struct(">HII")  # magic, crc32c, metadata size
HEADER_SIZE = _HEADER.size
_U32 = struct.Struct(">I")
_CRC_START = 6  # the checksum covers everything after magic and crc
# A batched message takes its size, a SingleMessageMetadata (payload_size at least: 2 bytes) and
# its data: what bounds the messages a payload can hold.
MIN_BATCHED_MESSAGE_SIZE = 4 + 2

# Codecs: Pulsar's numbers are Herald's (herald.common.codec.compression), SNAPPY included.
SNAPPY = pulsar.SNAPPY
PulsarMetadata = pulsar.MessageMetadata
# Pulsar's uint64 ids and times, read into Herald's int64 fields, and its uint32 sizes into int32.
_MAX_INT64 = (1 << 63) - 1
_MAX_INT32 = (1 << 31) - 1
_NO_PROPERTIES: dict[str, str] = {}


def is_pulsar_entry(entry: bytes | memoryview) -> bool:
    return len(entry) >= 2 and entry[0] == PULSAR_MAGIC >> 8 and entry[1] == PULSAR_MAGIC & 0xFF


def split(entry: bytes | memoryview, verify: bool = True) -> tuple[pulsar.MessageMetadata, memoryview]:
    """A Pulsar entry's metadata and payload; ChecksumError when it is corrupt or no such entry."""
    if len(entry) < HEADER_SIZE:
        raise ChecksumError(f"entry of {len(entry)} bytes is shorter than Pulsar's {HEADER_SIZE}-byte header")
    magic, crc, size = _HEADER.unpack_from(entry)
    if magic != PULSAR_MAGIC:
        raise ChecksumError(f"entry has magic {magic:#06x}, not Pulsar's {PULSAR_MAGIC:#06x}")
    view = memoryview(entry)
    if verify and crc32c(view[_CRC_START:]) != crc:
        raise ChecksumError("Checksum failed: the entry is corrupt")
    end = HEADER_SIZE + size
    if end > len(entry):
        raise ChecksumError("entry metadata runs past the end of the entry")
    metadata = pulsar.MessageMetadata()
    try:
        metadata.ParseFromString(view[HEADER_SIZE:end])  # type: ignore[arg-type]  # upb takes buffers
    except DecodeError as exc:
        raise InvalidArgumentError(f"entry metadata does not decode as Pulsar's MessageMetadata: {exc}") from None
    if not metadata.IsInitialized():
        raise InvalidArgumentError("entry metadata lacks Pulsar's required fields (producer_name, sequence_id, "
                                   "publish_time)")
    return metadata, view[end:]


def checksum_ok(entry: bytes | memoryview) -> bool:
    if len(entry) < HEADER_SIZE:
        return False
    magic, crc, _ = _HEADER.unpack_from(entry)
    return bool(magic == PULSAR_MAGIC and crc32c(memoryview(entry)[_CRC_START:]) == crc)


def encode(metadata: pulsar.MessageMetadata, payload: bytes | bytearray | memoryview) -> bytes:
    """A Pulsar entry of `metadata` and `payload` (the payload as it will be sent: compressed)."""
    meta = metadata.SerializeToString()
    body = _U32.pack(len(meta)) + meta + bytes(payload)
    return struct.pack(">HI", PULSAR_MAGIC, crc32c(body)) + body


def moved(entry: bytes | memoryview, producer_name: str, publish_time: int) -> tuple[bytes, int]:
    """A Pulsar entry as another producer publishes it again, payload untouched (a dead letter that
    cannot be unpacked: a chunk, an encrypted batch): `producer_name`, sequence ids from 0, published
    at `publish_time`, delivered at once. Returns (the entry, its highest sequence id)."""
    metadata, payload = split(entry, verify=False)
    count = metadata.num_messages_in_batch if is_batched(metadata) else 1
    metadata.producer_name = producer_name
    metadata.sequence_id = 0
    metadata.highest_sequence_id = max(0, count - 1)
    metadata.publish_time = publish_time
    metadata.ClearField("deliver_at_time")
    return encode(metadata, payload), metadata.highest_sequence_id


def is_batched(metadata: pulsar.MessageMetadata) -> bool:
    """Whether the payload holds SingleMessageMetadata-framed messages (Pulsar's producers set
    num_messages_in_batch exactly on batches, a batch of one included)."""
    return metadata.HasField("num_messages_in_batch")


def to_entry_metadata(metadata: pulsar.MessageMetadata) -> EntryMetadata:
    """The same facts as Herald's EntryMetadata, for the broker core (dedup, dispatch, delays,
    expiry, permits, publish checks) and the consumers. Pulsar's producers (the C++ client) send no
    highest_sequence_id on a batch: its messages are numbered from sequence_id on, so the highest
    is sequence_id + count - 1. InvalidArgumentError for a value Herald's fields cannot hold (a
    uint64 sequence id or time past 2^63-1, a size past 2^31-1)."""
    count = metadata.num_messages_in_batch if is_batched(metadata) else 1
    highest = metadata.highest_sequence_id
    if highest < metadata.sequence_id:
        highest = metadata.sequence_id + max(count, 1) - 1
    for name, value, most in (("sequence_id", highest, _MAX_INT64), ("publish_time", metadata.publish_time, _MAX_INT64),
                              ("uncompressed_size", metadata.uncompressed_size, _MAX_INT32)):
        if value > most:
            raise InvalidArgumentError(
                f"the message's {name} is {value}, past the {most} Herald stores: send ids and sizes below it")
    converted = EntryMetadata(
        producer_name=metadata.producer_name, sequence_id=metadata.sequence_id, highest_sequence_id=highest,
        num_messages=count, publish_time=metadata.publish_time, compression=metadata.compression,  # type: ignore[arg-type]
        uncompressed_size=metadata.uncompressed_size, batched=is_batched(metadata),
        encryption_keys=[key.key for key in metadata.encryption_keys],
        deliver_at_time=metadata.deliver_at_time, partition_key=metadata.partition_key,
        ordering_key=metadata.ordering_key,
    )
    if metadata.partition_key_b64_encoded and not metadata.HasField("ordering_key"):
        # A bytes key travels base64-encoded; Pulsar's broker dispatches Key_Shared by its bytes,
        # and so does Herald's (the ordering key goes first): the same consumer gets it.
        try:
            converted.ordering_key = base64.b64decode(metadata.partition_key, validate=True)
        except binascii.Error:
            pass  # not base64 after all: the text is the key
    version = schema_version_from_bytes(metadata.schema_version)
    if version is not None:
        converted.schema_version = version
    if metadata.HasField("num_chunks_from_msg") and metadata.num_chunks_from_msg > 1:
        converted.uuid = metadata.uuid
        converted.chunk_id = metadata.chunk_id
        converted.num_chunks = metadata.num_chunks_from_msg
        converted.total_chunk_size = metadata.total_chunk_msg_size
    return converted


def schema_version_bytes(version: int) -> bytes:
    """A schema version as Pulsar's messages carry it: a long, 8 bytes big-endian (what Pulsar's
    broker hands out and GET_SCHEMA takes back)."""
    return version.to_bytes(8, "big", signed=True)


def schema_version_from_bytes(data: bytes) -> int | None:
    """The version in a Pulsar message's schema_version; None when it carries none, or not one
    this broker gave (another length): such a message is decoded with the reader's own schema."""
    return int.from_bytes(data, "big", signed=True) if len(data) == 8 else None


def records_of(metadata: pulsar.MessageMetadata, payload: bytes | memoryview) -> Iterator[Record]:
    """The messages of a (restored) payload, whatever it is: a batch's, or one plain message's (a
    chunked message's payload put back together included): iter_pulsar_records within the count
    the metadata claims."""
    return iter_pulsar_records(metadata, payload, metadata.num_messages_in_batch if is_batched(metadata) else 1)


def _key(partition_key: str, b64: bool) -> str:
    # A bytes key travels base64-encoded with the flag set: Herald's keys are text, so it stays so.
    return partition_key


def iter_pulsar_records(
    metadata: pulsar.MessageMetadata, payload: bytes | memoryview, max_records: int | None = None,
) -> Iterator[Record]:
    """The messages of a Pulsar entry's (decompressed) payload as Herald Records: key, event time,
    sequence id and properties per message. A batch holding more messages than `max_records` (its
    metadata's claim) or framing that lies raises InvalidArgumentError."""
    if not is_batched(metadata):
        properties = {p.key: p.value for p in metadata.properties} or _NO_PROPERTIES
        key = _key(metadata.partition_key, metadata.partition_key_b64_encoded) \
            if metadata.HasField("partition_key") else None
        yield Record(bytes(payload), key, metadata.event_time, None, properties, False, metadata.null_value)
        return
    data = memoryview(payload)
    offset, end, count = 0, len(data), 0
    while offset < end:
        if max_records is not None and count >= max_records:
            raise InvalidArgumentError(f"the batch holds more messages than the {max_records} its metadata says")
        if end - offset < 4:
            raise InvalidArgumentError("a batched message's size runs past the end of the payload")
        (size,) = _U32.unpack_from(data, offset)
        offset += 4
        if size > end - offset:
            raise InvalidArgumentError("a batched message's metadata runs past the end of the payload")
        single = pulsar.SingleMessageMetadata()
        try:
            single.ParseFromString(data[offset:offset + size])  # type: ignore[arg-type]
        except DecodeError as exc:
            raise InvalidArgumentError(f"a batched message's metadata does not decode: {exc}") from None
        offset += size
        if not single.HasField("payload_size") or single.payload_size < 0 or single.payload_size > end - offset:
            raise InvalidArgumentError("a batched message's data runs past the end of the payload")
        value = bytes(data[offset:offset + single.payload_size])
        offset += single.payload_size
        count += 1
        key = _key(single.partition_key, single.partition_key_b64_encoded) if single.HasField("partition_key") else None
        sequence_id = single.sequence_id if single.HasField("sequence_id") else None
        properties = {p.key: p.value for p in single.properties} or _NO_PROPERTIES
        yield Record(value, key, single.event_time or metadata.event_time, sequence_id, properties,
                     single.compacted_out, single.null_value)


def from_herald_entry(entry: bytes, max_size: int) -> bytes:
    """A Pulsar entry with the messages of a Herald entry (for a Pulsar consumer), uncompressed:
    the same producer, sequence ids, publish time, keys, properties and event times, one batched
    message per record (batch index for batch index), or one plain message for an unbatched entry.
    InvalidArgumentError for an entry that cannot be read within `max_size` (decompressed)."""
    metadata, payload = herald_entry.split(entry)
    data = decompress(metadata.compression, payload, metadata.uncompressed_size, max_size) \
        if metadata.compression else payload
    records = list(iter_records(data, records_claimed(metadata)))
    converted = pulsar.MessageMetadata(
        producer_name=metadata.producer_name, sequence_id=max(metadata.sequence_id, 0),
        publish_time=max(metadata.publish_time, 0), highest_sequence_id=max(metadata.highest_sequence_id, 0),
    )
    if metadata.partition_key:
        converted.partition_key = metadata.partition_key
    if metadata.ordering_key:
        converted.ordering_key = metadata.ordering_key
    if metadata.deliver_at_time:
        converted.deliver_at_time = metadata.deliver_at_time
    if metadata.HasField("schema_version"):
        converted.schema_version = schema_version_bytes(metadata.schema_version)
    if not metadata.batched and len(records) == 1:
        record = records[0]
        if record.key is not None:
            converted.partition_key = record.key
        if record.event_time:
            converted.event_time = record.event_time
        for name, value in record.properties.items():
            converted.properties.add(key=name, value=value)
        converted.uncompressed_size = len(record.value)
        return encode(converted, record.value)
    converted.num_messages_in_batch = len(records)
    parts: list[bytes] = []
    for index, record in enumerate(records):
        single = pulsar.SingleMessageMetadata(payload_size=len(record.value))
        if record.compacted_out:  # a compacted ledger's entry: the message keeps its place, flagged
            single.compacted_out = True
        if record.key is not None:
            single.partition_key = record.key
        if record.event_time:
            single.event_time = record.event_time
        single.sequence_id = record.sequence_id if record.sequence_id is not None else metadata.sequence_id + index
        for name, value in record.properties.items():
            single.properties.add(key=name, value=value)
        meta = single.SerializeToString()
        parts += (_U32.pack(len(meta)), meta, record.value)
    body = b"".join(parts)
    converted.uncompressed_size = len(body)
    return encode(converted, body)


def compact_batch(entry: bytes, keep: Collection[int], limit: int) -> bytes:
    """For topic compaction (herald.common.codec.compaction): a Pulsar batch with the messages not
    in `keep` flagged compacted_out, their payloads dropped; every other byte of their
    SingleMessageMetadata kept (Pulsar's RawBatchConverter)."""
    metadata, payload = split(entry, verify=False)
    data = memoryview(decompress(metadata.compression, payload, metadata.uncompressed_size, limit)
                      if metadata.compression else bytes(payload))
    parts: list[bytes] = []
    offset, end, index, changed = 0, len(data), 0, False
    while offset < end:
        if end - offset < 4:
            raise InvalidArgumentError("a batched message's size runs past the end of the payload")
        (size,) = _U32.unpack_from(data, offset)
        offset += 4
        single = pulsar.SingleMessageMetadata()
        single.ParseFromString(bytes(data[offset:offset + size]))
        offset += size
        value = bytes(data[offset:offset + single.payload_size])
        offset += single.payload_size
        if index not in keep and not single.compacted_out:
            single.compacted_out = True
            single.payload_size = 0
            value = b""
            changed = True
        meta = single.SerializeToString()
        parts += (_U32.pack(len(meta)), meta, value)
        index += 1
    if not changed:
        return entry
    body = b"".join(parts)
    metadata.compression = pulsar.NONE
    metadata.uncompressed_size = len(body)
    return encode(metadata, body)
