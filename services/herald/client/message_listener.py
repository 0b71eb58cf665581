"""The task that feeds a consumer's messages to its message_listener(consumer, message): one at a
time, in the order they were received, on a task the consumer owns (it cancels it on close). A
coroutine function is awaited, a plain function called on the event loop (so it must not block:
the blocking facade hands it to a thread of its own). A listener that raises is logged; its
message stays unacknowledged, so the ack timeout or a redelivery brings it back."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace

from herald.client import tracing as client_tracing
from herald.common import tracing
from herald.common.errors import ConsumerClosedError

log = logging.getLogger(__name__)


class ListenerTask:
    """Runs `listener(consumer, message)` for every message `next_message()` returns, until it
    raises ConsumerClosedError or the task is cancelled."""

    def __init__(
        self, consumer: Any, listener: Callable[[Any, Any], Any], next_message: Callable[[], Awaitable[Any]],
        name: str,
    ) -> None:
        self._consumer = consumer
        self._listener = listener
        self._next_message = next_message
        self._traced = tracing.ENABLED  # a process span around each call (herald.client.tracing)
        self.task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def _run(self) -> None:
        consumer, listener = self._consumer, self._listener
        while True:
            try:
                message = await self._next_message()
            except ConsumerClosedError:
                return
            try:
                if self._traced:
                    await self._traced_call(message)
                else:
                    result = listener(consumer, message)
                    if inspect.isawaitable(result):
                        await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the message listener of %r raised on message %s; it stays unacknowledged",
                              consumer, getattr(message, "message_id", message))

    async def _traced_call(self, message: Any) -> None:
        span = client_tracing.start_process(self._consumer, message)
        with trace.use_span(span, end_on_exit=True, set_status_on_exception=False):  # current while it runs
            try:
                result = self._listener(self._consumer, message)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                tracing.fail(span, exc)
                raise

    async def stop(self) -> None:
        """Cancel the task and wait for it, unless this is the task itself (a listener closing its
        consumer): then it ends by itself, its next message being refused."""
        task = self.task
        if task is asyncio.current_task() or task.done():
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
