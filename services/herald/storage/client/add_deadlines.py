"""The add timeout of one add stream (a node's gRPC stream, or the local one of a standalone): each
add's deadline in send order, and one timer, for the oldest add not yet answered.

Answers come in request order, so the oldest unanswered add past its deadline means the node is
stuck (a paused node keeps its connection open: only a timeout notices it)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from herald.common import errors

Add = TypeVar("Add")  # what identifies an add on its stream: a request id, or its response future


class AddDeadlines(Generic[Add]):
    """Deadlines of a stream's adds; `expired` is called once the oldest unanswered one is past."""

    def __init__(self, address: str, add_timeout: float, answered: Callable[[Add], bool],
                 expired: Callable[[errors.HeraldError], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._address = address
        self._add_timeout = add_timeout
        self._answered = answered
        self._expired = expired
        self._deadlines: deque[tuple[float, Add]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def track(self, add: Add) -> None:
        deadline = self._loop.time() + self._add_timeout
        self._deadlines.append((deadline, add))
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._check)

    def prune(self) -> None:
        """Forget the answered adds at the head (the others wait for theirs)."""
        deadlines, answered = self._deadlines, self._answered
        while deadlines and answered(deadlines[0][1]):
            deadlines.popleft()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        self.prune()
        if not self._deadlines:
            return
        deadline = self._deadlines[0][0]
        if deadline <= self._loop.time():
            self._expired(errors.HeraldTimeoutError(
                f"storage node {self._address} did not answer an add within {self._add_timeout} s"))
        else:
            self._timer = self._loop.call_at(deadline, self._check)
