"""Reassembly of chunked messages. A message larger than the topic's max message size travels as
num_chunks unbatched entries sharing a uuid (EntryMetadata.uuid, chunk_id 0..num_chunks-1,
total_chunk_size); each carries the next slice of the payload an unbatched entry of that message
would carry (its one record, compressed when the metadata says so). The consumer collects the
slices in order and hands on the whole payload once the last one came; the message's id is then
the last chunk's, and acknowledging it acknowledges every chunk.

Incomplete messages are bounded (Pulsar's rules): past max_pending the oldest is dropped, its
chunks acknowledged when auto_ack_oldest is set and otherwise left unacknowledged so that the
broker delivers them again; one incomplete for longer than expire_after is dropped and its chunks
acknowledged (the rest will not come); a chunk out of order drops its message, and is itself
acknowledged when published longer ago than expire_after. Each chunk of a message announcing more
than max_size bytes is refused, so nothing of it is kept. Pure bookkeeping with the clock passed
in: what to acknowledge or leave is collected for the consumer to act on."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from herald.api.v1 import entry_pb2
from herald.client.chunking import MAX_CHUNKED_SIZE
from herald.common.errors import InvalidArgumentError, MessageTooLargeError

log = logging.getLogger(__name__)

Position = tuple[int, int]  # (ledger id, entry id)


@dataclass(slots=True)
class _Partial:
    """A chunked message still missing chunks."""

    uuid: str
    num_chunks: int
    total_size: int
    first_sequence_id: int
    started: float  # clock time its first chunk arrived
    parts: list[bytes] = field(default_factory=list)
    positions: list[Position] = field(default_factory=list)
    size: int = 0


@dataclass(frozen=True, slots=True)
class Assembled:
    """A chunked message made whole."""

    payload: bytes
    positions: tuple[Position, ...]  # every chunk's, first to last
    first_sequence_id: int


class ChunkAssembler:
    """Incomplete chunked messages by uuid, oldest first."""

    def __init__(self, max_pending: int, auto_ack_oldest: bool, expire_after: float,
                 max_size: int = MAX_CHUNKED_SIZE) -> None:
        self._max_pending = max_pending
        self._max_size = max_size
        self._auto_ack_oldest = auto_ack_oldest
        self._expire_after = expire_after
        self._partial: dict[str, _Partial] = {}  # insertion order: the oldest first
        # Chunks of dropped messages: to acknowledge now, or to leave unacknowledged (the consumer
        # lets the ack timeout, a reconnect or a redelivery request bring them back).
        self.to_acknowledge: list[Position] = []
        self.to_redeliver: list[Position] = []
        self.dropped = 0  # incomplete messages given up on

    def __len__(self) -> int:
        return len(self._partial)

    def add(
        self, position: Position, metadata: entry_pb2.EntryMetadata, data: bytes | memoryview, now: float,
        now_ms: int,
    ) -> Assembled | None:
        """Take one chunk; the whole message once this was its last chunk. `now` is the clock the
        expiry is measured on, `now_ms` wall-clock unix milliseconds (to age a stray chunk by its
        publish time). InvalidArgumentError for chunk metadata that makes no sense,
        MessageTooLargeError for a message announcing more than max_size bytes."""
        uuid, chunk_id, num_chunks = metadata.uuid, metadata.chunk_id, metadata.num_chunks
        if not uuid or not 0 <= chunk_id < num_chunks or metadata.total_chunk_size < 0:
            raise InvalidArgumentError(
                f"bad chunk metadata: uuid {uuid!r}, chunk {chunk_id} of {num_chunks}, "
                f"total size {metadata.total_chunk_size}")
        if metadata.total_chunk_size > self._max_size:
            raise MessageTooLargeError(
                f"chunked message {uuid} announces {metadata.total_chunk_size} bytes, more than the "
                f"{self._max_size} taken here: raise the consumer's max_chunked_message_size to receive it")
        if chunk_id == 0:
            stale = self._partial.pop(uuid, None)
            if stale is not None:  # delivered again from its first chunk: start over
                self.to_redeliver += stale.positions
            if len(self._partial) >= self._max_pending:
                self._drop_oldest()
            partial = self._partial[uuid] = _Partial(uuid, num_chunks, metadata.total_chunk_size,
                                                     metadata.sequence_id, now)
        else:
            found = self._partial.get(uuid)
            if found is None or chunk_id != len(found.positions) or num_chunks != found.num_chunks:
                self._stray(position, metadata, found, now_ms)
                return None
            partial = found
        partial.parts.append(bytes(data))
        partial.positions.append(position)
        partial.size += len(data)
        if partial.size > partial.total_size:
            self._corrupt(partial, f"its chunks hold more than the {partial.total_size} bytes announced")
            return None
        if len(partial.positions) < partial.num_chunks:
            return None
        del self._partial[uuid]
        if partial.size != partial.total_size:
            self._corrupt(partial, f"its chunks hold {partial.size} bytes, {partial.total_size} were announced")
            return None
        return Assembled(b"".join(partial.parts), tuple(partial.positions), partial.first_sequence_id)

    def next_expiry(self) -> float | None:
        """When the oldest incomplete message expires (clock time), None when there is none."""
        for partial in self._partial.values():
            return partial.started + self._expire_after
        return None

    def expire(self, now: float) -> int:
        """Drop the messages incomplete for longer than expire_after, acknowledging their chunks."""
        expired = [p for p in self._partial.values() if p.started + self._expire_after <= now]
        for partial in expired:
            del self._partial[partial.uuid]
            self.to_acknowledge += partial.positions
            self.dropped += 1
            log.warning("chunked message %s still lacked %d of its %d chunks after %gs: dropped and acknowledged",
                        partial.uuid, partial.num_chunks - len(partial.positions), partial.num_chunks,
                        self._expire_after)
        return len(expired)

    def clear(self) -> None:
        """Forget every incomplete message (the broker delivers their chunks again: a reconnect)."""
        self._partial.clear()

    def _drop_oldest(self) -> None:
        oldest = next(iter(self._partial.values()))
        del self._partial[oldest.uuid]
        self.dropped += 1
        if self._auto_ack_oldest:
            self.to_acknowledge += oldest.positions
        else:
            self.to_redeliver += oldest.positions
        log.warning("more than %d chunked messages incomplete: dropped the oldest, %s (%d of %d chunks), %s",
                    self._max_pending, oldest.uuid, len(oldest.positions), oldest.num_chunks,
                    "acknowledging its chunks" if self._auto_ack_oldest else "leaving its chunks for redelivery")

    def _stray(self, position: Position, metadata: entry_pb2.EntryMetadata, found: _Partial | None,
               now_ms: int) -> None:
        """A chunk that does not continue its message: drop both."""
        if found is not None:
            del self._partial[found.uuid]
            self.to_redeliver += found.positions
            self.dropped += 1
        if now_ms - metadata.publish_time > self._expire_after * 1000:
            self.to_acknowledge.append(position)  # too old for the rest of its message to come
        else:
            self.to_redeliver.append(position)
        log.warning("chunk %d of %d of message %s arrived out of order (expected %s): dropped",
                    metadata.chunk_id, metadata.num_chunks, metadata.uuid,
                    "a first chunk" if found is None else f"chunk {len(found.positions)}")

    def _corrupt(self, partial: _Partial, why: str) -> None:
        self._partial.pop(partial.uuid, None)
        self.to_redeliver += partial.positions
        self.dropped += 1
        log.error("chunked message %s dropped: %s", partial.uuid, why)
