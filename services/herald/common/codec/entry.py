"""The one reader of both entry formats, told apart by their magic: Herald's own
(herald.common.codec.herald_entry, 0x0e0c: records packed with struct under an EntryMetadata) and
Pulsar's (herald.common.codec.pulsar_entry, 0x0e01: what an official Pulsar producer sends, stored
as it came). Whoever reads an entry reads it here, and sees Herald's EntryMetadata either way (a
Pulsar entry's MessageMetadata read as one: pulsar_entry.to_entry_metadata), so the broker core
(publish checks, dedup recovery, permits, Key_Shared keys, delays, expiry, seek by time) and the
consumers (Herald's client, the dlq-worker, `herald admin` peek, the Spark source) treat both alike.

    open_entry(entry) -> OpenedEntry   metadata (Herald's view), payload, and the format's rules:
                                       what it can hold, its permits, its records once restored
    read_metadata / decode_entry       the metadata (and payload) alone
    entry_checksum_ok / entry_permits  for an entry as stored
    unpack_entry(entry, limit)         metadata and every message, decompressed within `limit`

What a format can hold bounds what its metadata may claim (`records_capacity`): a Herald record
takes MIN_RECORD_SIZE (5) bytes at least, a message of a Pulsar batch PULSAR_MIN_MESSAGE_SIZE (6:
its size and a SingleMessageMetadata with its payload_size), and an unbatched Pulsar entry is one
message whatever its size. Herald's own format (encode_entry, pack_record, Record, iter_records and
the constants) is re-exported from here for the producer side, and build_messages (iter_records'
one-pass twin that makes the consumer's Message objects as it reads) for the consumer's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from herald.common.codec import herald_entry, pulsar_entry
from herald.common.codec.compression import decompress
from herald.common.codec.herald_entry import ENTRY_FRAMING_ALLOWANCE as ENTRY_FRAMING_ALLOWANCE
from herald.common.codec.herald_entry import FLAG_COMPACTED_OUT as FLAG_COMPACTED_OUT
from herald.common.codec.herald_entry import FLAG_EVENT_TIME as FLAG_EVENT_TIME
from herald.common.codec.herald_entry import FLAG_KEY as FLAG_KEY
from herald.common.codec.herald_entry import FLAG_PROPERTIES as FLAG_PROPERTIES
from herald.common.codec.herald_entry import FLAG_SEQUENCE_ID as FLAG_SEQUENCE_ID
from herald.common.codec.herald_entry import HEADER_SIZE as HEADER_SIZE
from herald.common.codec.herald_entry import MAGIC as MAGIC
from herald.common.codec.herald_entry import MIN_RECORD_SIZE as MIN_RECORD_SIZE
from herald.common.codec.herald_entry import RECORD_HEADER as RECORD_HEADER
from herald.common.codec.herald_entry import EntryMetadata as EntryMetadata
from herald.common.codec.herald_entry import Record as Record
from herald.common.codec.herald_entry import build_messages as build_messages
from herald.common.codec.herald_entry import encode_entry as encode_entry
from herald.common.codec.herald_entry import iter_records as iter_records
from herald.common.codec.herald_entry import pack_record as pack_record
from herald.common.codec.herald_entry import records_claimed as records_claimed
from herald.common.errors import HeraldError, InvalidArgumentError

PULSAR_MAGIC = pulsar_entry.PULSAR_MAGIC
PULSAR_MIN_MESSAGE_SIZE = pulsar_entry.MIN_BATCHED_MESSAGE_SIZE


def is_pulsar_entry(entry: bytes | memoryview) -> bool:
    """Whether the entry is in Pulsar's format (by its magic)."""
    return pulsar_entry.is_pulsar_entry(entry)


@dataclass(frozen=True, slots=True)
class OpenedEntry:
    """An entry's metadata (Herald's view, whatever the format) and payload (as stored: compressed
    when the metadata says so), with what its format implies."""

    metadata: EntryMetadata
    payload: memoryview
    pulsar: pulsar_entry.PulsarMetadata | None = None  # a Pulsar entry's own metadata

    @property
    def capacity(self) -> int:
        """The most messages the entry can hold (records_capacity)."""
        return records_capacity(self.metadata, len(self.payload), pulsar_format=self.pulsar is not None)

    @property
    def permits(self) -> int:
        """The flow permits it takes (permits_of)."""
        return permits_of(self.metadata, len(self.payload), pulsar_format=self.pulsar is not None)

    def restore(self, limit: int) -> bytes | memoryview:
        """The payload decompressed (as it is when not compressed), within `limit` bytes:
        compression.decompress's errors otherwise. A chunk's payload is only a slice of its
        message's: put the slices together first (restore_payload)."""
        return restore_payload(self.metadata, self.payload, limit)

    def records(self, restored: bytes | memoryview, max_records: int | None = None) -> Iterator[Record]:
        """The messages of the restored payload (a chunked message's, put back together,
        included) as Herald Records: key, event time, sequence id (None: the entry's first plus
        the index) and properties. InvalidArgumentError when the payload holds more than
        `max_records` (default: what the metadata claims) or its framing lies."""
        claimed = records_claimed(self.metadata) if max_records is None else max_records
        if self.pulsar is None:
            return iter_records(restored, claimed)
        if not pulsar_entry.is_batched(self.pulsar):
            return pulsar_entry.records_of(self.pulsar, restored)
        return pulsar_entry.iter_pulsar_records(self.pulsar, restored, claimed)


def open_entry(entry: bytes | memoryview, verify: bool = True) -> OpenedEntry:
    """Read an entry of either format: ChecksumError when it is corrupt (verify) or of neither
    format, InvalidArgumentError when its metadata does not parse or holds what Herald cannot."""
    if pulsar_entry.is_pulsar_entry(entry):
        metadata, payload = pulsar_entry.split(entry, verify)
        return OpenedEntry(pulsar_entry.to_entry_metadata(metadata), payload, metadata)
    herald_metadata, payload = herald_entry.split(entry, verify)
    return OpenedEntry(herald_metadata, payload)


def decode_entry(entry: bytes | memoryview, verify: bool = True) -> tuple[EntryMetadata, memoryview]:
    """An entry's metadata (Herald's view) and payload, either format (open_entry)."""
    opened = open_entry(entry, verify)
    return opened.metadata, opened.payload


def read_metadata(entry: bytes | memoryview, verify: bool = True) -> EntryMetadata:
    """An entry's metadata as Herald's EntryMetadata, either format, checking the header and (by
    default) the checksum."""
    return open_entry(entry, verify).metadata


def entry_checksum_ok(entry: bytes | memoryview) -> bool:
    """Whether the entry is of a known format and its checksum holds (each format's layout: the
    checksum covers what follows it)."""
    if pulsar_entry.is_pulsar_entry(entry):
        return pulsar_entry.checksum_ok(entry)
    return herald_entry.checksum_ok(entry)


def records_capacity(metadata: EntryMetadata, payload_size: int, *, pulsar_format: bool = False) -> int:
    """The most messages the entry's payload can hold. Herald's: MIN_RECORD_SIZE bytes each at
    least, of its uncompressed size when it is compressed, of total_chunk_size for a chunk (whose
    payload is a slice of its message's), else of `payload_size`. Pulsar's: an unbatched entry (a
    chunk included) is one message; a batch's messages take PULSAR_MIN_MESSAGE_SIZE bytes each."""
    if pulsar_format:
        if not metadata.batched or metadata.num_chunks > 0:
            return 1
        minimum = PULSAR_MIN_MESSAGE_SIZE
    else:
        minimum = MIN_RECORD_SIZE
    if metadata.compression:
        size = metadata.uncompressed_size
    elif metadata.num_chunks > 0:
        size = metadata.total_chunk_size
    else:
        size = payload_size
    return max(0, size) // minimum


def permits_of(metadata: EntryMetadata, payload_size: int, *, pulsar_format: bool = False) -> int:
    """The flow permits an entry takes, reckoned alike by the broker that delivers it and the
    consumer that gives back what it did not queue: its num_messages, but at least 1 and at most
    what its payload can hold; a chunk takes 1."""
    if metadata.num_chunks > 0:
        return 1
    return max(1, min(metadata.num_messages, records_capacity(metadata, payload_size, pulsar_format=pulsar_format)))


def entry_permits(entry: bytes | memoryview) -> int:
    """permits_of an entry as stored (its checksum unchecked); 1 when its metadata cannot be read."""
    try:
        return open_entry(entry, False).permits
    except HeraldError:
        return 1


def restore_payload(metadata: EntryMetadata, payload: bytes | memoryview, limit: int) -> bytes | memoryview:
    """A payload decompressed as its metadata says, within `limit` bytes (as it is when not
    compressed)."""
    if not metadata.compression:
        return payload
    return decompress(metadata.compression, payload, metadata.uncompressed_size, limit)


def unpack_entry(entry: bytes | memoryview, limit: int, verify: bool = True) -> tuple[EntryMetadata, list[Record]]:
    """An entry's metadata (Herald's view) and all its messages, either format, its payload
    decompressed within `limit` bytes and never more records made than the metadata claims.
    ChecksumError / InvalidArgumentError / MessageTooLargeError when it cannot be read so; a chunk
    of a chunked message is refused (InvalidArgumentError): only a consumer puts chunks together."""
    opened = open_entry(entry, verify)
    metadata = opened.metadata
    if metadata.num_chunks > 0:
        raise InvalidArgumentError(
            f"the entry is chunk {metadata.chunk_id} of {metadata.num_chunks} of chunked message {metadata.uuid!r}: "
            "its message is read whole by a consumer only")
    return metadata, list(opened.records(opened.restore(limit)))


def is_leading_pulsar_chunk(entry: bytes | memoryview, metadata: EntryMetadata) -> bool:
    """A chunk of a Pulsar client's chunked message other than its last. Pulsar's clients send
    every chunk under the message's one sequence id, so only the last is deduplicated (and marks
    the message persisted), as Pulsar's broker does; Herald's chunks each have their own."""
    return metadata.num_chunks > 1 and metadata.chunk_id < metadata.num_chunks - 1 and is_pulsar_entry(entry)
