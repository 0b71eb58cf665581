"""The broker's side of a producer: its name, its topic, whether it is closed, its counters, and the
checks every entry it sends must pass before the topic deduplicates and stores it. An entry is
either format (herald.common.codec.entry reads both): Herald's producers send Herald's, Pulsar's
producers Pulsar's, each checked by its own layout and stored unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from herald.broker.core.access_modes import ProducerAccessMode
from herald.broker.core.publication import Publication
from herald.common.codec.entry import (
    ENTRY_FRAMING_ALLOWANCE,
    MIN_RECORD_SIZE,
    PULSAR_MIN_MESSAGE_SIZE,
    EntryMetadata,
    OpenedEntry,
    entry_checksum_ok,
    open_entry,
)
from herald.common.errors import (
    ChecksumError,
    InvalidArgumentError,
    MessageTooLargeError,
    MetadataError,
    PersistenceError,
)


class ProducerHost(Protocol):
    """What a producer knows of its topic (any kind): where its sends go."""

    @property
    def name(self) -> str: ...
    @property
    def max_message_size(self) -> int: ...

    def publish(self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int,
                entry: bytes) -> asyncio.Future[tuple[int, int]]: ...
    def submit(self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int,
               entry: bytes, publication: Publication) -> None: ...
    def remove_producer(self, producer: Producer) -> None: ...


class Producer:
    def __init__(self, topic: ProducerHost, name: str, producer_id: int) -> None:
        self.topic = topic
        self.name = name
        self.producer_id = producer_id
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.entries_in_counter = 0
        self.properties: dict[str, str] = {}  # the application's, for stats
        self.access_mode = ProducerAccessMode.SHARED
        self.topic_epoch: int | None = None  # the topic's epoch when it registered (None: none yet)
        self.schema_version: int | None = None  # of the schema it registered with (None: it gave none)
        self._closed_event = asyncio.Event()
        self.on_closed: Callable[[], None] | None = None  # the session's, to stop waiting for room

    def check(
        self, entry: bytes, num_messages: int, *, encryption_required: bool, max_message_size: int,
    ) -> EntryMetadata:
        """The publish checks, in Pulsar's order, then those of the entry's metadata that
        consumers rely on; returns the metadata (parsed once; a Pulsar entry's read as Herald's).
        Each failure says what to do."""
        if self.closed:
            raise PersistenceError("Producer is closed")
        if not entry_checksum_ok(entry):  # each format's own layout
            raise ChecksumError("Checksum failed on the broker")
        opened = open_entry(entry, verify=False)  # just verified
        metadata = opened.metadata
        if encryption_required and not metadata.encryption_keys:
            raise MetadataError("Messages must be encrypted")
        if len(entry) > max_message_size + ENTRY_FRAMING_ALLOWANCE:
            raise MessageTooLargeError(
                f"entry of {len(entry)} bytes is larger than the maximum message size of "
                f"{max_message_size} bytes: send smaller messages or smaller batches"
            )
        self._check_metadata(opened, num_messages, max_message_size)
        return metadata

    def _check_metadata(self, opened: OpenedEntry, num_messages: int, max_message_size: int) -> None:
        """What consumers size their work by must be true: the producer's name, how many messages
        the entry holds, what its payload decompresses to (consumers bound decompression by it), a
        chunk's place in its message. The broker does not decompress: a count is checked against
        what the declared size can hold."""
        metadata, payload_size = opened.metadata, len(opened.payload)
        if metadata.producer_name != self.name:
            raise InvalidArgumentError(
                f"entry metadata names producer {metadata.producer_name!r}, but it was sent by producer "
                f"{self.name!r}: an entry carries the name its producer registered with")
        claimed = metadata.num_messages
        if claimed < 1:
            raise InvalidArgumentError(
                f"entry metadata says num_messages={claimed}: an entry holds one message or more")
        if claimed != num_messages:
            raise InvalidArgumentError(
                f"the send says num_messages={num_messages}, but the entry's metadata says {claimed}: "
                "they must agree")
        if metadata.num_chunks > 0:
            self._check_chunk(metadata, claimed, payload_size)
        elif metadata.compression and metadata.uncompressed_size > max_message_size + ENTRY_FRAMING_ALLOWANCE:
            raise MessageTooLargeError(
                f"entry metadata says its payload decompresses to {metadata.uncompressed_size} bytes, more than "
                f"the maximum message size of {max_message_size} bytes: send smaller messages or smaller batches")
        capacity = opened.capacity
        if claimed > capacity:
            what, size = (("uncompressed_size", metadata.uncompressed_size) if metadata.compression
                          else ("total_chunk_size", metadata.total_chunk_size) if metadata.num_chunks > 0
                          else ("payload", payload_size))
            minimum = PULSAR_MIN_MESSAGE_SIZE if opened.pulsar is not None else MIN_RECORD_SIZE
            raise InvalidArgumentError(
                f"entry metadata says num_messages={claimed}, but its {what} of {size} bytes holds at most "
                f"{capacity} (a message takes {minimum} bytes at least)")

    @staticmethod
    def _check_chunk(metadata: EntryMetadata, claimed: int, payload_size: int) -> None:
        """A chunk is a slice of one message (Pulsar's num_chunks_from_msg, chunk_id and
        total_chunk_msg_size, read as Herald's num_chunks, chunk_id and total_chunk_size)."""
        if claimed != 1:
            raise InvalidArgumentError(
                f"entry metadata says num_messages={claimed} for a chunk: a chunk is part of one message")
        if not 0 <= metadata.chunk_id < metadata.num_chunks:
            raise InvalidArgumentError(
                f"entry metadata says chunk {metadata.chunk_id} of a message of {metadata.num_chunks} chunks: "
                f"chunks are numbered 0 to {metadata.num_chunks - 1}")
        if payload_size > metadata.total_chunk_size:
            raise InvalidArgumentError(
                f"the chunk's {payload_size} bytes are more than the {metadata.total_chunk_size} bytes its metadata "
                "says the whole message has (total_chunk_size): a chunk is a slice of its message")

    def record(self, num_messages: int, size: int) -> None:
        self.msg_in_counter += num_messages
        self.bytes_in_counter += size
        self.entries_in_counter += 1

    def close(self) -> None:
        """Refuse further entries (those already accepted still complete). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._closed_event.set()
        if self.on_closed is not None:
            self.on_closed()

    async def wait_closed(self) -> None:
        """Returns once the producer is closed, by its client or by the broker (topic unloaded,
        write failed): the adapter then ends the stream so the client reconnects."""
        await self._closed_event.wait()
