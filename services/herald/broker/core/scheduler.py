"""A broker's periodic work over its topics, in one task per kind of work whatever the number of
topics (issue 20 item 4: a task per topic waking every second made an idle broker's CPU grow with
its topics, and each task's frame and timer cost memory per topic).

A PeriodicJob holds its members (topics, or one topic's guard) and runs a coroutine on them:
- every `interval` seconds on every member (`every_member`, e.g. retention and expiry checks), or
  only on the members marked since the last pass (e.g. the topics with a dirty cursor);
- soon on a member `request`ed (a ledger just closed, a quota changed).
A pass goes over its members in slices of `slice_size` run concurrently (a metadata write each at
most), yielding to the loop between slices, so a pass over 10,000 topics never holds the loop.
The job's task starts with its first member and ends with its last one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from herald.common.errors import HeraldError
from herald.common.tasks import wait_event

log = logging.getLogger(__name__)

T = TypeVar("T")  # hashable: members are dict keys

SLICE_SIZE = 64


class PeriodicJob(Generic[T]):
    def __init__(self, name: str, interval: float, run: Callable[[T], Awaitable[object]], *,
                 every_member: bool = True, slice_size: int = SLICE_SIZE) -> None:
        self.name = name
        self.interval = interval  # <= 0: only requested runs
        self._run = run
        self._every_member = every_member
        self._slice_size = slice_size
        # Dicts as ordered sets: a pass goes in the order members came.
        self._members: dict[T, None] = {}
        self._marked: dict[T, None] = {}
        self._requested: dict[T, None] = {}
        self._running: dict[T, asyncio.Future[None]] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_pass = 0.0
        self.runs = 0  # runs on a member so far (what a pass costs is what it visits)

    @property
    def running(self) -> bool:
        """Whether the job's task exists (it does while the job has members)."""
        return self._task is not None and not self._task.done()

    @property
    def idle(self) -> bool:
        """Nothing marked, requested nor running."""
        return not (self._marked or self._requested or self._running)

    def __len__(self) -> int:
        return len(self._members)

    def add(self, member: T) -> None:
        self._members[member] = None
        if not self.running:
            loop = asyncio.get_running_loop()
            self._next_pass = loop.time() + self.interval
            self._task = loop.create_task(self._loop(), name=f"{self.name} (every topic)")

    def mark(self, member: T) -> None:
        """Run on `member` at the next periodic pass (for a job not run on every member)."""
        if member in self._members:
            self._marked[member] = None

    def request(self, member: T) -> None:
        """Run on `member` soon, once, whatever the interval."""
        if member in self._members:
            self._requested[member] = None
            self._wakeup.set()

    async def remove(self, member: T) -> None:
        """No more runs on `member`; returns once a run on it in progress has finished (runs are
        never cut off: a cursor's compare-and-set in flight would leave its version unknown)."""
        self._members.pop(member, None)
        self._marked.pop(member, None)
        self._requested.pop(member, None)
        if not self._members:
            self._wakeup.set()  # the task ends
        running = self._running.get(member)
        if running is not None:
            await asyncio.shield(running)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._members:
            timeout = max(0.0, self._next_pass - loop.time()) if self.interval > 0 else None
            await wait_event(self._wakeup, timeout)
            self._wakeup.clear()
            batch = self._requested
            self._requested = {}
            if self.interval > 0 and loop.time() >= self._next_pass:
                self._next_pass = loop.time() + self.interval
                due, self._marked = (self._members if self._every_member else self._marked), {}
                batch = {**batch, **due}
            await self._pass(list(batch))

    async def _pass(self, batch: list[T]) -> None:
        loop = asyncio.get_running_loop()
        for start in range(0, len(batch), self._slice_size):
            part = [member for member in batch[start:start + self._slice_size] if member in self._members]
            if not part:
                continue
            done: asyncio.Future[None] = loop.create_future()
            for member in part:
                self._running[member] = done
            try:
                await asyncio.gather(*(self._one(member) for member in part))
            finally:
                for member in part:
                    if self._running.get(member) is done:
                        del self._running[member]
                done.set_result(None)
            await asyncio.sleep(0)  # the next slice after whatever else is ready

    async def _one(self, member: T) -> None:
        self.runs += 1
        try:
            await self._run(member)
        except HeraldError as exc:
            log.warning("%s of %s failed: %s", self.name, member, exc)
        except Exception:
            log.exception("%s of %s failed", self.name, member)
