"""The producer's protocol (SEEDS §2), apart from any transport: the queue of closed entries waiting
for their receipts, oldest first, and what is still to be written of it; receipts matched to the
head of that queue (equal completes it, behind is ignored, ahead means entries were lost: start
over on a new stream); everything pending written again, in order, after each registration (the
broker's dedup drops what it stored; chunks included, each has a sequence id of its own); the send
timeout's bookkeeping; send errors that fail one entry and those that need a new stream. It does no
I/O: a stream (stream.py) writes what `next_request` gives and hands it every reply, and the
sender (sender.py) ties the two together. Unit-tested by feeding it replies."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from herald.api.v1 import broker_pb2
from herald.client.accumulator import PendingOp
from herald.client.config import ProducerConfig
from herald.client.stats import ProducerStatsRecorder
from herald.client.stream_protocol import Reconnect, reply_error
from herald.common.codec.entry import entry_checksum_ok
from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.codec.schema_proto import schema_to_proto
from herald.common.errors import (
    ChecksumError,
    ConnectionError_,
    HeraldError,
    InvalidArgumentError,
    MessageTooLargeError,
    MetadataError,
    SendTimeoutError,
    TopicTerminatedError,
)

log = logging.getLogger(__name__)

# Errors about one entry that a resend cannot fix: that entry fails, the stream carries on.
_ENTRY_ERRORS = (MessageTooLargeError, InvalidArgumentError, MetadataError)
_CLOSE = broker_pb2.ProduceRequest(close=broker_pb2.CloseProducer())
_monotonic = time.monotonic


def _nothing(*_: object) -> None:
    pass


class ProducerProtocol:
    """One producer's side of a Produce stream: pending entries, receipts, resends.

    What it tells its owner: `on_registered(name, max_message_size, next_sequence_id)` after each
    registration (next_sequence_id: the first the accumulator gives, on the first registration
    only, else None; `schema_version` is then the version the broker gave `schema`),
    `on_released(count)` when messages were settled (stored or failed) and so leave the pending
    count, `on_terminated(error)` when the broker says the topic was terminated (the owner fails
    what is pending and ends the stream).
    """

    role = "producer"
    stream_name = "the produce stream"

    def __init__(
        self, topic: str, config: ProducerConfig, *,
        on_registered: Callable[[str, int, int | None], None] = _nothing,
        on_released: Callable[[int], None] = _nothing,
        on_terminated: Callable[[TopicTerminatedError], None] = _nothing,
    ) -> None:
        self.topic = topic
        self.partition = TopicName.parse(topic).partition_index
        self.name = config.producer_name or ""
        self._properties = config.properties
        self._initial_sequence_id = config.initial_sequence_id
        self.send_timeout = config.send_timeout
        self._on_registered = on_registered
        self._on_released = on_released
        self._on_terminated = on_terminated
        # The schema registered with the topic (None: raw bytes), and the version the broker gave it
        # (stamped on every entry: consumers decode by it).
        self.schema: SchemaInfo | None = None
        self.schema_version: int | None = None
        self.wake: Callable[[], None] = _nothing  # the stream's: something new to write
        self.pending: deque[PendingOp] = deque()  # written or not, oldest first, awaiting receipts
        self.unsent: deque[PendingOp] = deque()  # the ones the stream has yet to write
        self.last_sequence_id = -1  # the highest the broker acknowledged
        self.terminated = False
        self.stats = ProducerStatsRecorder(_monotonic())

    # ---- the handshake ----------------------------------------------------------------------

    def handshake_what(self, address: str) -> str:
        return f"registering producer {self.name or '(unnamed)'} on {self.topic} at {address}"

    def handshake_request(self) -> broker_pb2.ProduceRequest:
        request = broker_pb2.ProduceRequest()
        register = request.register
        register.topic = self.topic
        register.producer_name = self.name
        if self._properties:
            register.properties.update(self._properties)
        if self.schema is not None and not self.schema.raw:
            schema_to_proto(self.schema, register.schema)
        return request

    def handshake_reply(self, reply: broker_pb2.ProduceResponse) -> broker_pb2.ProducerRegistered:
        kind = reply.WhichOneof("reply")
        if kind == "registered":
            return reply.registered
        if kind == "error":
            raise reply_error(reply.error)
        raise ConnectionError_(f"the broker answered a producer registration with {kind!r}")

    def on_connected(self, registered: broker_pb2.ProducerRegistered, first: bool) -> None:
        """Registered: adopt the broker's name for the producer and, the first time, where sequence
        ids start; then write every pending entry again, in order (dedup drops what was stored)."""
        self.name = registered.producer_name or self.name
        self.schema_version = registered.schema_version if registered.HasField("schema_version") else None
        next_sequence_id = None
        if first:
            initial = self._initial_sequence_id
            self.last_sequence_id = registered.last_sequence_id if initial is None else initial
            next_sequence_id = self.last_sequence_id + 1
        self.unsent = deque(self.pending)
        self._on_registered(self.name, registered.max_message_size, next_sequence_id)
        if first:
            log.debug("producer %s registered on %s (last sequence id %d)", self.name, self.topic,
                      registered.last_sequence_id)
        else:
            log.info("producer %s registered again on %s (last sequence id %d): resending %d pending entries",
                     self.name, self.topic, registered.last_sequence_id, len(self.pending))

    def on_disconnected(self) -> None:
        """Nothing to drop: whatever is pending goes again after the next registration."""

    # ---- writing ----------------------------------------------------------------------------

    def add(self, op: PendingOp) -> None:
        """A closed entry, to be written after every one before it."""
        self.pending.append(op)
        self.unsent.append(op)
        self.wake()

    def in_flight(self) -> int:
        """Entries awaiting their receipts (written or not): an open batch waits behind them."""
        return len(self.pending)

    def next_request(self) -> broker_pb2.ProduceRequest | None:
        # Taken before it is written: after a failed write, registration refills `unsent` anyway.
        unsent = self.unsent
        return unsent.popleft().request() if unsent else None

    def request_written(self) -> None:
        pass

    def close_request(self) -> broker_pb2.ProduceRequest:
        return _CLOSE

    # ---- replies ----------------------------------------------------------------------------

    def on_reply(self, reply: broker_pb2.ProduceResponse) -> None:
        kind = reply.WhichOneof("reply")
        if kind == "receipt":
            self.on_receipt(reply.receipt)
        elif kind == "send_error":
            self.on_send_error(reply.send_error)
        elif kind == "error":
            error = reply_error(reply.error)
            if isinstance(error, TopicTerminatedError):
                self.terminate(error)
                raise Reconnect("topic terminated")  # the owner ended the stream: it stops
            raise error

    def on_receipt(self, receipt: broker_pb2.SendReceipt) -> None:
        """Receipts come in the order entries were written: one for the head completes it, one
        behind it is from before a resend (already settled), one ahead means entries were lost."""
        pending = self.pending
        if not pending:
            log.debug("producer %s: receipt for %d with nothing pending; ignored", self.name, receipt.sequence_id)
            return
        op = pending[0]
        sequence_id = receipt.sequence_id
        if sequence_id != op.sequence_id:
            if sequence_id < op.sequence_id:
                log.debug("producer %s: receipt for %d behind the head %d; ignored", self.name, sequence_id,
                          op.sequence_id)
                return
            raise Reconnect(f"receipt for sequence id {sequence_id} is ahead of the oldest pending "
                            f"one ({op.sequence_id}): resending")
        pending.popleft()
        if op.highest_sequence_id > self.last_sequence_id:
            self.last_sequence_id = op.highest_sequence_id
        op.complete(receipt.ledger_id, receipt.entry_id, self.partition)
        settles = op.settles
        self._on_released(settles)
        self.stats.receipt(settles, op.size, _monotonic() - op.created)

    def on_send_error(self, send_error: broker_pb2.SendError) -> None:
        """An error about one entry fails it when it is the head (and the stream carries on); a
        checksum error, or any other, needs a new stream (and the entries go again)."""
        error = reply_error(send_error.error)
        if isinstance(error, TopicTerminatedError):
            self.terminate(error)
            raise Reconnect("topic terminated")  # the owner ended the stream: it stops
        head = self.pending[0] if self.pending else None
        if head is None or send_error.sequence_id < head.sequence_id:
            # About an entry already settled (the rest of a failed chunked message, say).
            log.debug("producer %s: send error for %d behind the head; ignored: %s", self.name,
                      send_error.sequence_id, error)
            return
        is_head = head.sequence_id == send_error.sequence_id
        if isinstance(error, ChecksumError):
            if is_head and not entry_checksum_ok(head.entry):
                self.fail_head(ChecksumError(f"entry with sequence id {head.sequence_id} was corrupted "
                                             f"in the producer's memory: {error}"))
            raise Reconnect(f"checksum error from the broker for sequence id {send_error.sequence_id}")
        if is_head and isinstance(error, _ENTRY_ERRORS):
            self.fail_head(error)
            return
        raise Reconnect(f"send of sequence id {send_error.sequence_id} failed: {error}")

    def terminate(self, error: HeraldError) -> None:
        """The topic was terminated: nothing will be stored any more (the owner fails what is
        pending and ends the stream; a reply handler then drops the stream)."""
        if self.terminated:
            return
        log.warning("producer %s: topic %s was terminated", self.name, self.topic)
        self.terminated = True
        self._on_terminated(TopicTerminatedError(f"topic {self.topic} was terminated: {error}"))

    # ---- failing ----------------------------------------------------------------------------

    def fail_head(self, error: HeraldError) -> None:
        """Fail the oldest pending entry; a chunk takes the rest of its message's chunks with it
        (any already written are stored, and the consumer drops the incomplete message)."""
        op = self.pending.popleft()
        dropped = [op]
        for _ in range(op.chunks_after):
            if not self.pending:
                break
            dropped.append(self.pending.popleft())
        if len(dropped) > 1:
            self.unsent = deque(unsent for unsent in self.unsent if unsent not in dropped)
        settles = 0
        for each in dropped:
            each.fail(error)
            settles += each.settles
        self.stats.failed(settles)
        self._on_released(settles)

    def fail_pending(self, error: HeraldError) -> None:
        """Fail every pending entry (closing, terminated, timed out): nothing is written any more."""
        ops = list(self.pending)
        self.pending.clear()
        self.unsent.clear()
        for op in ops:
            op.fail(error)

    # ---- the send timeout -------------------------------------------------------------------

    def overdue_in(self, now: float) -> float | None:
        """Seconds until the oldest pending entry passes the send timeout (<= 0: it has); None
        when nothing is pending (or there is no send timeout)."""
        if not self.pending or self.send_timeout <= 0:
            return None
        return self.pending[0].created + self.send_timeout - now

    def timeout_error(self, count: int) -> SendTimeoutError:
        """What the `count` pending messages fail with when the oldest passed the send timeout."""
        return SendTimeoutError(
            f"message not stored within the send timeout of {self.send_timeout:g}s on topic {self.topic} "
            f"({count} pending messages failed)")
