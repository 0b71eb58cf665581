"""The blocking Reader: AsyncReader's API for threads. Each call crosses to the client's loop and
waits; a reader_listener runs on a thread of the reader's own, never on the loop's, and gets this
Reader as its first argument, so it may call the blocking methods."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import inspect
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from herald.client.iteration import iterate_until_closed
from herald.client.message import Message
from herald.client.reader import AsyncReader
from herald.client.sync.loop import LoopThread
from herald.common.codec.message_id import MessageId
from herald.common.errors import ConsumerClosedError, InvalidArgumentError

if TYPE_CHECKING:
    from herald.client.client import AsyncClient

T = TypeVar("T")
R = TypeVar("R")


class Reader(Generic[T]):
    """Reads one topic from a start message on. Made by `Client.create_reader`; the methods are
    AsyncReader's, blocking."""

    def __init__(self, thread: LoopThread, reader: AsyncReader[T],
                 listener_thread: concurrent.futures.ThreadPoolExecutor | None) -> None:
        self._thread = thread  # the client's
        self._async = reader
        self._listener_thread = listener_thread

    @classmethod
    def _create(cls, thread: LoopThread, core: AsyncClient, topic: str, start_message_id: MessageId,
                options: dict[str, Any]) -> Reader[Any]:
        """Create through `core` (Client.create_reader's work), moving the listener to a thread."""
        made: concurrent.futures.Future[Reader[Any]] = concurrent.futures.Future()
        listener = options.get("reader_listener")
        if inspect.iscoroutinefunction(listener):
            raise InvalidArgumentError(
                "the blocking Reader's reader_listener must be a plain function (it runs on a thread of its own); "
                "give a coroutine function to AsyncClient.create_reader instead")
        listener_thread = None
        if callable(listener):
            listener_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="herald-reader-listener")
            options["reader_listener"] = _ListenerOnThread(listener, made, listener_thread)
        try:
            reader = thread.run(core.create_reader(topic, start_message_id, **options))
        except BaseException as exc:
            made.set_exception(exc)
            if listener_thread is not None:
                listener_thread.shutdown(wait=False)
            raise
        sync = cls(thread, reader, listener_thread)
        made.set_result(sync)
        return sync

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def subscription(self) -> str:
        return self._async.subscription

    @property
    def reader_name(self) -> str:
        return self._async.reader_name

    @property
    def is_connected(self) -> bool:
        return self._async.is_connected

    @property
    def closed(self) -> bool:
        return self._async.closed

    def read_next(self, timeout: float | None = None) -> Message[T] | None:
        """The next message; None if none arrives within `timeout` seconds (None: wait)."""
        self._check_open()
        return self._run(self._async.read_next(timeout))

    def has_message_available(self) -> bool:
        """Whether there are messages after the last one read; False at the end of the topic."""
        self._check_open()
        return self._run(self._async.has_message_available())

    def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Move the reader (see AsyncReader.seek)."""
        self._check_open()
        self._run(self._async.seek(target))

    def close(self) -> None:
        """Close the reader; a read_next waiting now fails with ConsumerClosedError. Closing twice
        does nothing."""
        try:
            if not self._thread.closed:  # else the client closed it, and its thread is gone
                self._run(self._async.close())
        finally:
            if self._listener_thread is not None:
                self._listener_thread.shutdown(wait=False)  # a listener calling close() runs on it

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._thread.run(coro)

    def _check_open(self) -> None:
        if self._async.closed:
            raise ConsumerClosedError("reader closed")

    def __iter__(self) -> Iterator[Message[T]]:
        """`for message in reader`: each message as it comes (read_next() without a timeout);
        the loop ends when the reader is closed (by another thread, or its client)."""
        return iterate_until_closed(self.read_next, lambda: self.closed)

    def __enter__(self) -> Reader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Reader(topic={self.topic!r}, subscription={self.subscription!r})"


class _ListenerOnThread:
    """The reader_listener as the asyncio reader calls it: each message is handed to the listener
    thread and waited for, so messages go one at a time and in order, with the blocking Reader."""

    def __init__(self, listener: Callable[[Any, Any], Any], made: concurrent.futures.Future[Reader[Any]],
                 thread: concurrent.futures.ThreadPoolExecutor) -> None:
        self._listener = listener
        self._made = made
        self._thread = thread

    async def __call__(self, _reader: object, message: Message[Any]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._call, message)

    def _call(self, message: Message[Any]) -> None:
        self._listener(self._made.result(), message)
