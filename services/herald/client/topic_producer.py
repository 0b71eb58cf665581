"""The asyncio producer: sequence ids and the send API in front of the accumulator, and the sender
behind it: one Produce stream to the topic's broker, a writer task shipping closed batches in
order and a reader matching receipts to the head of the pending queue (SEEDS §2). On any stream
failure it looks the topic up again, re-registers under the same name and resends every pending
batch in order; the broker's dedup makes that safe."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc.aio

from herald.api.v1 import broker_pb2
from herald.client.accumulator import BatchAccumulator, PendingOp, SendCallback, Waiter
from herald.client.config import ClientConfig, ProducerConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.stream import CLOSED, CLOSING, OPEN, BrokerStream, Reconnect
from herald.common.entry import entry_checksum_ok
from herald.common.errors import (
    ChecksumError,
    ConnectionError_,
    HeraldError,
    InvalidArgumentError,
    MessageTooLargeError,
    MetadataError,
    ProducerBusyError,
    ProducerClosedError,
    ProducerQueueIsFullError,
    SendTimeoutError,
    TopicTerminatedError,
    from_proto,
)
from herald.common.message_id import MessageId
from herald.common.names import TopicName
from herald.common.rpc import EOF

if TYPE_CHECKING:
    from herald.api.v1.broker_pb2_grpc import BrokerServiceAsyncStub

log = logging.getLogger(__name__)

ProduceCall = grpc.aio.StreamStreamCall[broker_pb2.ProduceRequest, broker_pb2.ProduceResponse]

_TERMINATED = "terminated"  # besides the stream's OPEN, CLOSING and CLOSED
# Errors about one entry that a resend cannot fix: that entry fails, the stream carries on.
_ENTRY_ERRORS = (MessageTooLargeError, InvalidArgumentError, MetadataError)


class TopicProducer(BrokerStream[broker_pb2.ProduceRequest, broker_pb2.ProduceResponse,
                                 broker_pb2.ProducerRegistered]):
    """Publishes to one topic. Made by `AsyncClient.create_producer`, never directly."""

    _role = "producer"
    _stream_name = "the produce stream"
    _log = log
    _close_request = broker_pb2.ProduceRequest(close=broker_pb2.CloseProducer())

    def __init__(
        self, topic: str, config: ProducerConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[TopicProducer], None],
    ) -> None:
        super().__init__(topic, config.producer_name or "", client_config, pool, lookup)
        self._partition = TopicName.parse(topic).partition_index
        self._config = config
        self._on_closed = on_closed
        self._max_message_size = config.max_message_size
        self._max_pending = config.max_pending_messages
        self._block = config.block_if_queue_full
        self._next_sequence_id = 0
        self._last_sequence_id = -1
        self._acc = BatchAccumulator(
            max_messages=config.batching_max_messages, max_bytes=config.batching_max_bytes,
            max_delay=config.batching_max_publish_delay, batched=config.batching_enabled,
            emit=self._emit, loop=self._loop,
        )
        self._pending: deque[PendingOp] = deque()  # sent or not, oldest first, awaiting receipts
        self._unsent: deque[PendingOp] = deque()  # the ones the writer has yet to write
        self._pending_count = 0  # messages in the open batch and in pending ops
        self._room_waiters: deque[asyncio.Future[None]] = deque()
        self._timeout_timer: asyncio.TimerHandle | None = None

    # ---- public API -------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def producer_name(self) -> str:
        return self._name

    @property
    def last_sequence_id(self) -> int:
        """The highest sequence id the broker has acknowledged (-1 before any)."""
        return self._last_sequence_id

    @property
    def max_message_size(self) -> int:
        return self._max_message_size

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def closed(self) -> bool:
        """True once close() began (or the topic was terminated): sends fail from then on."""
        return self._state is not OPEN

    async def send(
        self, value: bytes, *, key: str | None = None, properties: dict[str, str] | None = None,
        event_time: int | None = None, sequence_id: int | None = None,
    ) -> MessageId:
        """Send one message and wait for the broker to store it."""
        future = await self.send_async(
            value, key=key, properties=properties, event_time=event_time, sequence_id=sequence_id
        )
        # A caller waiting on one message should not also wait out the batching delay.
        self._acc.flush()
        return await future

    async def send_async(
        self, value: bytes, *, key: str | None = None, properties: dict[str, str] | None = None,
        event_time: int | None = None, sequence_id: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue one message; the returned future gives its id once the broker stored it.

        Raises at once when the producer is closed, the message is too large, or the queue is
        full (unless block_if_queue_full, which waits for room instead).
        """
        if value.__class__ is not bytes:
            value = _as_bytes(value)
        self._check_sendable(len(value))
        if self._pending_count >= self._max_pending:
            if not self._block:
                raise self._queue_full()
            await self.wait_for_room()
        future: asyncio.Future[MessageId] = self._loop.create_future()
        self._enqueue(value, key, properties, event_time, sequence_id, future)
        return future

    async def flush(self) -> None:
        """Send the open batch and wait until every message queued so far is stored."""
        if self._state is not OPEN:
            raise self._closed_error()
        self._acc.flush()
        if not self._pending:
            return
        op = self._pending[-1]
        if op.flushed is None:
            op.flushed = self._loop.create_future()
        await asyncio.shield(op.flushed)

    async def close(self) -> None:
        """Close the producer. Messages not yet stored fail with ProducerClosedError (call
        `flush()` first to wait for them). Closing twice does nothing."""
        if self._state in (CLOSING, CLOSED):
            return
        self._state = CLOSING
        self._fail_all(ProducerClosedError("producer closed"))
        # The writer sends CloseProducer and half-closes; the broker ends the stream.
        await self._stop_stream(graceful=True)
        self._state = CLOSED
        self._on_closed(self)

    async def _shutdown(self) -> None:
        """Close without telling the broker: for AsyncClient.shutdown()."""
        if self._state is CLOSED:
            return
        self._state = CLOSING
        self._fail_all(ProducerClosedError("producer closed"))
        await self._stop_stream(graceful=False)
        self._state = CLOSED
        self._on_closed(self)

    async def __aenter__(self) -> TopicProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"TopicProducer(topic={self._topic!r}, name={self._name!r}, state={self._state})"

    # ---- the send path (hot) ----------------------------------------------------------------

    def _check_sendable(self, size: int) -> None:
        if self._state is not OPEN:
            raise self._closed_error()
        if size > self._max_message_size:
            raise MessageTooLargeError(
                f"message of {size} bytes is larger than the maximum message size of "
                f"{self._max_message_size} bytes on topic {self._topic}"
            )

    def _enqueue(
        self, value: bytes, key: str | None, properties: dict[str, str] | None, event_time: int | None,
        sequence_id: int | None, waiter: Waiter,
    ) -> None:
        if sequence_id is None:
            sequence_id = self._next_sequence_id
            self._next_sequence_id = sequence_id + 1
        elif sequence_id >= self._next_sequence_id:
            self._next_sequence_id = sequence_id + 1
        self._pending_count += 1
        self._acc.append(value, key, properties, event_time or 0, sequence_id, waiter)

    def enqueue_nowait(
        self, value: bytes, callback: SendCallback, key: str | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None,
        sequence_id: int | None = None,
    ) -> bool:
        """Queue a message whose outcome goes to `callback` (on the loop thread): the sync
        facade's path. False when the queue is full and the producer blocks: wait_for_room() and
        offer it again. Errors reach the callback, never the caller."""
        try:
            if value.__class__ is not bytes:
                value = _as_bytes(value)
            self._check_sendable(len(value))
            if self._pending_count >= self._max_pending:
                if self._block:
                    return False
                raise self._queue_full()
        except HeraldError as exc:
            callback(exc, None)
            return True
        self._enqueue(value, key, properties, event_time, sequence_id, callback)
        return True

    async def wait_for_room(self) -> None:
        """Wait until fewer than max_pending_messages are pending (or the producer closes)."""
        while self._pending_count >= self._max_pending:
            if self._state is not OPEN:
                raise self._closed_error()
            # The open batch may hold much of the queue: ship it now rather than after the delay.
            self._acc.flush()
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._room_waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
                    self._room_waiters.remove(waiter)
        if self._state is not OPEN:
            raise self._closed_error()

    def _queue_full(self) -> ProducerQueueIsFullError:
        return ProducerQueueIsFullError(
            f"producer {self._name!r} on {self._topic} already has {self._pending_count} messages "
            f"pending (max_pending_messages={self._max_pending}): wait for receipts, or set "
            "block_if_queue_full=True"
        )

    def _closed_error(self) -> HeraldError:
        if self._state is _TERMINATED:
            return TopicTerminatedError(f"topic {self._topic} was terminated: the producer cannot send")
        return ProducerClosedError("producer closed")

    def _emit(self, op: PendingOp) -> None:
        """The accumulator closed a batch: queue it for the writer."""
        self._pending.append(op)
        self._unsent.append(op)
        self._wake_writer()
        if self._timeout_timer is None and self._config.send_timeout > 0:
            self._timeout_timer = self._loop.call_later(self._config.send_timeout, self._check_send_timeout)

    def _release(self, count: int) -> None:
        self._pending_count -= count
        waiters = self._room_waiters
        room = self._max_pending - self._pending_count
        while waiters and room > 0:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                room -= 1

    def _fail_all(self, error: HeraldError) -> None:
        """Fail every message not yet stored: the open batch and all pending ops."""
        ops = list(self._pending)
        self._pending.clear()
        self._unsent.clear()
        self._acc.fail(error)
        for op in ops:
            op.fail(error)
        self._pending_count = 0
        if self._timeout_timer is not None:
            self._timeout_timer.cancel()
            self._timeout_timer = None
        while self._room_waiters:
            waiter = self._room_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # they look at the state and raise

    def _check_send_timeout(self) -> None:
        self._timeout_timer = None
        if not self._pending:
            return
        timeout = self._config.send_timeout
        age = time.monotonic() - self._pending[0].created
        if age >= timeout:
            count = self._pending_count
            log.warning("producer %s on %s: %d messages not stored within the send timeout of %gs",
                        self._name, self._topic, count, timeout)
            self._fail_all(SendTimeoutError(
                f"message not stored within the send timeout of {timeout:g}s on topic {self._topic} "
                f"({count} pending messages failed)"
            ))
        else:
            self._timeout_timer = self._loop.call_later(timeout - age, self._check_send_timeout)

    # ---- the connection (BrokerStream's hooks) -----------------------------------------------

    async def _start(self) -> None:
        """Register with the topic's broker (retrying what may pass within the operation
        timeout), then run the stream in the background."""
        call = await self._connect_first(f"creating a producer on {self._topic}")
        self._task = self._loop.create_task(self._run(call), name=f"herald-producer-{self._name}")

    def _open_call(self, stub: BrokerServiceAsyncStub) -> ProduceCall:
        return stub.Produce(None)

    def _handshake_what(self, address: str) -> str:
        return f"registering producer {self._name or '(unnamed)'} on {self._topic} at {address}"

    async def _handshake(self, call: ProduceCall) -> broker_pb2.ProducerRegistered:
        await call.write(broker_pb2.ProduceRequest(
            register=broker_pb2.RegisterProducer(topic=self._topic, producer_name=self._name)
        ))
        reply = await call.read()
        if reply is EOF:
            raise ConnectionError_(f"the broker ended the stream while registering a producer on {self._topic}")
        assert isinstance(reply, broker_pb2.ProduceResponse)
        kind = reply.WhichOneof("reply")
        if kind == "registered":
            return reply.registered
        if kind == "error":
            raise from_proto(reply.error)
        raise ConnectionError_(f"the broker answered a producer registration with {kind!r}")

    def _first_connect_failed(self, error: HeraldError) -> None:
        if isinstance(error, ProducerBusyError):
            # Another live producer holds the name: say so now, not after the operation timeout.
            # (Reconnects do retry it: the broker may not have noticed our old stream is gone.)
            error.retryable = False

    def _reconnect_failed(self, error: HeraldError) -> bool:
        if isinstance(error, TopicTerminatedError):
            self._terminate(error)
            return True
        return False

    def _on_connected(self, registered: broker_pb2.ProducerRegistered, first: bool) -> None:
        self._name = registered.producer_name or self._name
        self._acc.producer_name = self._name
        if registered.max_message_size > 0:
            self._max_message_size = registered.max_message_size
            # A topic's policy may set a limit below the batch size: batches must fit it too.
            self._acc.max_bytes = min(self._config.batching_max_bytes, self._max_message_size)
        if first:
            initial = self._config.initial_sequence_id
            self._last_sequence_id = registered.last_sequence_id if initial is None else initial
            self._next_sequence_id = self._last_sequence_id + 1
        # Everything not yet acknowledged goes again, in order; dedup drops what was stored.
        self._unsent = deque(self._pending)
        log.debug("producer %s registered on %s (last sequence id %d)", self._name, self._topic,
                  registered.last_sequence_id)

    def _next_request(self) -> broker_pb2.ProduceRequest | None:
        # Taken before it is written: after a failed write, registration refills _unsent anyway.
        unsent = self._unsent
        return unsent.popleft().request() if unsent else None

    def _on_reply(self, reply: broker_pb2.ProduceResponse) -> None:
        kind = reply.WhichOneof("reply")
        if kind == "receipt":
            self._on_receipt(reply.receipt)
        elif kind == "send_error":
            self._on_send_error(reply.send_error)
        elif kind == "error":
            error = from_proto(reply.error)
            if isinstance(error, TopicTerminatedError):
                self._terminate(error)
                raise Reconnect("topic terminated")  # ends the stream; _run sees the state and stops
            raise error

    def _on_receipt(self, receipt: broker_pb2.SendReceipt) -> None:
        pending = self._pending
        if not pending:
            log.debug("producer %s: receipt for %d with nothing pending; ignored",
                      self._name, receipt.sequence_id)
            return
        op = pending[0]
        sequence_id = receipt.sequence_id
        if sequence_id != op.sequence_id:
            if sequence_id < op.sequence_id:
                # From before a resend or a timeout: that op is already settled.
                log.debug("producer %s: receipt for %d behind the head %d; ignored",
                          self._name, sequence_id, op.sequence_id)
                return
            raise Reconnect(f"receipt for sequence id {sequence_id} is ahead of the oldest pending "
                             f"one ({op.sequence_id}): resending")
        pending.popleft()
        if op.highest_sequence_id > self._last_sequence_id:
            self._last_sequence_id = op.highest_sequence_id
        op.complete(receipt.ledger_id, receipt.entry_id, self._partition)
        self._release(op.num_messages)

    def _on_send_error(self, send_error: broker_pb2.SendError) -> None:
        error = from_proto(send_error.error)
        if isinstance(error, TopicTerminatedError):
            self._terminate(error)
            raise Reconnect("topic terminated")  # ends the stream; _run sees the state and stops
        head = self._pending[0] if self._pending else None
        is_head = head is not None and head.sequence_id == send_error.sequence_id
        if isinstance(error, ChecksumError):
            if head is not None and is_head and not entry_checksum_ok(head.entry):
                self._fail_head(ChecksumError(f"entry with sequence id {head.sequence_id} was corrupted "
                                              f"in the producer's memory: {error}"))
            raise Reconnect(f"checksum error from the broker for sequence id {send_error.sequence_id}")
        if is_head and isinstance(error, _ENTRY_ERRORS):
            self._fail_head(error)
            return
        raise Reconnect(f"send of sequence id {send_error.sequence_id} failed: {error}")

    def _fail_head(self, error: HeraldError) -> None:
        op = self._pending.popleft()
        op.fail(error)
        self._release(op.num_messages)

    def _terminate(self, error: HeraldError) -> None:
        log.warning("producer %s: topic %s was terminated", self._name, self._topic)
        self._state = _TERMINATED
        self._fail_all(TopicTerminatedError(f"topic {self._topic} was terminated: {error}"))


def _as_bytes(value: object) -> bytes:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"a message value must be bytes, got {type(value).__name__}")
