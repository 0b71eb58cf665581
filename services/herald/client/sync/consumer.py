"""The blocking Consumer: the asyncio consumer's API for threads, over the AsyncConsumer interface
only (so it serves every kind of consumer). receive() fetches up to a few messages per crossing to
the loop and keeps the rest in a local buffer, dropped after a reconnect or a seek; acknowledgements
are queued onto the loop without waiting. A message_listener (and a consumer_event_listener) runs
on a thread of the consumer's own, never on the loop's, and gets this Consumer as its first
argument, so it may call the blocking methods."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import datetime
import inspect
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from herald.client import tracing as client_tracing
from herald.client.config import BatchReceivePolicy, ConsumerConfig, ConsumerType, InitialPosition
from herald.client.consumer import AsyncConsumer
from herald.client.iteration import iterate_until_closed
from herald.client.listeners import ConsumerEventListener
from herald.client.message import Message
from herald.client.stats import ConsumerStats
from herald.client.sync.loop import LoopThread, Submitter
from herald.common import tracing
from herald.common.codec.message_id import MessageId
from herald.common.errors import ConsumerClosedError, InvalidArgumentError

if TYPE_CHECKING:
    from herald.client.client import AsyncClient, Topics

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

# The most messages one cross-thread receive fetches into the sync consumer's local buffer.
MAX_RECEIVE_PREFETCH = 100
_DEFAULT_QUEUE_SIZE: int = next(f.default for f in dataclasses.fields(ConsumerConfig)
                                if f.name == "receiver_queue_size")  # type: ignore[assignment]


class Consumer(Generic[T]):
    """Receives messages with values of type T (bytes unless it has a schema) through one
    subscription. Made by `Client.subscribe`; the methods are AsyncConsumer's, blocking."""

    def __init__(
        self, thread: LoopThread, consumer: AsyncConsumer[T], receiver_queue_size: int,
        batch_receive_policy: BatchReceivePolicy, listener_thread: concurrent.futures.ThreadPoolExecutor | None,
    ) -> None:
        self._thread = thread  # the client's
        self._async = consumer
        self._submitter = Submitter(thread.loop, _never_blocks)
        # Messages fetched in one crossing and not yet returned, with the epoch they came in: after
        # a reconnect or a seek they are not wanted any more (the broker sends them again).
        self._buffer: deque[Message[T]] = deque()
        self._buffer_epoch = -1
        self._prefetch = max(1, min(MAX_RECEIVE_PREFETCH, receiver_queue_size // 4))
        self._batch_policy = batch_receive_policy
        self._listener_thread = listener_thread
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def _subscribe(
        cls, thread: LoopThread, core: AsyncClient, topic: Topics, subscription_name: str, consumer_type: ConsumerType,
        initial_position: InitialPosition, options: dict[str, Any],
    ) -> Consumer[Any]:
        """Subscribe through `core` (Client.subscribe's work), moving the listeners to a thread."""
        made: concurrent.futures.Future[Consumer[Any]] = concurrent.futures.Future()
        listener, events = options.get("message_listener"), options.get("consumer_event_listener")
        if inspect.iscoroutinefunction(listener):
            raise InvalidArgumentError(
                "the blocking Consumer's message_listener must be a plain function (it runs on a thread of its "
                "own); give a coroutine function to AsyncClient.subscribe instead")
        listener_thread = None
        if callable(listener) or events is not None:
            listener_thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"herald-listener-{subscription_name}")
            if callable(listener):
                options["message_listener"] = _ListenerOnThread(listener, made, listener_thread)
            if events is not None:
                options["consumer_event_listener"] = _EventsOnThread(events, made, listener_thread)
        try:
            consumer = thread.run(core.subscribe(
                topic, subscription_name, consumer_type=consumer_type, initial_position=initial_position, **options))
        except BaseException as exc:
            made.set_exception(exc)
            if listener_thread is not None:
                listener_thread.shutdown(wait=False)
            raise
        policy = options.get("batch_receive_policy") or BatchReceivePolicy()
        sync = cls(thread, consumer, options.get("receiver_queue_size", _DEFAULT_QUEUE_SIZE), policy, listener_thread)
        made.set_result(sync)
        return sync

    # ---- what it is ----

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def subscription(self) -> str:
        return self._async.subscription

    @property
    def consumer_name(self) -> str:
        return self._async.consumer_name

    @property
    def consumer_type(self) -> ConsumerType:
        return self._async.consumer_type

    @property
    def is_connected(self) -> bool:
        return self._async.is_connected

    @property
    def closed(self) -> bool:
        return self._closed or self._async.closed

    def has_reached_end_of_topic(self) -> bool:
        return self._async.has_reached_end_of_topic()

    def stats(self) -> ConsumerStats:
        stats: ConsumerStats = self._async.stats()
        return stats

    # ---- receiving ----

    def receive(self, timeout: float | None = None) -> Message[T] | None:
        """The next message; None if none arrives within `timeout` seconds (None: wait)."""
        with self._lock:
            if self._buffer:
                if self._buffer_epoch == self._async.epoch:
                    message = self._buffer.popleft()
                    if tracing.ENABLED:  # the receive span, on the caller's thread and in its context
                        client_tracing.received(self, (message,), 0)
                    return message
                self._buffer.clear()
        self._check_open()
        started = tracing.now() if tracing.ENABLED else 0
        epoch, messages = self._run(self._fetch(timeout, bool(started)))
        if not messages:
            return None
        with self._lock:
            first = messages[0]
            if len(messages) > 1:
                self._buffer.extend(messages[1:])
                self._buffer_epoch = epoch
        if started:
            client_tracing.received(self, (first,), started)
        return first

    async def _fetch(self, timeout: float | None, traced: bool = False) -> tuple[int, list[Message[T]]]:  # noqa: ASYNC109
        # Fetched ahead of the caller: the receive spans are made as receive() returns each.
        suppressed = tracing.suppress() if traced else None
        try:
            messages = await self._async.receive_many(self._prefetch, timeout)
        finally:
            if suppressed is not None:
                tracing.unsuppress(suppressed)
        return self._async.epoch, messages

    def batch_receive(self) -> list[Message[T]]:
        """As AsyncConsumer.batch_receive; messages a receive() already fetched come first, as a
        batch of their own."""
        with self._lock:
            buffered = self._take_buffered()
        if buffered:
            return buffered
        self._check_open()
        return self._run(self._async.batch_receive())

    def _take_buffered(self) -> list[Message[T]]:
        buffer = self._buffer
        if self._buffer_epoch != self._async.epoch:
            buffer.clear()
        policy = self._batch_policy
        taken: list[Message[T]] = []
        size = 0
        while buffer:
            length = len(buffer[0].data())
            if taken and (0 < policy.max_num_messages <= len(taken) or 0 < policy.max_num_bytes < size + length):
                break
            taken.append(buffer.popleft())
            size += length
        return taken

    # ---- acknowledging ----

    def acknowledge(self, message: Message[T] | MessageId) -> None:
        """Acknowledge one message (sent to the broker in the next ack group)."""
        self._check_acknowledgeable(message, "acknowledge")
        self._submitter.submit(self._async.acknowledge, message)

    def acknowledge_cumulative(self, message: Message[T] | MessageId) -> None:
        """Acknowledge this message and all before it (Exclusive and Failover only)."""
        self._async.check_cumulative_allowed()
        self._check_acknowledgeable(message, "acknowledge_cumulative")
        self._submitter.submit(self._async.acknowledge_cumulative, message)

    def negative_acknowledge(self, message: Message[T] | MessageId) -> None:
        """Give up on a message for now: the broker delivers it again after the negative ack delay."""
        self._check_acknowledgeable(message, "negative_acknowledge")
        self._submitter.submit(self._async.negative_acknowledge, message)

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask for every message not acknowledged yet again (those fetched and not returned go)."""
        self._check_open()
        self._drop_buffer()
        self._submitter.submit(self._async.redeliver_unacknowledged_messages)

    def reconsume_later(
        self, message: Message[T], delay: float | datetime.timedelta, properties: dict[str, str] | None = None,
    ) -> None:
        self._check_open()
        self._run(self._async.reconsume_later(message, delay, properties))

    def _check_acknowledgeable(self, message: object, what: str) -> None:
        self._check_open()
        if not isinstance(message, Message | MessageId):
            raise InvalidArgumentError(f"{what} takes a Message or MessageId, got {type(message).__name__}")

    # ---- moving, pausing, leaving ----

    def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Move the subscription (see AsyncConsumer.seek); messages fetched before are dropped."""
        self._check_open()
        self._drop_buffer()
        self._run(self._async.seek(target))
        self._drop_buffer()

    def pause(self) -> None:
        """Stop asking the broker for messages (those already fetched are still received)."""
        self._check_open()
        self._submitter.submit(self._async.pause)

    def resume(self) -> None:
        self._check_open()
        self._submitter.submit(self._async.resume)

    def get_last_message_id(self) -> MessageId | Sequence[MessageId]:
        self._check_open()
        return self._run(self._async.get_last_message_id())

    def unsubscribe(self) -> None:
        """Delete the subscription (refused while other consumers are connected to it) and close."""
        self._check_open()
        self._run(self._async.unsubscribe())
        self._closed = True
        self._drop_buffer()
        self._stop_listener_thread()

    def close(self) -> None:
        """Send pending acks and close; receive() calls waiting now fail with ConsumerClosedError.
        Closing twice does nothing."""
        self._closed = True
        self._drop_buffer()
        try:
            if not self._thread.closed:  # else the client closed it, and its thread is gone
                self._submitter.call(self._async.close).result()
        finally:
            self._stop_listener_thread()

    def _stop_listener_thread(self) -> None:
        if self._listener_thread is not None:
            self._listener_thread.shutdown(wait=False)  # a listener calling close() runs on it

    # ---- helpers ----

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._thread.run(coro)

    def _check_open(self) -> None:
        if self._closed or self._async.closed:
            raise ConsumerClosedError("consumer closed")

    def _drop_buffer(self) -> None:
        with self._lock:
            self._buffer.clear()

    def __iter__(self) -> Iterator[Message[T]]:
        """`for message in consumer`: each message as it comes (receive() without a timeout);
        the loop ends when the consumer is closed (by another thread, or its client)."""
        return iterate_until_closed(self.receive, lambda: self.closed)

    def __enter__(self) -> Consumer[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(topic={self.topic!r}, subscription={self.subscription!r})"


class _ListenerOnThread:
    """The message_listener as the asyncio consumer calls it: each message is handed to the
    listener thread and waited for, so messages still go one at a time and in order, and the
    listener gets the blocking Consumer."""

    def __init__(self, listener: Callable[[Any, Any], Any], made: concurrent.futures.Future[Consumer[Any]],
                 thread: concurrent.futures.ThreadPoolExecutor) -> None:
        self._listener = listener
        self._made = made
        self._thread = thread

    async def __call__(self, _consumer: object, message: Message[Any]) -> None:
        # In the caller's context: the process span (herald.client.tracing) is current on the thread too.
        await asyncio.get_running_loop().run_in_executor(self._thread, contextvars.copy_context().run, self._call,
                                                         message)

    def _call(self, message: Message[Any]) -> None:
        self._listener(self._made.result(), message)


class _EventsOnThread(ConsumerEventListener):
    """The consumer_event_listener's calls, made on the listener thread with the blocking Consumer."""

    def __init__(self, listener: ConsumerEventListener, made: concurrent.futures.Future[Consumer[Any]],
                 thread: concurrent.futures.ThreadPoolExecutor) -> None:
        self._listener = listener
        self._made = made
        self._thread = thread

    def became_active(self, consumer: Any, partition: int) -> None:
        self._submit("became_active", partition)

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self._submit("became_inactive", partition)

    def _submit(self, event: str, partition: int) -> None:
        self._thread.submit(self._call, event, partition)  # after close: raises, and the consumer logs it

    def _call(self, event: str, partition: int) -> None:
        try:
            getattr(self._listener, event)(self._made.result(), partition)
        except Exception:
            log.exception("the consumer_event_listener raised in %s; ignored", event)


async def _never_blocks() -> None:
    return None
