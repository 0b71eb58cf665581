"""Background-task helpers: waiting on an event with a limit, and cancelling what waits."""

from __future__ import annotations

import asyncio

import pytest
from herald.common.tasks import cancel_and_wait, wait_event


async def test_wait_event_says_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True
    assert await wait_event(event, None) is True


async def test_a_cancellation_racing_the_event_is_never_lost() -> None:
    """The loop shape of every background checker: woken by an event, stopped by cancel. When the
    event is set in the same step as the cancel, the loop must still end."""
    event = asyncio.Event()
    rounds = 0

    async def checker() -> None:
        nonlocal rounds
        while True:
            await wait_event(event, 30)
            event.clear()
            rounds += 1

    for _ in range(50):
        task = asyncio.get_running_loop().create_task(checker())
        await asyncio.sleep(0)  # the checker is waiting now
        event.set()
        task.cancel()
        async with asyncio.timeout(5):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert task.cancelled()


async def test_cancel_and_wait_returns_once_the_task_has_finished() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.get_running_loop().create_task(forever())
    await started.wait()
    await cancel_and_wait(task)
    assert task.done()
    await cancel_and_wait(None)  # nothing to do
