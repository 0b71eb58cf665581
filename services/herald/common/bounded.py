"""Work over many items on one event loop (the partitions of a topic, the topics a broker serves)
without holding the loop: at most a few calls in flight at a time, and the loop given back every
couple of milliseconds between items. However many partitions a topic has, no single call then
keeps heartbeats, lookups or other tenants' streams waiting for more than a few milliseconds: a
100,000-partition stats call gathered at once once held a standalone's loop for about 90 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Per-partition calls one admin call or route runs at once: enough to overlap the metadata and
# network waits of a partition, few enough that their first steps never pile up on the loop.
IN_FLIGHT = 16
# How long a loop over items whose body does not wait runs before giving the event loop back.
SLICE_SECONDS = 0.002


class Pacer:
    """Gives the event loop back (`await pacer.pace()` between items) once `slice_seconds` passed
    since it last did, so a loop whose body rarely or never suspends still lets others run."""

    __slots__ = ("_since", "_slice")

    def __init__(self, slice_seconds: float = SLICE_SECONDS) -> None:
        self._slice = slice_seconds
        self._since = time.monotonic()

    async def pace(self) -> None:
        if time.monotonic() - self._since >= self._slice:
            await asyncio.sleep(0)
            self._since = time.monotonic()


async def map_bounded(
    call: Callable[[T], Awaitable[R]], items: Iterable[T], limit: int = IN_FLIGHT, *, cancel_on_error: bool = True,
) -> list[R]:
    """`call(item)` for every item, at most `limit` at a time, the answers in item order (what
    asyncio.gather gives, without starting every call at once). `items` is read lazily: a range
    of a million partitions costs nothing until each is reached. The first failure is raised; the
    calls still running are cancelled, or with cancel_on_error=False (calls that must not be cut in
    half, such as deletes) left to finish, no new one starting."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    results: dict[int, R] = {}
    todo = enumerate(items)  # shared: each worker takes the next
    failures: list[BaseException] = []

    async def worker() -> None:
        pacer = Pacer()
        for index, item in todo:
            try:
                results[index] = await call(item)
            except Exception as exc:
                if cancel_on_error:
                    raise
                failures.append(exc)
                return
            if failures:
                return
            await pacer.pace()  # a call that did not suspend (a loaded topic's stats) must not hog the loop

    workers = [asyncio.ensure_future(worker()) for _ in range(limit)]
    try:
        done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    if failures:
        raise failures[0]
    return [results[index] for index in range(len(results))]
