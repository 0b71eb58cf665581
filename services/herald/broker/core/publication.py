"""One send's outcome, as the topic completes it (BookKeeper keeps one object per add in flight; this
is the broker's side of the same idea): `succeed` with the entry's position ((-1, -1) for a duplicate
or a non-persistent topic), or `fail` with the error. Completed once; a publication already done (its
stream gave up) is skipped by a topic that still holds it (a send held by the backlog quota)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from herald.common.errors import HeraldError


class Publication(Protocol):
    @property
    def done(self) -> bool: ...
    def succeed(self, ledger_id: int, entry_id: int) -> None: ...
    def fail(self, error: HeraldError) -> None: ...


class FuturePublication:
    """A publication completing a future: for callers that await one send (Topic.publish)."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()

    @property
    def done(self) -> bool:
        return self.future.done()

    def succeed(self, ledger_id: int, entry_id: int) -> None:
        if not self.future.done():
            self.future.set_result((ledger_id, entry_id))

    def fail(self, error: HeraldError) -> None:
        if not self.future.done():
            self.future.set_exception(error)
