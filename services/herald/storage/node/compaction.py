"""Entry-log compaction: reclaiming the space deleted ledgers leave behind (BookKeeper's garbage
collector and entry-log compactor).

Deleting a ledger only drops it from the index: its entries stay in the entry log files as dead
bytes. A file with no live entry left is deleted at a checkpoint. A sealed file (no longer written)
whose live fraction falls below the threshold is compacted: its live entries are copied to the
current entry log on the journal's writer thread (the one path that appends, so copies never
interleave with adds) with their checksums unchanged, and the index is pointed at the copies. The
ledger store then checkpoints, which fsyncs the copies and commits the index (LMDB) *before* it
deletes the old file: a crash before the commit finds the old locations and the old file, a
crash after it finds the new locations durable; either way every live entry is there.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from herald.storage.node.entry_log import HEADER_SIZE, OFFSET_BITS, EntryLog, EntryToWrite
from herald.storage.node.journal import Journal

if TYPE_CHECKING:
    from herald.storage.node.index_db import IndexDB
    from herald.storage.node.ledgers import Ledgers

log = logging.getLogger(__name__)

# Entries copied per append on the writer thread: about this many bytes, so adds wait little.
COPY_BATCH_BYTES = 4 * 1024 * 1024
_COPY_BATCH_ENTRIES = 4096


@dataclass(slots=True)
class CompactionStats:
    files_compacted: int = 0
    entries_moved: int = 0
    bytes_moved: int = 0

    def add(self, other: CompactionStats) -> None:
        self.files_compacted += other.files_compacted
        self.entries_moved += other.entries_moved
        self.bytes_moved += other.bytes_moved


@dataclass(slots=True)
class _Copy:
    ledger_id: int
    entry_id: int
    old_location: int
    data: bytes
    data_crc: int


class FileCompaction:
    """Moving one sealed file's live entries to the current entry log (the operation; the ledger
    store runs it under its checkpoint lock and checkpoints after it)."""

    def __init__(
        self, file_id: int, entry_log: EntryLog, journal: Journal, ledgers: Ledgers,
    ) -> None:
        self.file_id = file_id
        self._entry_log = entry_log
        self._journal = journal
        self._ledgers = ledgers
        self._refs: Counter[int] = ledgers.file_refs
        self._usage = ledgers.usage
        self.stats = CompactionStats()

    async def move_live_entries(self) -> CompactionStats:
        """Copy every live entry of the file and point the index at the copies (not yet durable:
        the caller's checkpoint makes them so before the file is deleted)."""
        # The overlays are copied on the event loop (small: what changed since the last
        # checkpoint) and LMDB is searched on a thread.
        index = self._ledgers.index
        ledgers = {lid: (index[lid].in_db, dict(index[lid].changed))
                   for lid in self._usage.ledgers(self.file_id) if lid in index}
        live = await asyncio.to_thread(_live_entries, self.file_id, self._ledgers.db, ledgers)
        done = 0
        while done < len(live):
            copies = await asyncio.to_thread(self._read, live, done)
            done += len(copies)
            writes = [EntryToWrite(c.ledger_id, c.entry_id, c.data, c.data_crc) for c in copies]
            locations = await self._journal.call_on_writer(functools.partial(self._entry_log.append, writes))
            self._repoint(copies, locations)
        self.stats.files_compacted = 1
        log.info("entry log file %d compacted: %d live entries (%d bytes) moved",
                 self.file_id, self.stats.entries_moved, self.stats.bytes_moved)
        return self.stats

    def _read(self, live: list[tuple[int, int, int]], start: int) -> list[_Copy]:
        """Read live entries from start on, about COPY_BATCH_BYTES of them (on a worker thread).
        A damaged entry raises ChecksumError: it is never copied, and its file stays."""
        copies: list[_Copy] = []
        size = 0
        for location, ledger_id, entry_id in live[start:start + _COPY_BATCH_ENTRIES]:
            data, crc = self._entry_log.read_record(location, ledger_id, entry_id)
            copies.append(_Copy(ledger_id, entry_id, location, data, crc))
            size += HEADER_SIZE + len(data)
            if size >= COPY_BATCH_BYTES:
                break
        return copies

    def _repoint(self, copies: list[_Copy], locations: list[int]) -> None:
        """On the event loop: the index takes each copy unless the entry changed meanwhile (its
        ledger deleted, or a second copy written): then the copy is dead bytes in the new file."""
        refs = self._refs
        for copy, location in zip(copies, locations, strict=True):
            if not self._ledgers.repoint(copy.ledger_id, copy.entry_id, copy.old_location, location):
                continue
            refs[copy.old_location >> OFFSET_BITS] -= 1
            refs[location >> OFFSET_BITS] += 1
            size = HEADER_SIZE + len(copy.data)
            self._usage.added(location >> OFFSET_BITS, copy.ledger_id, size)
            self.stats.entries_moved += 1
            self.stats.bytes_moved += size


def _live_entries(file_id: int, db: IndexDB | None,
                  ledgers: dict[int, tuple[bool, dict[int, int]]]) -> list[tuple[int, int, int]]:
    """(location, ledger id, entry id) of every indexed entry in the file, in file order: the
    committed ones (an LMDB cursor over each ledger's range) unless the overlay changed them."""
    low, high = file_id << OFFSET_BITS, (file_id + 1) << OFFSET_BITS
    live: list[tuple[int, int, int]] = []
    for ledger_id, (in_db, changed) in ledgers.items():
        if in_db and db is not None:
            live.extend((location, ledger_id, entry_id)
                        for entry_id, location in db.locations_in_file(ledger_id, file_id) if entry_id not in changed)
        live.extend((location, ledger_id, entry_id) for entry_id, location in changed.items() if low <= location < high)
    live.sort()
    return live
