"""The receiving half of a consumer (Pulsar's ConsumerBase): the local queue of delivered messages,
receive() and batch_receive() with their waiters, the refusal of both when a message listener takes
every message, and the count of messages taken out (in a `Permits`: a consumer's protocol object,
which sends a FLOW at half the queue). A consumer class lists it first among its bases, calls
ReceiveQueue.__init__ with the queue and the permits, fills the queue and then calls `_delivered()`,
and says what handing a message out (`_handed_out`, skipped while `_plain`) means for it."""

from __future__ import annotations

import abc
import asyncio
from collections import deque
from typing import Generic, Protocol, TypeVar, cast

from herald.client import batch_receive
from herald.client import tracing as client_tracing
from herald.client.config import BatchReceivePolicy
from herald.client.message import Message
from herald.common import tracing
from herald.common.errors import ConsumerClosedError, HeraldError, NotAllowedError

T = TypeVar("T")


class Permits(Protocol):
    """Counts the messages taken from a receive queue (or dropped from it), and asks for more."""

    permits: int  # taken since more were last asked for
    flow_threshold: int  # `send_flow()` once permits reach it

    def send_flow(self) -> None:
        """Ask for `permits` more messages (and reset the count)."""


class ReceiveQueue(abc.ABC, Generic[T]):
    """Delivered messages waiting for the application, and the application waiting for them."""

    def __init__(
        self, queue: deque[Message[T]], permits: Permits, batch_receive_policy: BatchReceivePolicy,
        has_listener: bool, plain: bool,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = queue
        self._flow = permits
        self._waiters: deque[asyncio.Future[Message[T] | None]] = deque()
        self._batch_waiters: list[asyncio.Future[None]] = []
        self._batch_policy = batch_receive_policy
        self._has_listener = has_listener
        # Receive spans (herald.client.tracing), decided once; they take receive() off its fast path.
        self._traced = tracing.ENABLED
        # Whether handing a message out is nothing but taking it from the queue (no listener to
        # refuse receive() for, nothing to track, intercept or trace): receive()'s fast path.
        self._plain = plain and not self._traced
        self._receive_failures = 0

    # ---- what the consumer says ----

    @abc.abstractmethod
    def _receiving(self) -> bool:
        """Whether messages may still come (the consumer is open)."""

    def _handed_out(self, message: Message[T]) -> Message[T]:
        """What giving a message to the application involves besides taking it from the queue."""
        return message

    # ---- receiving ----

    async def receive(self, timeout: float | None = None) -> Message[T] | None:  # noqa: ASYNC109
        queue = self._queue
        if queue and self._plain:
            message = queue.popleft()
            flow = self._flow
            flow.permits += 1
            if flow.permits >= flow.flow_threshold:
                flow.send_flow()
            return message
        self._refuse_with_listener("receive()")
        started = tracing.now() if self._traced else 0
        try:
            taken = await self._next(timeout)
        except ConsumerClosedError:
            self._receive_failures += 1
            raise
        if taken is None:
            return None
        message = self._handed_out(taken)
        if started:
            client_tracing.received(self, (message,), started)
        return message

    async def receive_many(self, limit: int, timeout: float | None = None) -> list[Message[T]]:  # noqa: ASYNC109
        queue = self._queue
        messages: list[Message[T]] = []
        started = tracing.now() if self._traced else 0
        if not queue:
            suppressed = tracing.suppress() if started else None  # one receive span for them all
            try:
                first = await self.receive(timeout)
            finally:
                if suppressed is not None:
                    tracing.unsuppress(suppressed)
            if first is None:
                return messages
            messages.append(first)
        self._refuse_with_listener("receive()")
        count = min(limit - len(messages), len(queue))
        taken = [queue.popleft() for _ in range(count)]
        self._taken(count)
        messages += taken if self._plain else [self._handed_out(message) for message in taken]
        if started:
            client_tracing.received(self, messages, started)
        return messages

    async def batch_receive(self) -> list[Message[T]]:
        self._refuse_with_listener("batch_receive()")
        started = tracing.now() if self._traced else 0
        policy = self._batch_policy
        deadline = self._loop.time() + policy.timeout
        while self._receiving() and not batch_receive.reaches_limit(self._queue, policy):
            left = deadline - self._loop.time()
            if left <= 0:
                break
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._batch_waiters.append(waiter)
            timer = self._loop.call_later(left, _wake, waiter)
            try:
                await waiter
            except ConsumerClosedError:
                break
            finally:
                timer.cancel()
                if waiter in self._batch_waiters:
                    self._batch_waiters.remove(waiter)
        if not self._receiving():
            self._receive_failures += 1
            raise ConsumerClosedError("consumer closed")
        taken: list[Message[T]] = batch_receive.take(self._queue, policy)
        self._taken(len(taken))
        if self._plain:
            return taken
        messages = [self._handed_out(message) for message in taken]
        if started:
            client_tracing.received(self, messages, started)
        return messages

    async def _next_for_listener(self) -> Message[T]:
        """The next message, however long it takes (ConsumerClosedError once closed)."""
        return self._handed_out(cast("Message[T]", await self._next(None)))

    async def _next(self, timeout: float | None) -> Message[T] | None:  # noqa: ASYNC109
        """The next queued message, waiting up to `timeout` (None: no limit) for one."""
        queue = self._queue
        if queue:
            message = queue.popleft()
            self._taken(1)
            return message
        if not self._receiving():
            raise ConsumerClosedError("consumer closed")
        if timeout is not None and timeout <= 0:
            return None
        waiter: asyncio.Future[Message[T] | None] = self._loop.create_future()
        self._waiters.append(waiter)
        timer = None if timeout is None else self._loop.call_later(timeout, self._expire, waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.cancelled() or not waiter.done():
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass
            elif waiter.exception() is None:
                # Handed a message in the same instant the caller gave up: keep it for the next.
                handed = waiter.result()
                if handed is not None:
                    self._queue.appendleft(handed)
                    self._taken(-1)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _expire(self, waiter: asyncio.Future[Message[T] | None]) -> None:
        if not waiter.done():
            self._waiters.remove(waiter)
            waiter.set_result(None)

    def _taken(self, count: int) -> None:
        """`count` messages left the queue (or were dropped from it; negative: came back)."""
        flow = self._flow
        flow.permits += count
        if flow.permits >= flow.flow_threshold:
            flow.send_flow()

    def _refuse_with_listener(self, what: str) -> None:
        if self._has_listener:
            raise NotAllowedError(
                f"{what} is not allowed on a consumer with a message_listener: the listener gets every "
                "message; subscribe without one to receive()")

    # ---- the consumer's side ----

    def _delivered(self) -> None:
        """Messages were added to the queue: hand them to the receive() calls waiting, oldest
        first, and let waiting batch_receive() calls look."""
        queue, waiters = self._queue, self._waiters
        handed = 0
        while queue and waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(queue.popleft())
                handed += 1
        if handed:
            self._taken(handed)
        for batch_waiter in self._batch_waiters:
            _wake(batch_waiter)

    def _fail_waiters(self, error: HeraldError) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)
        for batch_waiter in self._batch_waiters:
            if not batch_waiter.done():
                batch_waiter.set_exception(error)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
