"""The asyncio consumer of one topic (or one partition): the application's side of a subscription.
It composes three parts: the consumer's protocol object (consumer_protocol.py: permits, unpacking,
ack tracking, rewinds, chunks; no I/O), the Consume stream that carries it (stream.py), and the
receive queue's waiters (receive_queue.py: receive() takes without suspending when messages are
queued; a message_listener is fed by a task of the consumer, message_listener.py). Acks are grouped
with negative acks and sent on a timer (ack_group.py), where the ack timeout (unacked_tracker.py)
asks again for what stays unacked. Seek and unsubscribe are answered on the stream
(consumer_commands.py); a seek makes the broker disconnect the subscription's consumers, and this
one drops what it holds and reconnects. On stream failure the queue is dropped (the broker
redelivers what was not acked) and the consumer reconnects."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc.aio

from herald.api.v1 import broker_pb2
from herald.client.ack_group import AckGroup
from herald.client.config import ClientConfig, ConsumerConfig, ConsumerType
from herald.client.connection import ConnectionPool
from herald.client.consumer import AsyncConsumer
from herald.client.consumer_commands import PendingCommands, seek_request
from herald.client.consumer_protocol import ConsumerProtocol, Position
from herald.client.interceptors import run_hook
from herald.client.lookup import LookupService
from herald.client.message import Message
from herald.client.message_listener import ListenerTask
from herald.client.reader_pull import last_message_id_reply
from herald.client.receive_queue import ReceiveQueue
from herald.client.schema import Schema
from herald.client.schema_decoders import SchemaDecoders
from herald.client.schema_fetcher import schema_fetcher
from herald.client.stats import ConsumerStats
from herald.client.stream import BrokerStream
from herald.common import tracing
from herald.common.codec.message_id import MessageId
from herald.common.errors import (
    ConnectionError_,
    ConsumerClosedError,
    HeraldError,
    InvalidArgumentError,
    NotAllowedError,
)
from herald.common.tasks import cancel_and_wait

if TYPE_CHECKING:
    from herald.api.v1.broker_pb2_grpc import BrokerServiceAsyncStub

log = logging.getLogger(__name__)

T = TypeVar("T")
ConsumeCall = grpc.aio.StreamStreamCall[broker_pb2.ConsumeRequest, broker_pb2.ConsumeResponse]
_OPEN, _CLOSING, _CLOSED = "open", "closing", "closed"


def open_consume(stub: BrokerServiceAsyncStub) -> ConsumeCall:
    return stub.Consume(None, metadata=tracing.grpc_metadata())


class TopicConsumer(ReceiveQueue[T], AsyncConsumer[T]):
    """Receives from one topic (or one partition) through one subscription. Made by
    `AsyncClient.subscribe`; its docstrings are AsyncConsumer's. `adjust_subscribe` may add to
    each Subscribe request (a reader's non-durable start)."""

    def __init__(
        self, topic: str, config: ConsumerConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[TopicConsumer[Any]], None], schema: Schema[T] | None = None,
        *, adjust_subscribe: Callable[[broker_pb2.Subscribe], None] | None = None,
    ) -> None:
        self._topic = topic
        self._config = config
        self._client_config = client_config
        self._pool = pool
        self._lookup = lookup
        self._on_closed = on_closed
        self._state = _OPEN
        loop = asyncio.get_running_loop()
        # Each message decodes with the schema version it was written with (schema_decoders.py);
        # versions other than the consumer's are fetched once per client (schema_fetcher.py).
        decoders = SchemaDecoders(topic, schema)
        self._schema_fetches: set[asyncio.Task[None]] = set()
        self._interceptors = tuple(config.interceptors)
        self._protocol: ConsumerProtocol[T] = ConsumerProtocol(
            topic, config, adjust_subscribe=adjust_subscribe, clock=loop.time,
            on_delivered=self._entries_delivered, on_dropped=self._dropped, on_answered=self._answered,
            on_lost=self._lost, on_active_change=self._active_change, on_acks_queued=self._acks_queued,
            on_chunk_expiry=self._chunks_expire_at, decoders=decoders,
            schema=schema.info if schema is not None else None, on_schema_wanted=self._schema_wanted)
        protocol = self._protocol
        self._partition = protocol.partition
        self._unacked = protocol.unacked
        self._track_ack = protocol.tracker.acknowledge
        listener = config.message_listener is not None
        # The receive queue: plain (its fast path) without a listener, interceptors or ack timeout.
        ReceiveQueue.__init__(self, protocol.queue, protocol, config.batch_receive_policy, listener,
                              plain=not listener and not self._interceptors and self._unacked is None)
        self._stream: BrokerStream[broker_pb2.ConsumeRequest, broker_pb2.ConsumeResponse, None] = BrokerStream(
            protocol, open_consume, client_config, pool, lookup, log, connect_failed=self._connect_failed,
            before_reconnect=self._before_reconnect)
        self._listener: ListenerTask | None = None
        self._acks = AckGroup(self, config, protocol.tracker, self._unacked, self._partition, protocol.send,
                              self._redeliver_all)
        self._commands = PendingCommands(loop)  # seeks and unsubscribes awaiting answers
        self._chunk_timer: asyncio.TimerHandle | None = None
        self._stats_timer: asyncio.TimerHandle | None = None
        self._last_stats: tuple[ConsumerStats, float] | None = None

    # ---- what it is ------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def subscription(self) -> str:
        return self._config.subscription_name

    @property
    def consumer_name(self) -> str:
        return self._protocol.name

    @property
    def consumer_type(self) -> ConsumerType:
        return self._config.consumer_type

    @property
    def is_connected(self) -> bool:
        return self._stream.connected

    @property
    def closed(self) -> bool:
        return self._state is not _OPEN

    @property
    def epoch(self) -> int:
        """Counts reconnects and seeks: messages fetched before either will not be wanted."""
        return self._protocol.epoch

    @property
    def corrupt_entries(self) -> int:
        """Entries dropped because they could not be read."""
        return self._protocol.corrupt_entries

    def has_reached_end_of_topic(self) -> bool:
        return self._protocol.end_of_topic

    def stats(self) -> ConsumerStats:
        protocol = self._protocol
        return ConsumerStats(
            messages_received=protocol.received, bytes_received=protocol.received_bytes,
            acks_sent=self._acks.acks_sent, nacks_sent=protocol.nacks, receive_failures=self._receive_failures,
            ack_timeouts=self._acks.ack_timeouts, dropped_entries=protocol.corrupt_entries + protocol.chunks.dropped,
            queue_size=len(self._queue), reconnects=protocol.reconnects,
        )

    # ---- receiving (ReceiveQueue) -----------------------------------------------------------

    def _handed_out(self, message: Message[T]) -> Message[T]:
        """What happens to a message given to the application besides leaving the queue."""
        unacked = self._unacked
        if unacked is not None:
            entry = message._entry
            position = (entry.ledger_id, entry.entry_id)
            for tracked in self._protocol.whole.get(position, (position,)):
                unacked.add(tracked)
        for interceptor in self._interceptors:
            message = run_hook(interceptor.before_consume, self, message, default=message)
        return message

    def _receiving(self) -> bool:
        return self._state is _OPEN

    def pause(self) -> None:
        self._protocol.pause()

    def resume(self) -> None:
        self._protocol.resume()

    # ---- acknowledging -------------------------------------------------------------------------

    def acknowledge(self, message: Message[T] | MessageId) -> None:
        if self._state is not _OPEN:
            self._refuse_ack(message)
        # ConsumerProtocol.acknowledge, inlined (a call less per message): the batch's bitmask in
        # the protocol's AckTracker, and the other chunks of a chunked message.
        if isinstance(message, Message):
            entry = message._entry
            acks = entry.acks
            if acks is not None and acks.left > 1:
                # Not its batch's last message (most acks): a flag cleared on the batch's BatchAcks,
                # nothing queued for the broker. The last one takes the tracker's path below.
                flags = acks.unacked
                index = message.batch_index
                if flags[index]:
                    flags[index] = 0
                    acks.left -= 1
                if self._interceptors:
                    self._acked_hooks(message)
                return
            ledger_id, entry_id = entry.ledger_id, entry.entry_id
            done = self._track_ack(ledger_id, entry_id, message.batch_index, entry.num_messages)
        elif isinstance(message, MessageId):
            ledger_id, entry_id = message.ledger_id, message.entry_id
            done = self._track_ack(ledger_id, entry_id, message.batch_index)
        else:
            raise InvalidArgumentError(f"acknowledge takes a Message or MessageId, got {type(message).__name__}")
        if done:
            if self._unacked is not None or self._protocol.whole:
                self._protocol.entry_acked((ledger_id, entry_id))
            self._acks.queued()
        if self._interceptors:
            self._acked_hooks(message)

    def acknowledge_cumulative(self, message: Message[T] | MessageId) -> None:
        self.check_cumulative_allowed()
        if self._state is not _OPEN:
            self._refuse_ack(message)
        if isinstance(message, Message):
            entry = message._entry
            done = self._protocol.acknowledge_cumulative(entry.ledger_id, entry.entry_id, message.batch_index,
                                                         entry.num_messages)
        elif isinstance(message, MessageId):
            done = self._protocol.acknowledge_cumulative(message.ledger_id, message.entry_id, message.batch_index)
        else:
            raise InvalidArgumentError(
                f"acknowledge_cumulative takes a Message or MessageId, got {type(message).__name__}")
        if done:
            self._acks.queued()
        if self._interceptors:
            self._acked_hooks(message)

    def _acked_hooks(self, message: Message[T] | MessageId, error: Exception | None = None) -> None:
        message_id = message.message_id if isinstance(message, Message) else message
        for interceptor in self._interceptors:
            run_hook(interceptor.on_acknowledge, self, message_id, error, default=None)

    def _refuse_ack(self, message: Message[T] | MessageId) -> None:
        error = ConsumerClosedError("consumer closed")
        if self._interceptors and isinstance(message, Message | MessageId):
            self._acked_hooks(message, error)
        raise error

    def negative_acknowledge(self, message: Message[T] | MessageId) -> None:
        if self._state is not _OPEN:
            raise ConsumerClosedError("consumer closed")
        if isinstance(message, Message):
            message_id = message.message_id
        elif isinstance(message, MessageId):
            message_id = message
        else:
            raise InvalidArgumentError(
                f"negative_acknowledge takes a Message or MessageId, got {type(message).__name__}")
        self._acks.nack(message_id, self._protocol.nacked(message_id))

    def redeliver_unacknowledged_messages(self) -> None:
        if self._state is not _OPEN:
            raise ConsumerClosedError("consumer closed")
        self._acks.flush()  # acked before the request: not redelivered
        self._redeliver_all()

    async def reconsume_later(
        self, message: Message[T], delay: float | datetime.timedelta, properties: dict[str, str] | None = None,
    ) -> None:
        if not self._config.retry_enable:
            raise NotAllowedError(
                "reconsume_later needs retry_enable=True when subscribing (on a Shared or Key_Shared subscription)")
        # With retries on, AsyncClient.subscribe makes a MultiTopicConsumer (it reads the retry letter
        # topic too) and serves reconsume_later there; a TopicConsumer with retries is one of its parts.
        raise NotAllowedError("reconsume_later belongs to the consumer this partition's consumer is part of")

    def _redeliver_all(self) -> None:
        self._protocol.redeliver_all()

    # ---- what the protocol object tells (overridden by a multi-topic consumer's members) -------

    def _entries_delivered(self, entries: Iterable[broker_pb2.DeliveredEntry]) -> None:
        """Messages were queued: hand them to whoever waits."""
        if self._waiters or self._batch_waiters:
            self._delivered()

    def _dropped(self, since: Position | None) -> None:
        """Queued messages were dropped (from `since` on; None: all): they come again."""

    def _answered(self, result: broker_pb2.CommandResult) -> str | None:
        done = self._commands.answered(result)
        if done == "unsubscribe":
            self._state = _CLOSING  # the broker ends the stream: no reconnecting
            self._protocol.closed = True
            self._stream.end()
            self._fail_waiters(ConsumerClosedError("consumer closed: its subscription was deleted (unsubscribe)"))
            self._queue.clear()
        return done

    def _lost(self, unsent: set[int]) -> None:
        self._commands.fail(ConnectionError_("the connection to the broker was lost before it answered: try again"),
                            keep=unsent)

    def _active_change(self, active: bool) -> None:
        listener = self._config.consumer_event_listener
        if listener is None:
            return
        try:
            if active:
                listener.became_active(self, self._partition)
            else:
                listener.became_inactive(self, self._partition)
        except Exception:
            log.exception("the consumer_event_listener of consumer %s on %s raised; ignored", self.consumer_name,
                          self._topic)

    def _acks_queued(self) -> None:
        self._acks.queued()

    def _schema_wanted(self, version: int) -> None:
        """Entries written with schema version `version` wait for it: fetch it (once per client),
        then let them through."""
        task = self._loop.create_task(self._fetch_schema(version), name=f"herald-schema-{self._topic}-{version}")
        self._schema_fetches.add(task)
        task.add_done_callback(self._schema_fetches.discard)

    async def _fetch_schema(self, version: int) -> None:
        protocol = self._protocol
        decoders = protocol.decoders
        assert decoders is not None  # it asks only when it decodes by version
        try:
            writer = await schema_fetcher(self._pool, self._lookup, self._client_config).version(self._topic, version)
        except HeraldError as error:
            log.warning("consumer %s on %s: schema version %d could not be fetched (%s): its messages' values "
                        "raise SchemaError", self.consumer_name, self._topic, version, error)
            decoders.failed(version, error)
        else:
            decoders.learned(version, writer)  # never raises: a reader that cannot be made fails the version
        if self._state is _OPEN:
            protocol.release_held()

    def _chunks_expire_at(self, due: float) -> None:
        if self._chunk_timer is None and self._state is _OPEN:
            self._chunk_timer = self._loop.call_at(due, self._expire_chunks)

    def _expire_chunks(self) -> None:
        self._chunk_timer = None
        self._protocol.chunks.expire(self._loop.time())

    # ---- what the stream asks (overridden by a pattern consumer's members) -----------------------

    def _connect_failed(self, error: HeraldError, first: bool) -> bool:
        """A connect failed: True after a reconnect stops reconnecting."""
        return False

    async def _before_reconnect(self) -> None:
        """Raise a HeraldError not to reconnect this time."""

    # ---- moving and leaving the subscription ------------------------------------------------------

    async def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Move the subscription: to a MessageId (its entry: a batch is delivered from its first
        message; MessageId.earliest / .latest are the ends), or to the first message published at
        or after a time (unix milliseconds, or an aware datetime). The broker then disconnects the
        subscription's consumers; this one drops what it holds and reconnects, and its next
        messages are from the new position."""
        self._check_open()
        seek = seek_request(target)
        self._acks.flush()  # acks made before the seek are sent before it
        request_id, answer = self._commands.add("seek")
        seek.request_id = request_id
        self._protocol.send(broker_pb2.ConsumeRequest(seek=seek))
        await self._commands.wait(answer, self._client_config.operation_timeout,
                                  f"seeking {self.subscription!r} on {self._topic} to {target!r}")

    async def unsubscribe(self) -> None:
        self._check_open()
        request_id, answer = self._commands.add("unsubscribe")
        self._protocol.send(broker_pb2.ConsumeRequest(unsubscribe=broker_pb2.Unsubscribe(request_id=request_id)))
        await self._commands.wait(answer, self._client_config.operation_timeout,
                                  f"unsubscribing {self.subscription!r} from {self._topic}")
        await self._finish(graceful=False)

    async def get_last_message_id(self) -> MessageId:
        self._check_open()
        last = (await self._last_message_id_reply()).last
        return MessageId(last.ledger_id, last.entry_id, last.partition, last.batch_index)

    async def _last_message_id_reply(self, subscription: str = "") -> broker_pb2.GetLastMessageIdResponse:
        """The broker's GetLastMessageId answer (with a subscription named, its mark-delete too)."""
        return await last_message_id_reply(self._pool, self._lookup, self._client_config, self._topic, subscription)

    # ---- closing ----------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._state is not _OPEN:
            return
        self._closing()
        self._acks.stop(flush=True)
        # The writer sends the acks, then CloseConsumer, and half-closes; the broker ends the stream.
        await self._finish(graceful=True)

    async def _shutdown(self) -> None:
        if self._state is _CLOSED:
            return
        self._closing()
        await self._finish(graceful=False)

    def _closing(self) -> None:
        self._state = _CLOSING
        self._protocol.closed = True
        self._stream.end()
        error = ConsumerClosedError("consumer closed")
        self._fail_waiters(error)
        self._commands.fail(error)
        self._queue.clear()

    async def _finish(self, graceful: bool) -> None:
        self._acks.stop(flush=False)
        for fetch in list(self._schema_fetches):
            await cancel_and_wait(fetch, swallow_errors=True)
        for timer in (self._chunk_timer, self._stats_timer):
            if timer is not None:
                timer.cancel()
        self._chunk_timer = self._stats_timer = None
        if self._listener is not None:
            await self._listener.stop()
        await self._stream.stop(graceful=graceful)
        self._state = _CLOSED
        self._on_closed(self)

    def _check_open(self) -> None:
        if self._state is not _OPEN:
            raise ConsumerClosedError("consumer closed")

    def __repr__(self) -> str:
        return (f"TopicConsumer(topic={self._topic!r}, subscription={self.subscription!r}, "
                f"state={self._state})")

    # ---- starting ---------------------------------------------------------------------------------

    async def _start(self) -> None:
        await self._stream.start(f"subscribing {self.subscription!r} to {self._topic}",
                                 lambda: f"herald-consumer-{self.subscription}")
        self._acks.start()
        if self._client_config.stats_interval > 0:
            self._last_stats = (self.stats(), self._loop.time())
            self._stats_timer = self._loop.call_later(self._client_config.stats_interval, self._log_stats)
        listener = self._config.message_listener
        if listener is not None:
            self._listener = ListenerTask(self, listener, self._next_for_listener,
                                          name=f"herald-listener-{self.subscription}")

    def _log_stats(self) -> None:
        self._stats_timer = self._loop.call_later(self._client_config.stats_interval, self._log_stats)
        now, current = self._loop.time(), self.stats()
        previous, since = self._last_stats or (None, now)
        log.info("consumer %s on %s (subscription %s): %s", self.consumer_name, self._topic, self.subscription,
                 current.interval_report(previous, now - since))
        self._last_stats = (current, now)
