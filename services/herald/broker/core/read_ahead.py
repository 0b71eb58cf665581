"""Read-ahead for cursors reading a backlog (catch-up reads): the next range of entries is read from
storage while the current one is dispatched, into a buffer of the cursor's own, bounded in bytes per
cursor and across the broker (Pulsar's backlog reads bypass its entry cache in the same spirit).

A cursor at the tail is served by the entry cache and reads nothing ahead. A cursor whose next entry
is not cached reads from storage without caching what it reads: a catch-up reader never evicts what
the tail readers need. Entries are immutable, so a buffered entry stays valid whatever happens to
the cursor; a buffer that does not start where the cursor reads next is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from herald.broker.core.entry_cache import ReadAheadBudget
from herald.broker.core.ledger_list import Position
from herald.broker.settings import BrokerSettings
from herald.common.errors import HeraldError

if TYPE_CHECKING:
    from herald.broker.core.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

# The estimate of an entry's size before any was read (the ledger list's average when it has one).
_DEFAULT_ENTRY_BYTES = 1024


class ReadAhead:
    """One cursor's reads: from the cache when its next entry is there, else from its read-ahead
    buffer, which one background storage read at a time keeps filled up to max_bytes."""

    def __init__(self, ledger: ManagedLedger, budget: ReadAheadBudget, max_bytes: int, max_entries: int) -> None:
        """A reader of `ledger`: buffers up to max_bytes (and `budget`), reads up to max_entries at a time."""
        self._ledger = ledger
        self._budget = budget
        self.max_bytes = max_bytes
        self._max_entries = max_entries  # entries per storage read
        self._buffer: deque[tuple[Position, bytes]] = deque()
        self.buffered_bytes = 0
        self.peak_bytes = 0  # the most this buffer ever held
        self.reads = 0  # storage reads made ahead of the dispatcher
        self._task: asyncio.Task[None] | None = None
        self._task_start: Position | None = None
        self._task_chained = False  # the read in flight leaves room for more (see _fill)
        self._reserved = 0  # bytes reserved for the read in flight
        self._entry_bytes = 0.0  # running average of the entries read
        self._closed = False

    @classmethod
    def of(cls, ledger: ManagedLedger, settings: BrokerSettings) -> ReadAhead:
        """A cursor's reader of `ledger`, within the broker's read-ahead budget and settings."""
        return cls(ledger, ledger.read_ahead_budget, settings.read_ahead_max_bytes, settings.read_ahead_max_entries)

    async def read(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to max_entries durable entries from `start` on (as ManagedLedger.read_entries)."""
        ledger = self._ledger
        start = ledger.normalize(start)
        if self._buffer and self._buffer[0][0] != start:
            self.clear()  # the cursor moved (a seek or a rewind): what was read ahead is not next
        if not self._buffer and self._task is not None:
            if self._task_start == start:
                await asyncio.wait([self._task])  # its outcome lands in the buffer (or not)
            else:
                self.clear()
        if self._buffer and self._buffer[0][0] == start:
            return self._take(max_entries)
        if ledger.is_cached(start) or self.max_bytes <= 0:
            return await ledger.read_entries(start, max_entries)  # the tail: the cache serves it
        # A backlog: read what is asked now (kept out of the cache), and the next range behind it.
        got = await ledger.read_entries(start, max_entries, cache=False)
        if got:
            self._learn(got)
            last = got[-1][0]
            self._fill(Position(last.ledger_id, last.entry_id + 1))
        return got

    @property
    def reading(self) -> bool:
        """Whether a read ahead is in flight."""
        return self._task is not None

    def clear(self) -> None:
        """Drop the buffer and any read in flight (the cursor moved, or the dispatcher closes)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._release_reserved()
        self._budget.release(self.buffered_bytes)
        self._buffer.clear()
        self.buffered_bytes = 0

    def close(self) -> None:
        self._closed = True
        self.clear()

    def _take(self, max_entries: int) -> list[tuple[Position, bytes]]:
        """Entries from the buffer; the next read ahead starts once half of it is free."""
        buffer = self._buffer
        taken: list[tuple[Position, bytes]] = []
        size = 0
        while buffer and len(taken) < max_entries:
            item = buffer.popleft()
            taken.append(item)
            size += len(item[1])
        self.buffered_bytes -= size
        self._budget.release(size)
        if self._task is None:
            last = taken[-1][0]
            self._fill(self._buffer[-1][0] if self._buffer else last, after=True)
        return taken

    def _fill(self, position: Position, *, after: bool = False, chained: bool = False) -> None:
        """Start the next read ahead (from `position`, or just after it) if there is room for it:
        once half the buffer is free (or it ran dry), or right away when `chained` (the last read
        was cut at max_entries or by the broker's budget, not by the room left: the buffer is still
        filling up)."""
        if self._closed or self._task is not None:
            return
        if not chained and self._buffer and self.buffered_bytes > self.max_bytes // 2:
            # Not after each take or read of a few entries: one large storage read instead of
            # many small ones. Each read has a fixed cost (an index lookup, a worker thread, the
            # storage client's bookkeeping, a task) that small reads paid per entry or two.
            return
        if after:
            position = Position(position.ledger_id, position.entry_id + 1)
        ledger = self._ledger
        if not ledger.has_entries_from(position):
            return
        position = ledger.normalize(position)
        if ledger.is_cached(position):
            return  # caught up with the tail: the cache serves the rest
        estimate = self._entry_bytes or ledger.average_entry_size(position.ledger_id) or _DEFAULT_ENTRY_BYTES
        room = self.max_bytes - self.buffered_bytes
        if room < estimate:
            return  # full: resumes when the dispatcher takes entries
        # Room for this read (twice the estimate: entries vary), within the broker's budget.
        self._reserved = self._budget.reserve(min(room, int(2 * self._max_entries * estimate)))
        if self._reserved < estimate:
            self._release_reserved()  # the broker's read-ahead is full: resumes on the next take
            return
        count = max(1, min(self._max_entries, int(self._reserved // estimate)))
        self._task_start = position
        self._task = asyncio.get_running_loop().create_task(self._read_ahead(position, count))
        # Cut short by max_entries or the broker's budget rather than this buffer's room: the
        # buffer is still filling up, the next read follows this one at once.
        self._task_chained = count < room // estimate

    async def _read_ahead(self, position: Position, count: int) -> None:
        try:
            got = await self._ledger.read_entries(position, count, cache=False)
        except HeraldError as exc:
            # The dispatcher reads these itself when it gets there, and reports a failure then.
            log.debug("read-ahead of %s from %s failed: %s", self._ledger.name, position, exc)
            got = []
        except BaseException:
            if self._task is asyncio.current_task():  # else clear() cancelled it and released its bytes
                self._task = None
                self._release_reserved()
            raise
        self._task = None
        self.reads += 1
        self._keep(got, chained=self._task_chained)

    def _keep(self, got: list[tuple[Position, bytes]], *, chained: bool = False) -> None:
        """Buffer what a read ahead returned, within the reservation made for it: what is beyond
        is dropped, and read again when the dispatcher gets there (so an entry larger than a
        whole buffer is only ever read when asked for, never ahead)."""
        self._learn(got)
        allowed = self._reserved
        kept = size = 0
        for _, data in got:
            if size + len(data) > allowed:
                break
            size += len(data)
            kept += 1
        self._release_reserved()
        self._budget.reserve(size)  # within what was just released: always granted
        self._buffer.extend(got[:kept])
        self.buffered_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.buffered_bytes)
        if kept:
            self._fill(got[kept - 1][0], after=True, chained=chained and kept == len(got))

    def _release_reserved(self) -> None:
        self._budget.release(self._reserved)
        self._reserved = 0

    def _learn(self, got: list[tuple[Position, bytes]]) -> None:
        size = sum(len(data) for _, data in got) / len(got) if got else 0
        if size:
            self._entry_bytes = size if not self._entry_bytes else (self._entry_bytes + size) / 2
