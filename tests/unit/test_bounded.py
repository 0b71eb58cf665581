"""herald.common.bounded: per-item work at most N at a time, items read lazily, answers in order,
the first failure cancelling the rest; and the Pacer giving the event loop back in loops that do
not suspend by themselves."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

import pytest
from herald.common.bounded import Pacer, map_bounded


async def test_answers_come_in_item_order_with_at_most_limit_running() -> None:
    running, most = 0, 0

    async def call(item: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001 * (item % 3))  # finish out of order
        running -= 1
        return item * 2

    assert await map_bounded(call, range(100), limit=7) == [item * 2 for item in range(100)]
    assert most == 7


async def test_items_are_read_lazily() -> None:
    taken = 0

    def items() -> Iterator[int]:
        nonlocal taken
        for item in itertools.count():
            taken += 1
            yield item

    started = asyncio.Event()

    async def call(item: int) -> int:
        started.set()
        await asyncio.Event().wait()  # never ends: only `limit` items may have been taken
        return item

    task = asyncio.ensure_future(map_bounded(call, items(), limit=4))
    await started.wait()
    await asyncio.sleep(0)
    assert taken == 4  # an endless iterable costs nothing beyond what is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_first_failure_is_raised_and_the_calls_running_are_cancelled() -> None:
    cancelled = []

    async def call(item: int) -> int:
        if item == 3:
            raise ValueError("partition 3 failed")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(item)
            raise
        return item

    with pytest.raises(ValueError, match="partition 3 failed"):
        await map_bounded(call, range(1000), limit=4)
    assert sorted(cancelled) == [0, 1, 2]  # the others in flight; nothing past them was started


async def test_no_items_and_a_bad_limit() -> None:
    async def call(item: int) -> int:
        return item

    assert await map_bounded(call, []) == []
    with pytest.raises(ValueError, match="at least 1"):
        await map_bounded(call, [1], limit=0)


async def test_calls_that_never_suspend_still_let_other_tasks_run() -> None:
    others = 0
    seen = []

    async def other() -> None:
        nonlocal others
        while True:
            others += 1
            await asyncio.sleep(0)

    async def call(item: int) -> int:
        seen.append(others)
        busy_until = time.monotonic() + 0.001  # a millisecond of work and no await: a loaded topic's stats
        while time.monotonic() < busy_until:
            pass
        return item

    ticker = asyncio.ensure_future(other())
    try:
        await map_bounded(call, range(20), limit=1)
    finally:
        ticker.cancel()
    assert len(set(seen)) > 1  # the other task ran between items: the worker gave the loop back


async def test_a_pacer_gives_the_loop_back_once_its_slice_is_used() -> None:
    ran = asyncio.Event()
    asyncio.get_running_loop().call_soon(ran.set)
    pacer = Pacer(slice_seconds=0.0)  # every call is past the slice
    await pacer.pace()
    assert ran.is_set()

    never = Pacer(slice_seconds=3600.0)
    later = asyncio.Event()
    asyncio.get_running_loop().call_soon(later.set)
    await never.pace()
    assert not later.is_set()  # within its slice it does not yield


async def test_without_cancelling_the_calls_under_way_finish_and_no_new_one_starts() -> None:
    finished, started = [], []
    release, three_started = asyncio.Event(), asyncio.Event()

    async def call(item: int) -> int:
        started.append(item)
        if len(started) == 3:
            three_started.set()
        if item == 1:
            raise ValueError("partition 1 failed")
        await release.wait()  # a delete half done: it must not be cut
        finished.append(item)
        return item

    task = asyncio.ensure_future(map_bounded(call, range(100), limit=3, cancel_on_error=False))
    await three_started.wait()  # 0 and 2 wait, 1 failed
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(ValueError, match="partition 1 failed"):
        await task
    assert finished == [0, 2]  # not cancelled half way
    assert started == [0, 1, 2]  # and after the failure no new one started
