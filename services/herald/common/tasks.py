"""Ending background tasks: every task has an owner that cancels it and waits for it to finish."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


def stream_task(coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A task serving one side of a stream whose failure its handler learns otherwise (the stream
    ends either way): its exception counts as retrieved. A server stopping cancels handlers before
    they await such tasks, and asyncio would log each one's exception at ERROR, with a traceback,
    at every restart."""
    task = asyncio.get_running_loop().create_task(coroutine)
    task.add_done_callback(_retrieve)
    return task


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def cancel_and_wait(task: asyncio.Task[Any] | None, *, swallow_errors: bool = False) -> None:
    """Cancel a task and wait until it has finished; with swallow_errors, an exception it ended
    with is dropped too (for tasks whose failure was already reported elsewhere)."""
    if task is None:
        return
    task.cancel()
    suppressed: tuple[type[BaseException], ...] = (
        (asyncio.CancelledError, Exception) if swallow_errors else (asyncio.CancelledError,)
    )
    with contextlib.suppress(*suppressed):
        await task


async def wait_event(event: asyncio.Event, seconds: float | None) -> bool:
    """Wait until `event` is set or `seconds` pass (None: no limit); True when it was set.

    Background loops wait with this, not asyncio.wait_for: on Python 3.11 a wait_for whose event is
    set while its task is being cancelled returns normally, the cancellation is lost, and a loop
    around it never ends (seen as an unload that hung forever)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
            return True
    return False
