"""Disk space of a storage node: whether its disk can take more adds (the journal asks before
each group commit, on its writer thread), and the entry log writes that wait for room.

Two limits, either of which refuses adds (storage settings): the bytes of the data directory's
files (journal, entry logs, index) against max_data_bytes, and the file system's free bytes
against the min_free_bytes reserve. The reserve is what an add already acknowledged still needs
(its entry log copy is written after its answer), and what fences, deletes and checkpoints need:
without it, a full disk could stop the node from fencing or from freeing space.

The data directory's size is scanned now and then (refresh, off the writer thread) and grows by
what was accepted since; the free bytes are read (statvfs) at every check, a cheap system call.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from herald.common.errors import PersistenceError
from herald.storage.node.entry_log import EntryLog
from herald.storage.node.journal import JournalRecord, RecordKind
from herald.storage.node.metrics import disk_usage

log = logging.getLogger(__name__)

# Seconds between two measures of the data directory's size, while max_data_bytes caps it.
SPACE_REFRESH_INTERVAL = 1.0
# Each byte an add brings is written twice: in the journal, then in the entry log.
_COPIES = 2


class DiskSpace:
    """Whether the node's disk can take more adds: its data cap and its free-space reserve."""

    def __init__(self, data_dir: Path, *, max_data_bytes: int, min_free_bytes: int) -> None:
        self._dir = data_dir
        self._max_data_bytes = max_data_bytes
        self._min_free_bytes = min_free_bytes
        self._lock = threading.Lock()
        self._scanned = 0  # the data directory's bytes at the last refresh
        self._accepted = 0  # bytes of adds let through since

    @property
    def capped(self) -> bool:
        return self._max_data_bytes > 0

    def refresh(self) -> None:
        """Scan the data directory's size (blocking: call it on a worker thread)."""
        scanned = sum(disk_usage(self._dir).values())
        with self._lock:
            self._scanned, self._accepted = scanned, 0

    def data_bytes(self) -> int:
        with self._lock:
            return self._scanned + self._accepted

    def check(self, add_bytes: int) -> str | None:
        """Why adds of add_bytes may not be written now, or None (then they count as written)."""
        incoming = _COPIES * add_bytes
        problem = None
        if self._max_data_bytes > 0:
            used = self.data_bytes()
            if used + incoming > self._max_data_bytes:
                problem = (f"its data directory {self._dir} holds about {used} bytes and {incoming} more would pass "
                           f"its cap (max_data_bytes {self._max_data_bytes})")
        if problem is None and self._min_free_bytes > 0:
            try:
                stat = os.statvfs(self._dir)
            except OSError:
                stat = None
            free = stat.f_bavail * stat.f_frsize if stat is not None else None
            if free is not None and free - incoming < self._min_free_bytes:
                problem = (f"its file system ({self._dir}) has {free} bytes free, too few to keep "
                           f"{self._min_free_bytes} (min_free_bytes) free after {incoming} more")
        if problem is None:
            with self._lock:
                self._accepted += incoming
        return problem

    async def watch(self, interval: float) -> None:
        """Refresh every interval seconds, forever (a task of the ledger store, while the cap is on):
        space freed by compaction or deletes lets adds in again."""
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.refresh)
            except OSError:
                log.exception("could not measure the data directory %s; the cap counts on the last measure", self._dir)


class EntryLogAppender:
    """Appends each journaled batch's adds to the entry log, on the journal's writer thread. A disk
    full (ENOSPC) holds them back in memory (they are durable in the journal, and served from
    memory meanwhile): the next batch appends them first, or the next checkpoint (no records: then
    it raises while they still do not fit, so that no checkpoint covers them)."""

    def __init__(self, entry_log: EntryLog) -> None:
        self._entry_log = entry_log
        self._held_back: list[JournalRecord] = []

    def append(self, records: Sequence[JournalRecord]) -> tuple[list[JournalRecord], list[int]] | None:
        adds = [*self._held_back, *(r for r in records if r.kind is RecordKind.ADD)]
        if not adds:
            return None
        try:
            locations = self._entry_log.append(adds)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise PersistenceError(
                    f"the entry log could not be written: {exc}; this storage node accepts no more writes until it "
                    "is restarted (the journal holds every acknowledged entry)") from exc
            self._held_back = adds
            if not records:
                raise PersistenceError(f"{len(adds)} entries wait for room in the entry log (disk full)") from exc
            log.warning("entry log: disk full (%s): %d entries wait in memory for room", exc, len(adds))
            return None
        self._held_back = []
        return adds, locations
