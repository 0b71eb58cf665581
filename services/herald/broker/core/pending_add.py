"""One add on its way to the managed ledger's open ledger (BookKeeper's OpAddEntry)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from herald.broker.core.ledger_list import Position
from herald.common import tracing


class PendingAdd:
    """One add on its way to storage (BookKeeper's OpAddEntry): queued, then issued to the open
    ledger, then completed (in order) with a position or an error. `callback` runs synchronously at
    completion, in add order, before the future's waiters wake."""

    __slots__ = ("attempts", "callback", "data", "done", "error", "future", "position", "task", "trace")

    def __init__(self, data: bytes, callback: Callable[[PendingAdd], None] | None) -> None:
        self.data = data
        self.callback = callback
        self.future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.position: Position | None = None
        self.error: BaseException | None = None
        self.done = False
        self.attempts = 0
        self.task: asyncio.Task[None] | None = None
        # The trace context it was queued in (a publish span), for the storage add wherever it is
        # issued (a rollover issues it later, from another task). None: not traced.
        self.trace = tracing.current() if tracing.ENABLED else None

    def succeed(self, position: Position) -> None:
        self.position = position
        self.error = None
        if self.callback is not None:
            self.callback(self)
        if not self.future.done():
            self.future.set_result(position)

    def fail(self, error: BaseException) -> None:
        self.error = error
        if self.callback is not None:
            self.callback(self)
        if not self.future.done():
            self.future.set_exception(error)
            # A caller that only used the callback must not trigger "exception never retrieved".
            self.future.exception()
