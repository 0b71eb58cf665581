"""The broker's side of a producer: its name, its topic, whether it is closed, its counters, and the
checks every entry it sends must pass before the topic deduplicates and stores it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from herald.common.entry import entry_checksum_ok, read_metadata
from herald.common.errors import ChecksumError, MessageTooLargeError, MetadataError, PersistenceError

if TYPE_CHECKING:
    from herald.broker.nonpersistent_topic import NonPersistentTopic
    from herald.broker.topic import PersistentTopic


# The limit is on the message; its entry adds a header, metadata and record framing on top.
ENTRY_FRAMING_ALLOWANCE = 10 * 1024

class Producer:
    def __init__(self, topic: PersistentTopic | NonPersistentTopic, name: str, producer_id: int) -> None:
        self.topic = topic
        self.name = name
        self.producer_id = producer_id
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.entries_in_counter = 0
        self.properties: dict[str, str] = {}  # the application's, for stats
        self._closed_event = asyncio.Event()

    def check(self, entry: bytes, *, encryption_required: bool, max_message_size: int) -> None:
        """The publish checks, in Pulsar's order; each failure says what to do."""
        if self.closed:
            raise PersistenceError("Producer is closed")
        if not entry_checksum_ok(entry):
            raise ChecksumError("Checksum failed on the broker")
        if encryption_required and not read_metadata(entry, verify=False).encryption_keys:
            raise MetadataError("Messages must be encrypted")
        if len(entry) > max_message_size + ENTRY_FRAMING_ALLOWANCE:
            raise MessageTooLargeError(
                f"entry of {len(entry)} bytes is larger than the maximum message size of "
                f"{max_message_size} bytes: send smaller messages or smaller batches"
            )

    def record(self, num_messages: int, size: int) -> None:
        self.msg_in_counter += num_messages
        self.bytes_in_counter += size
        self.entries_in_counter += 1

    def close(self) -> None:
        """Refuse further entries (those already accepted still complete). Idempotent."""
        self.closed = True
        self._closed_event.set()

    async def wait_closed(self) -> None:
        """Returns once the producer is closed, by its client or by the broker (topic unloaded,
        write failed): the adapter then ends the stream so the client reconnects."""
        await self._closed_event.wait()
