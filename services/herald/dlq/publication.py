"""What one deterministic producer name publishes, and how it becomes entries.

A Publication is a run of messages with sequence ids 0..n-1 under one producer name (a dead
letter: the messages of its entry; a replay: the messages of one dead-letter entry going back to
one topic). Published as few entries as the topic's max message size allows, in order, so that the
broker's dedup can tell after any crash which of them it already stored: everything at or below the
name's last sequence id. An `opaque` publication is one entry whose messages cannot be unpacked (a
chunk of a chunked message, an encrypted or malformed payload): it is moved as it is, under the
new name."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from herald.api.v1 import broker_pb2, entry_pb2
from herald.common.codec import pulsar_entry
from herald.common.codec.compression import compress
from herald.common.codec.entry import (
    HEADER_SIZE,
    RECORD_HEADER,
    EntryMetadata,
    Record,
    encode_entry,
    pack_record,
    permits_of,
)
from herald.common.errors import MessageTooLargeError

# Room left for the metadata's varints and the header when sizing an entry against the limit.
_METADATA_SLACK = 64


@dataclass(frozen=True, slots=True)
class Publication:
    """`messages[i]` is published with sequence id i, or the record's own sequence_id when it has
    one (they must increase); `compression` is a CompressionType; one message is published
    unbatched (batch index -1) when `batched` is false, as its origin was."""

    messages: Sequence[Record] = ()
    compression: int = entry_pb2.NONE
    ordering_key: bytes = b""
    batched: bool = True
    opaque: tuple[entry_pb2.EntryMetadata, bytes] | None = field(default=None)
    # An opaque Pulsar-format entry as stored: moved in its own format (its payload is framed as
    # Pulsar's, which Herald's format cannot carry).
    opaque_pulsar: bytes | None = field(default=None)

    def __len__(self) -> int:
        return 1 if self.opaque is not None else len(self.messages)


def entries_after(
    publication: Publication, producer_name: str, last_sequence_id: int, max_message_size: int,
) -> list[broker_pb2.SendEntry]:
    """The SendEntry requests for the messages after `last_sequence_id` (what the broker already
    holds under this name), each entry at most `max_message_size` bytes; [] when it holds them
    all. MessageTooLargeError for a message that fits no entry."""
    if publication.opaque is not None:
        if last_sequence_id >= 0:
            return []
        metadata, payload = publication.opaque
        if publication.opaque_pulsar is not None:
            entry, highest = pulsar_entry.moved(publication.opaque_pulsar, producer_name, _now_ms())
            return [broker_pb2.SendEntry(sequence_id=0, highest_sequence_id=highest,
                                         num_messages=permits_of(metadata, len(payload), pulsar_format=True),
                                         entry=entry)]
        moved = EntryMetadata()
        moved.CopyFrom(metadata)
        moved.producer_name = producer_name
        # What the entry can hold, not what an entry stored before brokers checked it may claim.
        moved.num_messages = permits_of(metadata, len(payload))
        moved.sequence_id = 0
        moved.highest_sequence_id = max(0, metadata.highest_sequence_id - metadata.sequence_id)
        moved.publish_time = _now_ms()
        moved.deliver_at_time = 0  # it was delivered already; the dead-letter topic has it at once
        return [_send(encode_entry(moved, payload), moved)]
    numbered = [(index if record.sequence_id is None else record.sequence_id, record)
                for index, record in enumerate(publication.messages)]
    pending = [(sequence_id, record) for sequence_id, record in numbered if sequence_id > last_sequence_id]
    sends: list[broker_pb2.SendEntry] = []
    while pending:
        count, packed = _fill(publication, producer_name, pending, max_message_size)
        metadata = _metadata(publication, producer_name, pending[:count], len(packed))
        body: bytes | bytearray = compress(publication.compression, packed) if publication.compression else packed
        sends.append(_send(encode_entry(metadata, body), metadata))
        pending = pending[count:]
    return sends


def _fill(
    publication: Publication, producer_name: str, pending: list[tuple[int, Record]], max_message_size: int,
) -> tuple[int, bytearray]:
    """Pack messages from the head of `pending` while the entry stays within the limit; (how
    many, payload). A record names its sequence id when it is not the entry's first plus its index."""
    overhead = HEADER_SIZE + _METADATA_SLACK + len(producer_name) + 2 * len(publication.ordering_key)
    first = pending[0][0]
    payload = bytearray()
    count = 0
    for sequence_id, record in pending:
        before = len(payload)
        explicit = None if sequence_id == first + count else sequence_id
        pack_record(payload, record.value, record.key, record.event_time, explicit, record.properties or None)
        if overhead + len(payload) > max_message_size:
            if count == 0:
                raise MessageTooLargeError(
                    f"message with sequence id {sequence_id} is {len(payload) - RECORD_HEADER.size} bytes with "
                    f"its properties; the topic takes at most {max_message_size} bytes per message")
            del payload[before:]
            break
        count += 1
    return count, payload


def _metadata(
    publication: Publication, producer_name: str, messages: list[tuple[int, Record]], size: int,
) -> entry_pb2.EntryMetadata:
    keys = {record.key for _, record in messages}
    key = keys.pop() if len(keys) == 1 else None
    return EntryMetadata(
        producer_name=producer_name, sequence_id=messages[0][0], highest_sequence_id=messages[-1][0],
        num_messages=len(messages), publish_time=_now_ms(), compression=publication.compression,  # type: ignore[arg-type]
        uncompressed_size=size, batched=publication.batched or len(messages) > 1, partition_key=key or "",
        ordering_key=publication.ordering_key,
    )


def _send(entry: bytes, metadata: entry_pb2.EntryMetadata) -> broker_pb2.SendEntry:
    return broker_pb2.SendEntry(sequence_id=metadata.sequence_id, highest_sequence_id=metadata.highest_sequence_id,
                                num_messages=max(1, metadata.num_messages), entry=entry)


def _now_ms() -> int:
    return int(time.time() * 1000)
