"""Background-task helpers: waiting on an event with a limit, and cancelling what waits."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from herald.common.tasks import cancel_and_wait, stream_task, wait_event


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


async def test_a_stream_tasks_failure_left_unawaited_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A server stopping cancels a stream's handler before it awaits the task writing its replies:
    that task's error ("Server already stopped") must not be logged at ERROR when it is collected,
    as it was at every broker restart under load. A plain task's still is: the check can fail."""
    caplog.set_level(logging.ERROR, logger="asyncio")

    async def write_replies() -> None:
        raise RuntimeError("Server already stopped.")

    for make in (stream_task, asyncio.ensure_future):
        task = make(write_replies())
        await asyncio.sleep(0)  # it runs and fails; nobody awaits it
        assert task.done()
        del task
        gc.collect()
    logged = [record.getMessage() for record in caplog.records if record.name == "asyncio"]
    assert len(logged) == 1 and "exception was never retrieved" in logged[0]
