"""Ending background tasks: every task has an owner that cancels it and waits for it to finish."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


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
