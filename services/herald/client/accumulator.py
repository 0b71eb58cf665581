"""The producer's accumulator: packs messages into one batch buffer (herald.common.codec.entry records,
no object per message beyond the caller's future) and closes the batch into a PendingOp when it
holds batching_max_messages, would pass batching_max_bytes, or its first message has waited the
max publish delay; or sooner, when the application awaits its sends and nothing earlier is in
flight (linger.py). Closing a batch compresses its payload once, sets the entry's key when all its
messages share one, and splits a message too large for the topic into chunks (chunking.py).
Sequence ids are given here, in the order entries will be sent: the broker's dedup needs every
entry's ids above the previous entry's. KeyBasedAccumulator keeps one open batch per key. The
sender (sender.py) ships PendingOps; the producer's protocol (producer_protocol.py) matches their
receipts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from herald.api.v1 import broker_pb2
from herald.client import chunking
from herald.client import tracing as client_tracing
from herald.client.linger import TurnRule
from herald.common import tracing
from herald.common.codec.compression import compress
from herald.common.codec.entry import HEADER_SIZE, RECORD_HEADER, EntryMetadata, encode_entry, pack_record
from herald.common.codec.message_id import MessageId
from herald.common.errors import HeraldError

log = logging.getLogger(__name__)

# Called on the event loop thread with (None, id) on success or (error, None) on failure; the sync
# facade uses these instead of futures.
SendCallback = Callable[[HeraldError | None, MessageId | None], None]
Waiter = asyncio.Future[MessageId] | SendCallback

_pack_header = RECORD_HEADER.pack
_RECORD_OVERHEAD = RECORD_HEADER.size
_new_id = MessageId._make
_Future = asyncio.Future
_monotonic = time.monotonic
_NO_WAITERS: list[Waiter] = []
_ProduceRequest = broker_pb2.ProduceRequest


class PendingOp:
    """One closed entry waiting for its receipt: the encoded entry and one waiter per message.

    settles: the messages its receipt completes (num_messages, but 0 for a chunk other than its
    message's last); size: their payload bytes before compression; chunks_after: the chunks of the
    same message after this one (they fail with it)."""

    __slots__ = (
        "_request",
        "batched",
        "chunks_after",
        "created",
        "entry",
        "flushed",
        "highest_sequence_id",
        "num_messages",
        "sequence_id",
        "settles",
        "size",
        "span",
        "waiters",
    )

    def __init__(
        self, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes, batched: bool,
        waiters: list[Waiter], created: float | None = None, size: int = 0, settles: int | None = None,
        chunks_after: int = 0,
    ) -> None:
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.num_messages = num_messages
        self.entry = entry
        self.batched = batched
        self.waiters = waiters
        self.created = _monotonic() if created is None else created  # its first message was queued
        self.size = size
        self.settles = num_messages if settles is None else settles
        self.chunks_after = chunks_after
        self.flushed: asyncio.Future[None] | None = None  # set by flush() on the newest op
        self._request: broker_pb2.ProduceRequest | None = None
        self.span: tracing.Span | None = None  # the send span, when the producer traces

    def request(self) -> broker_pb2.ProduceRequest:
        """The SendEntry request, built once and reused by every resend. Built in place: the
        entry's bytes are copied once, into the request (a SendEntry made first and then given to
        a ProduceRequest would be copied a second time, as a whole)."""
        request = self._request
        if request is None:
            self._request = request = _ProduceRequest()
            send = request.send
            send.sequence_id = self.sequence_id
            send.highest_sequence_id = self.highest_sequence_id
            send.num_messages = self.num_messages
            send.entry = self.entry
            if self.span is not None:
                send.traceparent = tracing.traceparent(self.span)
        return request

    def complete(self, ledger_id: int, entry_id: int, partition: int) -> None:
        """Hand every message its id: (ledger, entry, partition, index in the batch)."""
        if self.batched:
            for index, waiter in enumerate(self.waiters):
                message_id = _new_id((ledger_id, entry_id, partition, index))
                if isinstance(waiter, _Future):
                    if not waiter.done():
                        waiter.set_result(message_id)
                else:
                    _call(waiter, None, message_id)
        else:
            message_id = _new_id((ledger_id, entry_id, partition, -1))
            for waiter in self.waiters:
                if isinstance(waiter, _Future):
                    if not waiter.done():
                        waiter.set_result(message_id)
                else:
                    _call(waiter, None, message_id)
        if self.flushed is not None and not self.flushed.done():
            self.flushed.set_result(None)
        if self.span is not None:
            client_tracing.sent(self.span, ledger_id, entry_id)

    def fail(self, error: HeraldError) -> None:
        fail_waiters(self.waiters, error)
        if self.flushed is not None and not self.flushed.done():
            self.flushed.set_exception(error)
        if self.span is not None:
            tracing.end(self.span, error)


def fail_waiters(waiters: list[Waiter], error: HeraldError) -> None:
    for waiter in waiters:
        if isinstance(waiter, _Future):
            if not waiter.done():
                waiter.set_exception(error)
        else:
            _call(waiter, error, None)


def _call(callback: SendCallback, error: HeraldError | None, message_id: MessageId | None) -> None:
    try:
        callback(error, message_id)
    except Exception:
        # A user's callback must not break the producer; say so and carry on.
        log.exception("send callback %r raised", callback)


class BatchAccumulator(TurnRule):
    """The open batch: a bytearray of packed records plus the waiters of its messages.

    `emit` receives each closed batch as a PendingOp. With `batched` false every message is closed
    at once into an entry of its own (batch index -1 in its id). `compression` is a
    entry_pb2.CompressionType; `chunk_limit` (0: off) is the largest entry allowed, above which a
    message is split into chunks (as it is when its payload is larger before compression).
    `assign` (for KeyBasedAccumulator) gives a closing batch its sequence ids instead of numbering
    messages as they come. `in_flight` (the producer's count of entries awaiting receipts) turns on
    the end-of-turn rule (linger.py; the owner calls settled() after receipts);
    None: a batch closes only when full, after the delay, or on flush().
    """

    __slots__ = (
        "_assign", "_buffer", "_emit", "_key", "_keyed", "_ordered", "_ordering_key", "_started", "_timer",
        "_waiters",
        "batched", "chunk_limit", "compression", "count", "deliver_at", "first_sequence_id", "highest_sequence_id",
        "max_bytes", "max_delay", "max_messages", "next_sequence_id", "producer_name", "schema_version", "stamp",
        "tracing",
    )

    def __init__(
        self, *, max_messages: int, max_bytes: int, max_delay: float, batched: bool,
        emit: Callable[[PendingOp], None], loop: asyncio.AbstractEventLoop, producer_name: str = "",
        compression: int = 0, chunk_limit: int = 0, assign: Callable[[int], int] | None = None,
        send_tracing: client_tracing.SendTracing | None = None, in_flight: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(loop, in_flight)
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_delay = max_delay
        self.batched = batched
        self.producer_name = producer_name
        self.schema_version: int | None = None  # of the registered schema: every entry carries it
        self.compression = compression
        self.chunk_limit = chunk_limit
        self.deliver_at = 0  # for the entry being closed by append_alone
        self.next_sequence_id = 0
        self.stamp = 0  # KeyBasedAccumulator: when the open batch was started
        self.tracing = send_tracing  # None: no send spans (tracing was off when the producer was made)
        self._assign = assign
        self._emit = emit
        self._timer: asyncio.TimerHandle | None = None
        self._buffer = bytearray()
        self._waiters: list[Waiter] = []
        self._started = 0.0
        # The first key (and ordering key) of the batch, and how many of its messages have
        # that one: the entry carries it when that is all of them.
        self._key: str | None = None
        self._keyed = 0
        self._ordering_key: bytes | None = None
        self._ordered = 0
        self.count = 0
        self.first_sequence_id = 0
        self.highest_sequence_id = 0

    @property
    def nbytes(self) -> int:
        """The size of the open batch's payload so far."""
        return len(self._buffer)

    def _is_open(self) -> bool:
        return self.count > 0

    def set_limits(self, max_bytes: int, chunk_limit: int) -> None:
        """The broker's max message size changed these (at registration)."""
        self.max_bytes = max_bytes
        self.chunk_limit = chunk_limit

    def append(
        self, value: bytes, key: str | None, properties: dict[str, str] | None, event_time: int,
        sequence_id: int | None, waiter: Waiter, ordering_key: bytes | None = None,
    ) -> None:
        """Add one message (sequence id None: the next one); closes the batch before it if it
        would not fit, after it if full."""
        if sequence_id is None:
            sequence_id = self.next_sequence_id
            self.next_sequence_id = sequence_id + 1
        elif sequence_id >= self.next_sequence_id:
            self.next_sequence_id = sequence_id + 1
        if self._turn is None and self._in_flight is not None:
            self._turn_began()
        count = self.count
        buffer = self._buffer
        if count and len(buffer) + len(value) + _RECORD_OVERHEAD > self.max_bytes:
            self.flush()
            count = 0
            buffer = self._buffer
        if not count:
            self.first_sequence_id = self.highest_sequence_id = sequence_id
            self._started = _monotonic()
            record_sequence_id = None
        else:
            # A record names its sequence id only when it is not the batch's first plus its index.
            record_sequence_id = None if sequence_id == self.first_sequence_id + count else sequence_id
            if sequence_id > self.highest_sequence_id:
                self.highest_sequence_id = sequence_id
        if key is None and ordering_key is None and not event_time and record_sequence_id is None and not properties:
            buffer += _pack_header(len(value), 0)
            buffer += value
        else:
            if key is not None:
                if not self._keyed:
                    self._key = key
                    self._keyed = 1
                elif key == self._key:
                    self._keyed += 1
            if ordering_key is not None:
                if not self._ordered:
                    self._ordering_key = ordering_key
                    self._ordered = 1
                elif ordering_key == self._ordering_key:
                    self._ordered += 1
            pack_record(buffer, value, key, event_time, record_sequence_id, properties)
        self._waiters.append(waiter)
        self.count = count = count + 1
        if not self.batched or count >= self.max_messages or len(buffer) >= self.max_bytes:
            self.flush()
        elif count == 1:
            self._timer = self._loop.call_later(self.max_delay, self._on_timer)

    def append_alone(
        self, value: bytes, key: str | None, properties: dict[str, str] | None, event_time: int,
        sequence_id: int | None, waiter: Waiter, ordering_key: bytes | None, deliver_at: int,
    ) -> None:
        """Send one message as an entry of its own (unbatched) after everything queued before it:
        a deliver-at time is per entry."""
        self.flush()
        batched, self.batched = self.batched, False
        self.deliver_at = deliver_at
        try:
            self.append(value, key, properties, event_time, sequence_id, waiter, ordering_key)
        finally:
            self.batched = batched
            self.deliver_at = 0

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Close the open batch, if it holds anything, and emit it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._held = self._urgent = False
        count = self.count
        if not count:
            return
        payload = self._buffer
        first, highest = self.first_sequence_id, self.highest_sequence_id
        if self._assign is not None:
            first = self._assign(count)
            highest = first + count - 1
            self.next_sequence_id = 0
        size = len(payload)
        codec = self.compression
        data = compress(codec, payload) if codec else payload
        metadata = EntryMetadata(
            producer_name=self.producer_name, sequence_id=first, highest_sequence_id=highest,
            num_messages=count, publish_time=int(time.time() * 1000), batched=self.batched,
            compression=cast(Any, codec), uncompressed_size=size, deliver_at_time=self.deliver_at,
        )
        if self._keyed == count:
            metadata.partition_key = self._key  # type: ignore[assignment]  # set: count >= 1
        if self._ordered == count:
            metadata.ordering_key = self._ordering_key  # type: ignore[assignment]
        if self.schema_version is not None:
            metadata.schema_version = self.schema_version  # chunks copy it (chunking.split)
        span = None
        if self.tracing is not None:
            span = self.tracing.start(self.producer_name, payload, count, first)
            metadata.traceparent = tracing.traceparent(span)
        waiters = self._waiters
        self._buffer = bytearray()
        self._waiters = []
        self.count = 0
        self._keyed = self._ordered = 0
        # A message too large for one entry, or larger than the max message size before compression
        # (the broker refuses an unchunked entry declaring more: consumers bound decompression by it),
        # goes as chunks; one that compresses into a single entry then goes as one chunk.
        if self.chunk_limit and (size > self.chunk_limit
                                 or HEADER_SIZE + metadata.ByteSize() + len(data) > self.chunk_limit):
            self._emit_chunks(metadata, data, waiters, size, span)
            return
        op = PendingOp(first, highest, count, encode_entry(metadata, data), self.batched, waiters, self._started, size)
        op.span = span
        self._turn_emitted += 1
        self._emit(op)

    def _emit_chunks(self, metadata: EntryMetadata, data: bytes | bytearray, waiters: list[Waiter],
                     size: int, span: tracing.Span | None = None) -> None:
        """One message as chunk entries, each with its own sequence id (see chunking.py); the send
        span, if any, ends with the last chunk's receipt."""
        first = metadata.sequence_id
        try:
            entries = chunking.split(metadata, bytes(data), self.chunk_limit)
        except HeraldError as exc:
            # Cannot be chunked (the topic's limit is absurdly small): the broker refuses the whole
            # entry, and the send fails with its error.
            log.warning("producer %s: message with sequence id %d sent unchunked: %s", self.producer_name, first, exc)
            op = PendingOp(first, first, 1, encode_entry(metadata, data), False, waiters, self._started, size)
            op.span = span
            self._turn_emitted += 1
            self._emit(op)
            return
        last = len(entries) - 1
        self._turn_emitted += len(entries)
        if first + last >= self.next_sequence_id:
            self.next_sequence_id = first + last + 1
        for index, entry in enumerate(entries):
            final = index == last
            op = PendingOp(first + index, first + index, 1, entry, False, waiters if final else _NO_WAITERS,
                           self._started, size if final else 0, 1 if final else 0, last - index)
            if final:
                op.span = span
            self._emit(op)

    def fail(self, error: HeraldError) -> int:
        """Fail the open batch's messages; returns how many there were."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self._held = self._urgent = False
        waiters, count = self._waiters, self.count
        self._buffer = bytearray()
        self._waiters = []
        self.count = 0
        self._keyed = self._ordered = 0
        if self._assign is not None:
            self.next_sequence_id = 0
        fail_waiters(waiters, error)
        return count


# KeyBasedAccumulator drops the idle batches of keys gone quiet once it holds this many.
_PRUNE_AT = 1000


class KeyBasedAccumulator(TurnRule):
    """BatchingType.KeyBased: one open batch per key (the ordering key, else the key), so that
    every entry holds messages of one key and carries it (what Key_Shared dispatch needs). Each
    batch closes by the same rules as a single open batch; flush() closes them all, oldest first.

    Sequence ids are given when a batch closes, contiguous within it: messages of several keys
    are queued interleaved but their entries reach the broker one after another, and its dedup
    takes an entry only above the previous one. A message with an explicit sequence id therefore
    goes as an entry of its own after every open batch (as one with a deliver-at time does). The
    end-of-turn rule (`in_flight`) applies to all the open batches at once.
    """

    __slots__ = ("_alone", "_batches", "_chunk_limit", "_compression", "_emit", "_max_bytes", "_max_delay",
                 "_max_messages", "_producer_name", "_schema_version", "_stamp", "_tracing", "next_sequence_id")

    def __init__(
        self, *, max_messages: int, max_bytes: int, max_delay: float, emit: Callable[[PendingOp], None],
        loop: asyncio.AbstractEventLoop, producer_name: str = "", compression: int = 0,
        send_tracing: client_tracing.SendTracing | None = None, in_flight: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(loop, in_flight)
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._max_delay = max_delay
        self._emit = emit
        self._producer_name = producer_name
        self._compression = compression
        self._chunk_limit = 0
        self._schema_version: int | None = None
        self._tracing = send_tracing
        self._stamp = 0
        self.next_sequence_id = 0
        self._batches: dict[str | bytes | None, BatchAccumulator] = {}
        self._alone = self._new_batch(batched=False, assign=None)

    def _new_batch(self, batched: bool, assign: Callable[[int], int] | None) -> BatchAccumulator:
        batch = BatchAccumulator(
            max_messages=self._max_messages, max_bytes=self._max_bytes, max_delay=self._max_delay, batched=batched,
            emit=self._emitted, loop=self._loop, producer_name=self._producer_name, compression=self._compression,
            chunk_limit=self._chunk_limit, assign=assign, send_tracing=self._tracing)
        batch.schema_version = self._schema_version
        return batch

    def _emitted(self, op: PendingOp) -> None:
        self._turn_emitted += 1
        self._emit(op)

    def _is_open(self) -> bool:
        return any(batch.count for batch in self._batches.values())

    def _take(self, count: int) -> int:
        first = self.next_sequence_id
        self.next_sequence_id = first + count
        return first

    @property
    def producer_name(self) -> str:
        return self._producer_name

    @producer_name.setter
    def producer_name(self, name: str) -> None:
        self._producer_name = name
        for batch in (self._alone, *self._batches.values()):
            batch.producer_name = name

    @property
    def schema_version(self) -> int | None:
        return self._schema_version

    @schema_version.setter
    def schema_version(self, version: int | None) -> None:
        self._schema_version = version
        for batch in (self._alone, *self._batches.values()):
            batch.schema_version = version

    @property
    def count(self) -> int:
        """Messages in the open batches."""
        return sum(batch.count for batch in self._batches.values())

    @property
    def open_batches(self) -> int:
        return sum(1 for batch in self._batches.values() if batch.count)

    def set_limits(self, max_bytes: int, chunk_limit: int) -> None:
        self._max_bytes, self._chunk_limit = max_bytes, chunk_limit
        for batch in (self._alone, *self._batches.values()):
            batch.set_limits(max_bytes, chunk_limit)

    def append(
        self, value: bytes, key: str | None, properties: dict[str, str] | None, event_time: int,
        sequence_id: int | None, waiter: Waiter, ordering_key: bytes | None = None,
    ) -> None:
        if sequence_id is not None:
            self.append_alone(value, key, properties, event_time, sequence_id, waiter, ordering_key, 0)
            return
        if self._turn is None and self._in_flight is not None:
            self._turn_began()
        group = key if ordering_key is None else ordering_key
        batch = self._batches.get(group)
        if batch is None:
            if len(self._batches) >= _PRUNE_AT:
                self._batches = {name: open_ for name, open_ in self._batches.items() if open_.count}
            batch = self._batches[group] = self._new_batch(batched=True, assign=self._take)
        if not batch.count:
            batch.stamp = self._stamp = self._stamp + 1
        batch.append(value, key, properties, event_time, None, waiter, ordering_key)

    def append_alone(
        self, value: bytes, key: str | None, properties: dict[str, str] | None, event_time: int,
        sequence_id: int | None, waiter: Waiter, ordering_key: bytes | None, deliver_at: int,
    ) -> None:
        self.flush()
        if sequence_id is None:
            sequence_id = self.next_sequence_id
        self._alone.append_alone(value, key, properties, event_time, sequence_id, waiter, ordering_key, deliver_at)
        if sequence_id >= self.next_sequence_id:
            self.next_sequence_id = sequence_id + 1

    def flush(self) -> None:
        """Close every open batch, in the order they were started."""
        self._held = self._urgent = False
        batches = sorted((batch for batch in self._batches.values() if batch.count), key=_stamp_of)
        self._batches = {}
        for batch in batches:
            batch.flush()

    def fail(self, error: HeraldError) -> int:
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self._held = self._urgent = False
        batches, self._batches = list(self._batches.values()), {}
        return sum(batch.fail(error) for batch in batches)


def _stamp_of(batch: BatchAccumulator) -> int:
    return batch.stamp


Accumulator = BatchAccumulator | KeyBasedAccumulator
