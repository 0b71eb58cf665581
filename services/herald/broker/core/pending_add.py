"""One add on its way to the managed ledger's open ledger (BookKeeper's OpAddEntry)."""

from __future__ import annotations

from collections.abc import Callable

from herald.broker.core.ledger_list import Position
from herald.common import tracing


class PendingAdd:
    """One add on its way to storage (BookKeeper's OpAddEntry): queued, then issued to the open
    ledger, then completed (in order) with a position or an error. `callback` runs synchronously at
    completion, in add order, once (the data is the caller's bytes, held by reference: an add copies
    nothing)."""

    __slots__ = ("attempts", "callback", "completed", "data", "done", "error", "position", "trace")

    def __init__(self, data: bytes, callback: Callable[[PendingAdd], None] | None) -> None:
        self.data = data
        self.callback = callback
        self.completed = False
        self.position: Position | None = None
        self.error: BaseException | None = None
        self.done = False
        self.attempts = 0
        # The trace context it was queued in (a publish span), for the storage add wherever it is
        # issued (a rollover issues it later, from another task). None: not traced.
        self.trace = tracing.current() if tracing.ENABLED else None

    def succeed(self, position: Position) -> None:
        self.position = position
        self.error = None
        self._complete()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._complete()

    def _complete(self) -> None:
        if self.completed:
            return
        self.completed = True
        if self.callback is not None:
            self.callback(self)
