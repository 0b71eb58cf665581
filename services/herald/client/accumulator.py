"""The producer's accumulator: packs messages into one batch buffer (herald.common.entry records,
no object per message beyond the caller's future) and closes the batch into a PendingOp when it
holds batching_max_messages, would pass batching_max_bytes, or its first message has waited the
max publish delay. The sender (producer.py) ships PendingOps and matches their receipts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from herald.api.v1 import broker_pb2
from herald.common.entry import RECORD_HEADER, EntryMetadata, encode_entry, pack_record
from herald.common.errors import HeraldError
from herald.common.message_id import MessageId

log = logging.getLogger(__name__)

# Called on the event loop thread with (None, id) on success or (error, None) on failure; the sync
# facade uses these instead of futures.
SendCallback = Callable[[HeraldError | None, MessageId | None], None]
Waiter = asyncio.Future[MessageId] | SendCallback

_pack_header = RECORD_HEADER.pack
_RECORD_OVERHEAD = RECORD_HEADER.size
_new_id = MessageId._make
_Future = asyncio.Future


class PendingOp:
    """One closed batch waiting for its receipt: the encoded entry and one waiter per message."""

    __slots__ = (
        "_request",
        "batched",
        "created",
        "entry",
        "flushed",
        "highest_sequence_id",
        "num_messages",
        "sequence_id",
        "waiters",
    )

    def __init__(
        self, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes, batched: bool,
        waiters: list[Waiter],
    ) -> None:
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.num_messages = num_messages
        self.entry = entry
        self.batched = batched
        self.waiters = waiters
        self.created = time.monotonic()
        self.flushed: asyncio.Future[None] | None = None  # set by flush() on the newest op
        self._request: broker_pb2.ProduceRequest | None = None

    def request(self) -> broker_pb2.ProduceRequest:
        """The SendEntry request, built once and reused by every resend."""
        if self._request is None:
            self._request = broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
                sequence_id=self.sequence_id, highest_sequence_id=self.highest_sequence_id,
                num_messages=self.num_messages, entry=self.entry,
            ))
        return self._request

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

    def fail(self, error: HeraldError) -> None:
        fail_waiters(self.waiters, error)
        if self.flushed is not None and not self.flushed.done():
            self.flushed.set_exception(error)


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


class BatchAccumulator:
    """The open batch: a bytearray of packed records plus the waiters of its messages.

    `emit` receives each closed batch as a PendingOp. With `batched` false every message is closed
    at once into an entry of its own (batch index -1 in its id).
    """

    __slots__ = (
        "_buffer", "_emit", "_loop", "_timer", "_waiters", "batched", "count", "first_sequence_id",
        "highest_sequence_id", "max_bytes", "max_delay", "max_messages", "producer_name",
    )

    def __init__(
        self, *, max_messages: int, max_bytes: int, max_delay: float, batched: bool,
        emit: Callable[[PendingOp], None], loop: asyncio.AbstractEventLoop, producer_name: str = "",
    ) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_delay = max_delay
        self.batched = batched
        self.producer_name = producer_name
        self._emit = emit
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._buffer = bytearray()
        self._waiters: list[Waiter] = []
        self.count = 0
        self.first_sequence_id = 0
        self.highest_sequence_id = 0

    @property
    def nbytes(self) -> int:
        """The size of the open batch's payload so far."""
        return len(self._buffer)

    def append(
        self, value: bytes, key: str | None, properties: dict[str, str] | None, event_time: int,
        sequence_id: int, waiter: Waiter,
    ) -> None:
        """Add one message; closes the batch before it if it would not fit, after it if full."""
        count = self.count
        buffer = self._buffer
        if count and len(buffer) + len(value) + _RECORD_OVERHEAD > self.max_bytes:
            self.flush()
            count = 0
            buffer = self._buffer
        if not count:
            self.first_sequence_id = self.highest_sequence_id = sequence_id
            record_sequence_id = None
        else:
            # A record names its sequence id only when it is not the batch's first plus its index.
            record_sequence_id = None if sequence_id == self.first_sequence_id + count else sequence_id
            if sequence_id > self.highest_sequence_id:
                self.highest_sequence_id = sequence_id
        if key is None and not event_time and record_sequence_id is None and not properties:
            buffer += _pack_header(len(value), 0)
            buffer += value
        else:
            pack_record(buffer, value, key, event_time, record_sequence_id, properties)
        self._waiters.append(waiter)
        self.count = count = count + 1
        if not self.batched or count >= self.max_messages or len(buffer) >= self.max_bytes:
            self.flush()
        elif count == 1:
            self._timer = self._loop.call_later(self.max_delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Close the open batch, if it holds anything, and emit it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.count:
            return
        payload = self._buffer
        metadata = EntryMetadata(
            producer_name=self.producer_name, sequence_id=self.first_sequence_id,
            highest_sequence_id=self.highest_sequence_id, num_messages=self.count,
            publish_time=int(time.time() * 1000), batched=self.batched, uncompressed_size=len(payload),
        )
        op = PendingOp(self.first_sequence_id, self.highest_sequence_id, self.count,
                       encode_entry(metadata, payload), self.batched, self._waiters)
        self._buffer = bytearray()
        self._waiters = []
        self.count = 0
        self._emit(op)

    def fail(self, error: HeraldError) -> int:
        """Fail the open batch's messages; returns how many there were."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters, count = self._waiters, self.count
        self._buffer = bytearray()
        self._waiters = []
        self.count = 0
        fail_waiters(waiters, error)
        return count
