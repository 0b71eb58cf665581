"""The asyncio producer of one topic (or one partition): the send API in front of the accumulator
(schema, immediate checks, interceptors, deliver-at times, max pending with block-or-fail), and the
sender behind it (sender.py: the Produce stream and the producer's protocol object, which matches
receipts to the head of the pending queue and resends after each reconnect, SEEDS §2). The producer
itself holds no stream: it packs messages, waits for room and receipts, and closes."""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from herald.client import chunking
from herald.client import tracing as client_tracing
from herald.client.accumulator import (
    Accumulator,
    BatchAccumulator,
    KeyBasedAccumulator,
    SendCallback,
    Waiter,
    fail_waiters,
)
from herald.client.config import BatchingType, ClientConfig, ProducerConfig
from herald.client.connection import ConnectionPool
from herald.client.interceptors import ProducerInterceptor, run_hook
from herald.client.lookup import LookupService
from herald.client.message import OutgoingMessage
from herald.client.producer import AsyncProducer, T, deliver_at_ms
from herald.client.producer_protocol import ProducerProtocol
from herald.client.schema import BYTES, BytesSchema, Schema
from herald.client.schema_decoders import BindsToTopic, key_text, separated
from herald.client.schema_fetcher import schema_fetcher
from herald.client.sender import Sender
from herald.client.stats import ProducerStats
from herald.common import tracing
from herald.common.codec.message_id import MessageId
from herald.common.errors import (
    HeraldError,
    HeraldTimeoutError,
    InvalidArgumentError,
    MessageTooLargeError,
    ProducerBusyError,
    ProducerClosedError,
    ProducerQueueIsFullError,
    SchemaError,
    TopicTerminatedError,
)

log = logging.getLogger(__name__)

_OPEN, _CLOSING, _CLOSED, _TERMINATED = "open", "closing", "closed", "terminated"
_monotonic = time.monotonic


def batch_messages_limit(batching_max_messages: int, max_pending_messages: int) -> int:
    """The most messages one batch holds: batching_max_messages, and at most half the pending room
    (so that one batch fills while the one before it is being stored)."""
    return max(1, min(batching_max_messages, max_pending_messages // 2))


class TopicProducer(AsyncProducer[T]):
    """Publishes to one topic. Made by `AsyncClient.create_producer` (or by a PartitionedProducer,
    one per partition, which passes each its share of max_pending_messages), never directly."""

    def __init__(
        self, topic: str, config: ProducerConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[TopicProducer[Any]], None], *,
        schema: Schema[T] | None = None, max_pending_messages: int | None = None,
    ) -> None:
        self._topic = topic
        self._config = config
        self._client_config = client_config
        self._pool = pool
        self._lookup = lookup
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._state = _OPEN
        self._schema: Schema[Any] = BYTES if schema is None else schema
        # None: bytes go as they are, with no call at all (the default's whole cost).
        self._schema_encode = None if type(self._schema) is BytesSchema else self._schema.encode
        # A KeyValue schema with SEPARATED encoding: its key goes as the message key (schema_decoders.py).
        self._keyed = separated(self._schema)
        self._interceptors: tuple[ProducerInterceptor, ...] = tuple(config.interceptors)
        # Tracing is decided here, once: off, the send path tests only `_slow` (as it would anyway).
        self._tracing = client_tracing.SendTracing(topic) if tracing.ENABLED else None
        self._slow = bool(self._interceptors) or self._tracing is not None  # messages go via _queue_intercepted
        self._max_message_size = config.max_message_size
        self._chunking = config.chunking_enabled
        self._max_pending = config.max_pending_messages if max_pending_messages is None else max_pending_messages
        if not isinstance(self._max_pending, int) or self._max_pending < 1:
            raise InvalidArgumentError(f"max_pending_messages must be a positive integer, got {self._max_pending!r}")
        self._block = config.block_if_queue_full
        self._pending_count = 0  # messages in the open batch and in pending entries
        self._room_waiters: deque[asyncio.Future[None]] = deque()
        self._stats_timer: asyncio.TimerHandle | None = None
        self._protocol = ProducerProtocol(topic, config, on_registered=self._registered, on_released=self._release,
                                          on_terminated=self._terminate)
        self._protocol.schema = None if isinstance(self._schema, BindsToTopic) else self._schema.info
        self._sender = Sender(self._protocol, client_config, pool, lookup, self._loop, self._timed_out,
                              self._connect_failed)
        ship = self._sender.ship
        codec = config.compression_type.value
        # A batch ships at the end of the turn that queued it unless entries are in flight (linger.py).
        in_flight = self._protocol.in_flight if config.batching_enabled else None
        # A batch takes at most half of max_pending_messages: with batches as large as the whole
        # pending room, the application waits while the one entry in flight is stored, and the
        # next batch only starts filling at its receipt (issue 20: 100 B produce, max pending
        # 1,000, was one entry per storage round trip).
        max_messages = batch_messages_limit(config.batching_max_messages, self._max_pending)
        self._acc: Accumulator
        if config.batching_enabled and config.batching_type is BatchingType.KeyBased:
            self._acc = KeyBasedAccumulator(
                max_messages=max_messages, max_bytes=config.batching_max_bytes,
                max_delay=config.batching_max_publish_delay, emit=ship, loop=self._loop, compression=codec,
                send_tracing=self._tracing, in_flight=in_flight)
        else:
            self._acc = BatchAccumulator(
                max_messages=max_messages, max_bytes=config.batching_max_bytes,
                max_delay=config.batching_max_publish_delay, batched=config.batching_enabled,
                emit=ship, loop=self._loop, compression=codec,
                chunk_limit=config.max_message_size if self._chunking else 0, send_tracing=self._tracing,
                in_flight=in_flight)

    # ---- public API -------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def producer_name(self) -> str:
        return self._protocol.name

    @property
    def last_sequence_id(self) -> int:
        """The highest sequence id the broker has acknowledged (-1 before any)."""
        return self._protocol.last_sequence_id

    @property
    def max_message_size(self) -> int:
        """The largest message the topic takes (what its broker reported); with chunking on,
        larger messages go as chunks of at most this size."""
        return self._max_message_size

    @property
    def is_connected(self) -> bool:
        return self._sender.connected

    @property
    def closed(self) -> bool:
        """True once close() began (or the topic was terminated): sends fail from then on."""
        return self._state is not _OPEN

    async def send(
        self, value: T, *, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | datetime.datetime | None = None, deliver_after: float | datetime.timedelta | None = None,
    ) -> MessageId:
        """Send one message and wait until the broker stored it; returns its id."""
        future = await self.send_async(
            value, key=key, ordering_key=ordering_key, properties=properties, event_time=event_time,
            sequence_id=sequence_id, deliver_at=deliver_at, deliver_after=deliver_after,
        )
        # A caller waiting on one message should not also wait out the batching delay, nor for the
        # entries in flight: its batch ships at the end of this turn (other tasks' sends of this
        # turn join it).
        self._acc.ship_soon()
        return await future

    async def send_async(
        # Not keyword-only here, unlike AsyncProducer's (which callers see): CPython fills each
        # missing keyword-only default with a dict lookup, ~25 ns a call for these seven.
        self, value: T, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | datetime.datetime | None = None, deliver_after: float | datetime.timedelta | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue one message; the future gives its id once the broker stored it. Raises at once
        when the producer is closed, the value does not encode, the message is too large, or the
        queue is full (unless block_if_queue_full, which waits for room instead)."""
        # encode(), inlined: this is the hot path.
        if self._state is not _OPEN:
            raise self._closed_error()
        if value.__class__ is bytes and self._schema_encode is None:
            data: bytes = value  # type: ignore[assignment]  # (no cast(): a call costs on this path)
        elif self._keyed is None:
            data = self._schema.encode(value)
        else:
            raw_key, data = self._keyed.split(value)
            key = key_text(raw_key)
        if len(data) > self._max_message_size:
            self._check_size(len(data))
        at = None if deliver_at is None and deliver_after is None else deliver_at_ms(deliver_at, deliver_after)
        if self._pending_count >= self._max_pending:
            if not self._block:
                raise self._queue_full()
            await self.wait_for_room()
        future: asyncio.Future[MessageId] = self._loop.create_future()
        if self._slow:
            self._queue_intercepted(OutgoingMessage(data, key, ordering_key, properties, event_time, sequence_id, at),
                                    future, raise_refusal=True)
            return future
        self._pending_count += 1
        if at is None:
            self._acc.append(data, key, properties, event_time or 0, sequence_id, future, ordering_key)
        else:
            self._acc.append_alone(data, key, properties, event_time or 0, sequence_id, future, ordering_key, at)
        return future

    async def flush(self) -> None:
        """Send the open batch and wait until every message queued so far is stored: at most the
        send timeout (the operation timeout when send_timeout is 0), then HeraldTimeoutError; the
        messages stay queued."""
        if self._state is not _OPEN:
            raise self._closed_error()
        self._acc.flush()
        pending = self._protocol.pending
        if not pending:
            return
        op = pending[-1]
        if op.flushed is None:
            op.flushed = self._loop.create_future()
        bound = self._config.send_timeout or self._client_config.operation_timeout
        try:
            await asyncio.wait_for(asyncio.shield(op.flushed), bound)
        except TimeoutError:
            raise HeraldTimeoutError(
                f"flush of producer {self.producer_name!r} on {self._topic} timed out after {bound:g}s (the send "
                f"timeout, else operation_timeout) with {self._pending_count} messages not yet stored: the cluster "
                "does not answer; they stay queued (flush again, or close to fail them)") from None

    def flush_nowait(self) -> None:
        """Close the open batch(es) and queue them for sending now, without waiting."""
        if self._state is _OPEN:
            self._acc.flush()

    async def close(self) -> None:
        """Close the producer. Messages not yet stored fail with ProducerClosedError (call
        `flush()` first to wait for them). Closing twice does nothing."""
        if self._state in (_CLOSING, _CLOSED):
            return
        self._state = _CLOSING
        self._sender.end()
        self._stop_stats()
        self._fail_all(ProducerClosedError("producer closed"))
        # The writer sends CloseProducer and half-closes; the broker ends the stream.
        await self._sender.stop(graceful=True)
        self._state = _CLOSED
        self._on_closed(self)

    async def _shutdown(self) -> None:
        """Close without telling the broker: for AsyncClient.shutdown()."""
        if self._state is _CLOSED:
            return
        self._state = _CLOSING
        self._sender.end()
        self._stop_stats()
        self._fail_all(ProducerClosedError("producer closed"))
        await self._sender.stop(graceful=False)
        self._state = _CLOSED
        self._on_closed(self)

    def stats(self) -> ProducerStats:
        """Counters since creation and send latencies (see herald.client.stats.ProducerStats)."""
        return self._protocol.stats.snapshot(self._pending_count)

    async def __aenter__(self) -> TopicProducer[T]:
        return self

    def __repr__(self) -> str:
        return f"TopicProducer(topic={self._topic!r}, name={self.producer_name!r}, state={self._state})"

    # ---- for the blocking facade -------------------------------------------------------------

    def encode_keyed(self, value: T, key: str | None) -> tuple[bytes, str | None]:
        if self._keyed is None:
            return self.encode(value), key
        if self._state is not _OPEN:
            raise self._closed_error()
        raw_key, data = self._keyed.split(value)
        if len(data) > self._max_message_size:
            self._check_size(len(data))
        return data, key_text(raw_key)

    def encode(self, value: T) -> bytes:
        """The value as bytes (the schema's work), after the checks a send makes at once: the
        producer is open, the message not too large. Safe on any thread."""
        if self._keyed is not None:  # the payload is the value half (the key goes as the message key)
            return self.encode_keyed(value, None)[0]
        if self._state is not _OPEN:
            raise self._closed_error()
        if value.__class__ is bytes and self._schema_encode is None:
            data = cast(bytes, value)
        else:
            data = self._schema.encode(value)
        if len(data) > self._max_message_size:
            self._check_size(len(data))
        return data

    def enqueue_nowait(
        self, data: bytes, callback: SendCallback, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | None = None,
    ) -> bool:
        """Queue an encoded message whose outcome goes to `callback` (on the loop thread). False
        when the queue is full and the producer blocks: wait_for_room() and offer it again.
        Errors reach the callback, never the caller."""
        try:
            if self._state is not _OPEN:
                raise self._closed_error()
            if len(data) > self._max_message_size:
                self._check_size(len(data))
            if self._pending_count >= self._max_pending:
                if self._block:
                    return False
                raise self._queue_full()
        except HeraldError as exc:
            fail_waiters([callback], exc)
            return True
        if self._slow:
            self._queue_intercepted(OutgoingMessage(data, key, ordering_key, properties, event_time, sequence_id,
                                                    deliver_at), callback, raise_refusal=False)
            return True
        self._pending_count += 1
        if deliver_at is None:
            self._acc.append(data, key, properties, event_time or 0, sequence_id, callback, ordering_key)
        else:
            self._acc.append_alone(data, key, properties, event_time or 0, sequence_id, callback, ordering_key,
                                   deliver_at)
        return True

    async def wait_for_room(self) -> None:
        """Wait until fewer than max_pending_messages are pending (or the producer closes)."""
        while self._pending_count >= self._max_pending:
            if self._state is not _OPEN:
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
        if self._state is not _OPEN:
            raise self._closed_error()

    # ---- the send path ----------------------------------------------------------------------

    def _check_size(self, size: int) -> None:
        """Called only for a message over the max message size: fine when chunking takes it."""
        if self._chunking:
            limit = chunking.MAX_CHUNKED_SIZE
            if size <= limit:
                return
            raise MessageTooLargeError(
                f"message of {size} bytes is larger than {limit} bytes, the most a chunked message may carry, "
                f"on topic {self._topic}")
        raise MessageTooLargeError(
            f"message of {size} bytes is larger than the maximum message size of {self._max_message_size} bytes "
            f"on topic {self._topic}: send smaller messages, or create the producer with chunking_enabled=True "
            "(and batching_enabled=False)"
        )

    def _queue_intercepted(self, message: OutgoingMessage, waiter: Waiter, raise_refusal: bool) -> None:
        """Queue a message through the interceptors: before_send may replace it, and every
        message before_send returned reaches on_send_acknowledgement with its id or its error.
        A replaced message that cannot be sent is refused: raised, or reported to the waiter.
        With tracing on, the message (as the interceptors left it) gets its creation context."""
        for interceptor in self._interceptors:
            changed = run_hook(interceptor.before_send, self, message, default=message)
            if isinstance(changed, OutgoingMessage):
                message = changed
            else:
                log.error("interceptor %r: before_send returned %r, not an OutgoingMessage; ignored",
                          interceptor, changed)
        acknowledged = self._acknowledging(message, waiter) if self._interceptors else waiter
        value = message.value
        try:
            if value.__class__ is not bytes:
                value = BYTES.encode(value)
            if len(value) > self._max_message_size:
                self._check_size(len(value))
        except HeraldError as exc:
            if not raise_refusal:
                fail_waiters([acknowledged], exc)
                return
            self._acknowledge(message, None, exc)
            if isinstance(waiter, asyncio.Future):
                waiter.cancel()
            raise
        if self._tracing is not None:
            message.properties = client_tracing.with_creation_context(self._topic, message.properties,
                                                                    self._protocol.name)
        self._pending_count += 1
        event_time = message.event_time or 0
        if message.deliver_at is None:
            self._acc.append(value, message.key, message.properties, event_time, message.sequence_id, acknowledged,
                             message.ordering_key)
        else:
            self._acc.append_alone(value, message.key, message.properties, event_time, message.sequence_id,
                                   acknowledged, message.ordering_key, message.deliver_at)

    def _acknowledging(self, message: OutgoingMessage, waiter: Waiter) -> SendCallback:
        """A callback that tells the interceptors a message's outcome, then its waiter."""

        def acknowledged(error: HeraldError | None, message_id: MessageId | None) -> None:
            self._acknowledge(message, message_id, error)
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    if error is not None:
                        waiter.set_exception(error)
                    else:
                        waiter.set_result(cast(MessageId, message_id))
            else:
                waiter(error, message_id)

        return acknowledged

    def _acknowledge(self, message: OutgoingMessage, message_id: MessageId | None, error: HeraldError | None) -> None:
        for interceptor in self._interceptors:
            run_hook(interceptor.on_send_acknowledgement, self, message, message_id, error, default=None)

    def _queue_full(self) -> ProducerQueueIsFullError:
        return ProducerQueueIsFullError(
            f"producer {self.producer_name!r} on {self._topic} already has {self._pending_count} messages "
            f"pending (max_pending_messages={self._max_pending}): wait for receipts, or set "
            "block_if_queue_full=True"
        )

    def _closed_error(self) -> HeraldError:
        if self._state is _TERMINATED:
            return TopicTerminatedError(f"topic {self._topic} was terminated: the producer cannot send")
        return ProducerClosedError("producer closed")

    def _release(self, count: int) -> None:
        """`count` messages were settled (stored or failed): room for as many waiting senders."""
        self._pending_count -= count
        self._acc.settled()
        waiters = self._room_waiters
        room = self._max_pending - self._pending_count
        while waiters and room > 0:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                room -= 1

    def _fail_all(self, error: HeraldError) -> None:
        """Fail every message not yet stored: the open batch and all pending entries."""
        self._protocol.stats.failed(self._pending_count)
        self._acc.fail(error)
        self._protocol.fail_pending(error)
        self._sender.cancel_timeout()
        self._pending_count = 0
        while self._room_waiters:
            waiter = self._room_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # they look at the state and raise

    def _timed_out(self) -> None:
        """The oldest pending entry passed the send timeout: everything pending fails."""
        count = self._pending_count
        log.warning("producer %s on %s: %d messages not stored within the send timeout of %gs",
                    self.producer_name, self._topic, count, self._config.send_timeout)
        self._fail_all(self._protocol.timeout_error(count))

    # ---- what the sender's stream and protocol tell -------------------------------------------

    def _registered(self, name: str, max_message_size: int, next_sequence_id: int | None) -> None:
        self._acc.producer_name = name
        self._acc.schema_version = self._protocol.schema_version
        if self._tracing is not None:
            self._tracing.address = self._sender.stream.address
        if max_message_size > 0:
            self._max_message_size = max_message_size
            # A topic's policy may set a limit below the batch size: batches must fit it too.
            self._acc.set_limits(min(self._config.batching_max_bytes, max_message_size),
                                 max_message_size if self._chunking else 0)
        if next_sequence_id is not None:
            self._acc.next_sequence_id = next_sequence_id

    def _connect_failed(self, error: HeraldError, first: bool) -> bool:
        if first:
            if isinstance(error, ProducerBusyError):
                # Another live producer holds the name: say so now, not after the operation timeout.
                # (Reconnects do retry it: the broker may not have noticed our old stream is gone.)
                error.retryable = False
            return False
        if isinstance(error, TopicTerminatedError):
            self._protocol.terminate(error)
            return True
        return False

    def _terminate(self, error: TopicTerminatedError) -> None:
        self._state = _TERMINATED
        self._sender.end()
        self._stop_stats()
        self._fail_all(error)

    # ---- life cycle and stats -----------------------------------------------------------------

    async def _start(self) -> None:
        """Register with the topic's broker (retrying what may pass within the operation
        timeout), then run in the background. An AUTO_PRODUCE_BYTES schema first binds to the
        topic's latest schema (SchemaError when the topic has none)."""
        if isinstance(self._schema, BindsToTopic):
            await self._bind_schema(self._schema)
        await self._sender.start()
        interval = self._client_config.stats_interval
        if interval > 0:
            self._stats_timer = self._loop.call_later(interval, self._log_stats)

    async def _bind_schema(self, schema: BindsToTopic) -> None:
        latest = await schema_fetcher(self._pool, self._lookup, self._client_config).latest(self._topic)
        if latest is None:
            raise SchemaError(
                f"topic {self._topic} has no schema for an AUTO_PRODUCE_BYTES producer to validate with: upload one "
                "(herald admin schemas upload) or produce with the topic's schema")
        self._schema = schema.bound_to(latest[1])
        self._schema_encode = self._schema.encode
        self._protocol.schema = latest[1]

    def _log_stats(self) -> None:
        interval = self._client_config.stats_interval
        log.info("producer %s on %s: %s", self.producer_name, self._topic,
                 self._protocol.stats.interval_report(_monotonic(), self._pending_count))
        self._stats_timer = self._loop.call_later(interval, self._log_stats)

    def _stop_stats(self) -> None:
        if self._stats_timer is not None:
            self._stats_timer.cancel()
            self._stats_timer = None
