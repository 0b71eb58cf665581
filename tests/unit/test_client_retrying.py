"""The client's retry loop (herald.client.connection.retrying) and how it tells a gRPC call closed
under it from its own cancellation: no network, coroutines that fail as gRPC's do."""

from __future__ import annotations

import asyncio

import pytest
from herald.client.connection import closed_as_error, retrying
from herald.common.errors import ConnectionError_, HeraldTimeoutError, NotFoundError


async def closed_under_the_call() -> str:
    # What awaiting a unary call raises when the pool closed its channel (liveness.py): the task
    # awaiting it was never cancelled.
    raise asyncio.CancelledError()


async def test_a_call_closed_under_it_is_a_retryable_lost_connection() -> None:
    closed = "lookup of topic 't': its connection was closed during the call"
    with pytest.raises(ConnectionError_, match=closed) as caught:
        await closed_as_error(closed_under_the_call(), "lookup of topic 't'")
    assert caught.value.retryable


async def test_cancelling_the_task_still_cancels_it() -> None:
    started = asyncio.Event()

    async def waits() -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(closed_as_error(waits(), "waiting"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_retrying_tries_again_after_a_call_closed_under_it() -> None:
    attempts: list[float] = []

    async def attempt(deadline: float) -> str:
        attempts.append(deadline)
        if len(attempts) == 1:
            await closed_under_the_call()
        return "127.0.0.1:6661"

    assert await retrying("lookup of topic 't'", 10.0, attempt) == "127.0.0.1:6661"
    assert len(attempts) == 2


async def test_retrying_reports_the_last_closed_call_once_the_time_is_up() -> None:
    async def attempt(deadline: float) -> str:
        return await closed_under_the_call()

    with pytest.raises(HeraldTimeoutError, match=r"lookup of topic 't' did not complete within the operation "
                                                 r"timeout of 0.3s; last error: .*connection was closed"):
        await retrying("lookup of topic 't'", 0.3, attempt)


async def test_retrying_reports_an_answer_that_is_not_retryable_at_once() -> None:
    attempts = 0

    async def attempt(deadline: float) -> str:
        nonlocal attempts
        attempts += 1
        raise NotFoundError("topic t does not exist")

    with pytest.raises(NotFoundError):
        await retrying("lookup of topic 't'", 10.0, attempt)
    assert attempts == 1


async def test_cancelling_a_retrying_task_ends_it_even_between_attempts() -> None:
    async def attempt(deadline: float) -> str:
        return await closed_under_the_call()

    task = asyncio.create_task(retrying("lookup of topic 't'", 60.0, attempt))
    await asyncio.sleep(0.2)  # it is retrying, with backoff
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
