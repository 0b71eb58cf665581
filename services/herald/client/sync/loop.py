"""The event loop the blocking API runs the asyncio core on (one daemon thread per Client, started on
first use, stopped on close), and the Submitter that queues calls onto it from any thread: appended
to a deque, with the loop woken only when no wake-up is already on its way, so a burst of sends
costs one cross-thread call, not one per message."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from herald.common.errors import AlreadyClosedError, HeraldError

log = logging.getLogger(__name__)
T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread of its own. `closed` is set by its owner (the
    Client) as it begins closing: what the facades would still run on the loop then, they skip."""

    def __init__(self) -> None:
        self.closed = False
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


class Submitter:
    """Runs functions on the loop thread in the order they were submitted from any thread.

    A function returning False could not proceed (a full producer queue): the submitter awaits
    `wait()` and offers it again, holding back everything after it to keep the order.

    `offer()` (a producer's sends) is bounded, as Pulsar's sendAsync is by its semaphore: the
    calling thread waits while the submitter is held back by a full queue, or while `max_queued`
    items wait already (a caller far ahead of the loop), so a fast caller cannot grow the hand-off
    without limit. `submit()` (closes, flushes, acks) is never held.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, wait: Callable[[], Coroutine[Any, Any, None]],
                 max_queued: int = 0) -> None:
        self._loop = loop
        self._wait = wait
        self._items: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._scheduled = False
        self._blocked: asyncio.Task[None] | None = None
        self._max_queued = max_queued  # 0: offer() never waits
        self._room = threading.Condition()
        self._waiting = 0  # callers of offer() waiting for room: _drain wakes them

    def offer(self, function: Callable[..., Any], *args: Any) -> None:
        """submit(), after waiting for room (see the class); from the loop thread itself (a send
        callback) it never waits, since only that thread makes room."""
        if self._max_queued and (self._blocked is not None or len(self._items) >= self._max_queued) \
                and asyncio._get_running_loop() is not self._loop:
            self._wait_for_room()
        self.submit(function, *args)

    def _wait_for_room(self) -> None:
        with self._room:
            self._waiting += 1  # before looking: a drain after this sees it and notifies
            try:
                while self._blocked is not None or len(self._items) >= self._max_queued:
                    if self._loop.is_closed():
                        raise AlreadyClosedError("client already closed")
                    # Woken by _drain; the timeout only rechecks a loop that stopped meanwhile.
                    self._room.wait(1.0)
            finally:
                self._waiting -= 1

    def _wake_offerers(self) -> None:
        if self._waiting:
            with self._room:
                self._room.notify_all()

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
                self._wake_offerers()
                return
            items.popleft()
        self._wake_offerers()

    async def _wait_then_drain(self) -> None:
        try:
            await self._wait()
        except HeraldError:
            pass  # closed meanwhile: offering the item again reports that to its callback
        finally:
            self._blocked = None
        self._drain()
