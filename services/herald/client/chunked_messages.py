"""The consumer's side of chunked messages. Chunks from delivered entries go to the ChunkAssembler
(chunk_assembly.py); a message made whole is decompressed and becomes one Message under its last
chunk's id, and the positions of all its chunks are kept (`whole`) so that acknowledging, negatively
acknowledging or timing it out covers every chunk. What the assembler gives up on is acknowledged
(recorded in the AckTracker; `on_acks_queued` has the owner send them) or left for the broker to
deliver again (timed by the ack timeout when it is on). Incomplete messages expire: `on_expiry(due)`
asks the owner for a call of `expire` at that clock time. No I/O, no timers of its own."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from herald.client.acks import AckTracker
from herald.client.chunk_assembly import ChunkAssembler
from herald.client.config import ConsumerConfig
from herald.client.message import DetailedMessage, EntryInfo, Message
from herald.client.unacked_tracker import UnackedTracker
from herald.common.codec.entry import ENTRY_FRAMING_ALLOWANCE, OpenedEntry, restore_payload
from herald.common.errors import InvalidArgumentError

Position = tuple[int, int]


class ChunkedMessages:
    """One consumer's chunked messages, incomplete and whole."""

    def __init__(
        self, topic: str, partition: int, decode: Callable[[bytes], Any] | None, config: ConsumerConfig,
        tracker: AckTracker, unacked: UnackedTracker | None, on_acks_queued: Callable[[], None],
        on_expiry: Callable[[float], None],
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._decode = decode
        self._tracker = tracker
        self._unacked = unacked
        self._on_acks_queued = on_acks_queued
        self._on_expiry = on_expiry
        # A chunked message's payload is its one record: the value and its framing.
        self._max_size = config.max_chunked_message_size + ENTRY_FRAMING_ALLOWANCE
        self._assembler = ChunkAssembler(config.max_pending_chunked_message,
                                         config.auto_ack_oldest_chunked_message_on_queue_full,
                                         config.expire_time_of_incomplete_chunked_message, self._max_size)
        self._expiry_asked = False  # an `expire` call is due
        # Last chunk's position -> every chunk's, for each message made whole and not yet acked.
        self.whole: dict[Position, tuple[Position, ...]] = {}

    @property
    def dropped(self) -> int:
        """Incomplete messages given up on."""
        return self._assembler.dropped

    def unpack(
        self, position: Position, redelivery_count: int, opened: OpenedEntry, now: float,
        decode: Callable[[bytes], Any] | None = None, schema_version: int | None = None,
    ) -> list[Message[Any]]:
        """One chunk: nothing to queue until its message's last chunk (each chunk's permit goes
        back at once, as in Pulsar), then the whole message. Raises for a chunk or a message that
        cannot be read, or is larger than max_chunked_message_size (the consumer drops the entry).
        `now` is the clock `expire` is called with; `decode` the one for the chunks' schema version
        (None: the consumer's)."""
        metadata = opened.metadata
        assembled = self._assembler.add(position, metadata, opened.payload, now, int(time.time() * 1000))
        self._settle()
        if assembled is None:
            return []
        # A chunked message is one record, whichever format its chunks are in (the last chunk's
        # metadata reads it: a Pulsar message's key and properties are there).
        records = list(opened.records(restore_payload(metadata, assembled.payload, self._max_size), 1))
        if len(records) != 1:
            raise InvalidArgumentError(f"chunked message {metadata.uuid} holds {len(records)} records, not one")
        value, key, event_time, sequence_id, properties, _, _ = records[0]
        first_sequence_id = assembled.first_sequence_id
        info = EntryInfo(self._topic, position[0], position[1], self._partition, metadata.producer_name,
                         metadata.publish_time, redelivery_count, 1, decode or self._decode, schema_version,
                         first_sequence_id)
        if len(assembled.positions) > 1:
            self.whole[position] = assembled.positions
        if key is None and not properties and not event_time and sequence_id is None:
            return [Message(value, -1, info)]
        return [DetailedMessage(value, key, properties or None, event_time,
                                first_sequence_id if sequence_id is None else sequence_id, -1, info)]

    def forget_incomplete(self) -> None:
        """The broker delivers every chunk not acknowledged again (a reconnect, a seek, a
        redelivery request): start over."""
        self._assembler.clear()

    def expire(self, now: float) -> None:
        """The time `on_expiry` asked for came: drop what is incomplete for too long."""
        self._expiry_asked = False
        self._assembler.expire(now)
        self._settle()

    def _settle(self) -> None:
        """Act on what the assembler gave up on, and ask for the next expiry."""
        assembler = self._assembler
        if assembler.to_acknowledge:
            for ledger_id, entry_id in assembler.to_acknowledge:
                self._tracker.acknowledge(ledger_id, entry_id, -1)
            assembler.to_acknowledge.clear()
            self._on_acks_queued()
        if assembler.to_redeliver:
            if self._unacked is not None:  # else a reconnect or a redelivery request brings them back
                for position in assembler.to_redeliver:
                    self._unacked.add(position)
            assembler.to_redeliver.clear()
        due = assembler.next_expiry()
        if due is not None and not self._expiry_asked:
            self._expiry_asked = True
            self._on_expiry(due)
