"""The blocking API: Client, Producer and Consumer over the asyncio core, which runs on one
background event-loop thread owned by the Client (started on first use, stopped on close).

Calls that need an answer cross to the loop and wait. Calls that do not (send_async, acknowledge)
go through a _Submitter: appended to a deque, with the loop woken only when no wake-up is already
on its way, so a burst of sends costs one cross-thread call, not one per message."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from herald.client.accumulator import SendCallback
from herald.client.client import AsyncClient
from herald.client.config import ClientConfig, ConsumerType, InitialPosition
from herald.client.consumer import AsyncConsumer
from herald.client.message import Message
from herald.client.producer import AsyncProducer
from herald.common.errors import AlreadyClosedError, ConsumerClosedError, HeraldError, InvalidArgumentError
from herald.common.message_id import MessageId

log = logging.getLogger(__name__)
T = TypeVar("T")

# The most messages one cross-thread receive fetches into the sync consumer's local buffer.
MAX_RECEIVE_PREFETCH = 100


class _LoopThread:
    """An event loop running on a daemon thread of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._stopped:
                raise AlreadyClosedError("client already closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = threading.Thread(target=self._main, args=(loop, started), name="herald-client",
                                          daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
            # Stopped: let whatever is left unwind before the loop goes away.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for its result (re-raising its error)."""
        loop = self.loop
        if threading.current_thread() is self._thread:
            coro.close()
            raise HeraldError("the blocking API cannot be called from the client's own thread (a send "
                              "callback, say): use send_async there, or the asyncio API")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted (Ctrl-C): do not leave the operation running
            raise

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join()


class _Submitter:
    """Runs functions on the loop thread in the order they were submitted from any thread.

    A function returning False could not proceed (a full producer queue): the submitter awaits
    `wait()` and offers it again, holding back everything after it to keep the order.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, wait: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._loop = loop
        self._wait = wait
        self._items: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._scheduled = False
        self._blocked: asyncio.Task[None] | None = None

    def submit(self, function: Callable[..., Any], *args: Any) -> None:
        self._items.append((function, args))
        # Append first, then look: a drain that cleared the flag after our append still sees the
        # item, and one that cleared it before lets us schedule another.
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: so is the client
                self._items.clear()
                raise AlreadyClosedError("client already closed") from None

    def call(self, coro_function: Callable[[], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Start `coro_function()` on the loop after everything submitted before it."""
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.submit(self._start, coro_function, result)
        return result

    def _start(self, coro_function: Callable[[], Coroutine[Any, Any, T]],
               result: concurrent.futures.Future[T]) -> None:
        if not result.set_running_or_notify_cancel():
            return
        task = self._loop.create_task(coro_function())

        def done(task: asyncio.Task[T]) -> None:
            if task.cancelled():
                result.cancel()
            elif (error := task.exception()) is not None:
                result.set_exception(error)
            else:
                result.set_result(task.result())

        task.add_done_callback(done)

    def _drain(self) -> None:
        self._scheduled = False
        if self._blocked is not None:
            return  # the blocked task drains the rest once it may go on
        items = self._items
        while items:
            function, args = items[0]
            try:
                proceeded = function(*args)
            except Exception:
                log.exception("%r failed on the client thread", function)
                proceeded = True
            if proceeded is False:
                self._blocked = self._loop.create_task(self._wait_then_drain())
                return
            items.popleft()

    async def _wait_then_drain(self) -> None:
        try:
            await self._wait()
        except HeraldError:
            pass  # closed meanwhile: offering the item again reports that to its callback
        finally:
            self._blocked = None
        self._drain()


def _ignore(error: HeraldError | None, message_id: MessageId | None) -> None:
    if error is not None:
        log.debug("send_async without a callback failed: %s", error)


class Producer:
    """Publishes to one topic. Made by `Client.create_producer`."""

    def __init__(self, client: Client, producer: AsyncProducer) -> None:
        self._client = client
        self._async = producer
        self._submitter = _Submitter(client._thread.loop, producer.wait_for_room)

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def producer_name(self) -> str:
        return self._async.producer_name

    @property
    def last_sequence_id(self) -> int:
        return self._async.last_sequence_id

    def send(
        self, value: bytes, *, key: str | None = None, properties: dict[str, str] | None = None,
        event_time: int | None = None, sequence_id: int | None = None,
    ) -> MessageId:
        """Send one message and wait until the broker stored it; returns its id."""
        done: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(message_id)  # type: ignore[arg-type]

        self.send_async(value, callback, key=key, properties=properties, event_time=event_time,
                        sequence_id=sequence_id)
        # A caller waiting on one message should not also wait out the batching delay.
        self._submitter.submit(self._async._acc.flush)
        return done.result()

    def send_async(
        self, value: bytes, callback: SendCallback | None = None, *, key: str | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None,
        sequence_id: int | None = None,
    ) -> None:
        """Queue one message; `callback(error, message_id)` runs on the client's thread when the
        broker stored it (error None) or it failed. Raises at once if the producer is closed or
        the message too large; a full queue is reported to the callback (or waited out with
        block_if_queue_full)."""
        if value.__class__ is not bytes:
            if not isinstance(value, bytearray | memoryview):
                raise TypeError(f"a message value must be bytes, got {type(value).__name__}")
            value = bytes(value)
        self._async._check_sendable(len(value))
        self._submitter.submit(self._async.enqueue_nowait, value, callback or _ignore, key, properties,
                               event_time, sequence_id)

    def flush(self) -> None:
        """Wait until every message sent so far is stored."""
        self._submitter.call(self._async.flush).result()

    def close(self) -> None:
        """Close; messages not yet stored fail with ProducerClosedError (flush() first to keep them).
        Closing twice does nothing."""
        if self._client.closed:
            return  # the client closed it, and its thread is gone
        self._submitter.call(self._async.close).result()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Producer(topic={self.topic!r}, name={self.producer_name!r})"


class Consumer:
    """Receives from one topic through one subscription. Made by `Client.subscribe`."""

    def __init__(self, client: Client, consumer: AsyncConsumer, receiver_queue_size: int) -> None:
        self._client = client
        self._async = consumer
        self._submitter = _Submitter(client._thread.loop, _never_blocks)
        # Messages fetched in one crossing and not yet returned, with the connection epoch they
        # came on: after a reconnect the broker sends them again, so these are dropped.
        self._buffer: deque[Message] = deque()
        self._buffer_epoch = -1
        self._prefetch = max(1, min(MAX_RECEIVE_PREFETCH, receiver_queue_size // 4))
        self._lock = threading.Lock()
        self._closed = False

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def subscription(self) -> str:
        return self._async.subscription

    @property
    def consumer_name(self) -> str:
        return self._async.consumer_name

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message; None if none arrives within `timeout` seconds (None: wait)."""
        with self._lock:
            if self._buffer:
                if self._buffer_epoch == self._async.epoch:
                    return self._buffer.popleft()
                self._buffer.clear()
        if self._closed or self._async.closed:
            raise ConsumerClosedError("consumer closed")
        epoch, messages = self._client._thread.run(self._fetch(timeout))
        if not messages:
            return None
        with self._lock:
            first = messages[0]
            if len(messages) > 1:
                self._buffer.extend(messages[1:])
                self._buffer_epoch = epoch
            return first

    async def _fetch(self, timeout: float | None) -> tuple[int, list[Message]]:  # noqa: ASYNC109
        messages = await self._async.receive_many(self._prefetch, timeout)
        return self._async.epoch, messages

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (sent to the broker in the next ack group)."""
        if self._closed or self._async.closed:
            raise ConsumerClosedError("consumer closed")
        if not isinstance(message, Message | MessageId):
            raise InvalidArgumentError(f"acknowledge takes a Message or MessageId, got {type(message).__name__}")
        self._submitter.submit(self._async.acknowledge, message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge this message and all before it (Exclusive and Failover only)."""
        self._async.check_cumulative_allowed()
        if self._closed or self._async.closed:
            raise ConsumerClosedError("consumer closed")
        if not isinstance(message, Message | MessageId):
            raise InvalidArgumentError(
                f"acknowledge_cumulative takes a Message or MessageId, got {type(message).__name__}")
        self._submitter.submit(self._async.acknowledge_cumulative, message)

    def close(self) -> None:
        """Send pending acks and close; receive() calls waiting now fail with ConsumerClosedError.
        Closing twice does nothing."""
        if self._client.closed:
            return  # the client closed it, and its thread is gone
        self._closed = True
        with self._lock:
            self._buffer.clear()
        self._submitter.call(self._async.close).result()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(topic={self.topic!r}, subscription={self.subscription!r})"


async def _never_blocks() -> None:
    return None


class Client:
    """A blocking client of one Herald cluster (`herald://host:port`); the same options as
    AsyncClient. Its asyncio core runs on a background thread started on first use."""

    def __init__(self, service_url: str, **options: Any) -> None:
        try:
            ClientConfig(service_url, **options)  # fail here, in the caller's thread, on a bad option
        except TypeError as exc:
            raise InvalidArgumentError(f"invalid client option: {exc}") from None
        self._service_url = service_url
        self._options = options
        self._thread = _LoopThread()
        self._async: AsyncClient | None = None
        self._start_lock = threading.Lock()
        self._closed = False

    def _core(self) -> AsyncClient:
        if self._closed:
            raise AlreadyClosedError("client already closed")
        with self._start_lock:
            if self._async is None:
                self._async = self._thread.run(self._make())
            return self._async

    async def _make(self) -> AsyncClient:
        return AsyncClient(self._service_url, **self._options)

    def create_producer(self, topic: str, **options: Any) -> Producer:
        """A producer on `topic`; options as AsyncClient.create_producer."""
        core = self._core()
        return Producer(self, self._thread.run(core.create_producer(topic, **options)))

    def subscribe(
        self, topic: str, subscription_name: str, consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.Latest, **options: Any,
    ) -> Consumer:
        """A consumer of `topic` through `subscription_name`; options as AsyncClient.subscribe."""
        core = self._core()
        consumer = self._thread.run(core.subscribe(
            topic, subscription_name, consumer_type=consumer_type, initial_position=initial_position, **options
        ))
        return Consumer(self, consumer, consumer._config.receiver_queue_size)

    def get_partitions_for_topic(self, topic: str) -> list[str]:
        core = self._core()
        return self._thread.run(core.get_partitions_for_topic(topic))

    def close(self) -> None:
        """Close every producer and consumer, then the connections and the client's thread.
        A second close raises AlreadyClosedError."""
        if self._closed:
            raise AlreadyClosedError("client already closed")
        self._closed = True
        try:
            if self._async is not None:
                self._thread.run(self._async.close())
        finally:
            self._thread.stop()

    def shutdown(self) -> None:
        """Stop at once: fail what is pending and drop the connections."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._async is not None:
                self._thread.run(self._async.shutdown())
        finally:
            self._thread.stop()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._closed:
            self.close()
