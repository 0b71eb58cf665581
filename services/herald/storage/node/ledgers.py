"""What a storage node knows of its ledgers, kept on the event loop: per ledger its LAC, fencing
and last entry, the entries journaled but not yet in the entry log (their bytes, which reads are
served from till then), the locations changed since the last checkpoint (the overlay, consulted
before the committed index in LMDB: storage.node.index_db), and the live entries and bytes per
entry log file (which files may be deleted, which are worth compacting).

Two steps change it, each batch after batch in journal order: `journaled`, once the journal's
fsync covers a batch (its adds are answered then: from here on the node holds them), and
`logged`, once the entry log has its adds (appended after they were answered). A replay at
start-up takes both steps for each batch at once. A checkpoint takes the overlay's logged
locations (`checkpoint_batch`), commits them to LMDB, and drops them from the overlay (`committed`):
memory holds only what changed since the last checkpoint, never one object per committed entry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import lmdb

from herald.storage.node.entry_log import HEADER_SIZE, OFFSET_BITS, Entry
from herald.storage.node.index import MISSING, UNLOGGED
from herald.storage.node.index_db import CheckpointBatch, IndexDB, LedgerMeta
from herald.storage.node.journal import JournalRecord, RecordKind
from herald.storage.node.usage import EntryLogUsage

# A wanted entry: (entry id, entry log location or UNLOGGED, its bytes if they are in memory).
Wanted = tuple[int, int, bytes | None]


@dataclass(slots=True, eq=False)
class LedgerState:
    """One ledger as this node knows it: its committed entries are in LMDB, the rest in memory."""

    ledger_id: int
    db: IndexDB | None = None
    last_entry_id: int = -1  # the highest entry id held (logged or not), -1 if none
    last_add_confirmed: int = -1
    fenced: bool = False
    # The writer's length of the ledger up to last_entry_id, piggybacked with that entry's add (-1:
    # unknown, an add without it). Kept with the last entry only: recovery needs no more.
    length: int = -1
    # entry id -> the bytes of an UNLOGGED entry (the latest copy journaled): never committed.
    unlogged: dict[int, bytes] = field(default_factory=dict)
    # entry id -> location (or UNLOGGED) changed since the last checkpoint: read before LMDB.
    changed: dict[int, int] = field(default_factory=dict)
    # LMDB holds this ledger's committed entries (False for a ledger new since the last
    # checkpoint: a deleted ledger's range under the same id may still be there).
    in_db: bool = False
    committed_last: int = -1  # the highest entry id committed

    def get(self, entry_id: int) -> int:
        """The entry's location (UNLOGGED if not logged yet), or MISSING."""
        location = self.changed.get(entry_id)
        if location is not None:
            return location
        if self.in_db and self.db is not None and 0 <= entry_id <= self.committed_last:
            return self.db.get(self.ledger_id, entry_id)
        return MISSING


@dataclass(slots=True)
class DroppedLedger:
    """A deleted ledger whose committed entries are still to be counted off their entry log files:
    a read of LMDB as of the delete, and the entries the overlay had replaced (counted already)."""

    ledger_id: int
    replaced: set[int]
    reader: lmdb.Transaction
    generation: int  # commits done before the read began


class Ledgers:
    """The ledgers of one node. Use from the event loop (or from recovery, before it serves)."""

    def __init__(self, db: IndexDB | None = None) -> None:
        self.db = db
        self.index: dict[int, LedgerState] = {}
        # Live entries per entry log file: a file with none left is deleted at a checkpoint.
        self.file_refs: Counter[int] = Counter()
        # Bytes per ledger per entry log file: which files are worth compacting.
        self.usage = EntryLogUsage()
        self._touched: set[int] = set()  # ledgers changed since the last checkpoint batch
        self._deleted: set[int] = set()  # ledgers deleted since then: their LMDB ranges go
        # Deleted ledgers whose committed entries are not counted off file_refs yet (a ledger's
        # range can be millions of entries: counted on a thread before the next checkpoint).
        self.dropped: list[DroppedLedger] = []
        self._generation = 0  # commits so far
        self.overlay_added = 0  # entries put in the overlay since the last checkpoint batch (about)

    def load(self) -> None:
        """Start from what LMDB holds: one object per ledger, the file counts it keeps."""
        assert self.db is not None
        self.index = {ledger_id: LedgerState(ledger_id, self.db, meta.last_entry_id, meta.last_add_confirmed,
                                             meta.fenced, meta.length, in_db=True, committed_last=meta.last_entry_id)
                      for ledger_id, meta in self.db.ledgers().items()}
        self.file_refs = self.db.file_refs()

    def state(self, ledger_id: int) -> LedgerState:
        """The ledger's state, made if new."""
        found = self.index.get(ledger_id)
        if found is None:
            found = self.index[ledger_id] = LedgerState(ledger_id, self.db)
        self._touched.add(ledger_id)
        return found

    def fence(self, ledger_id: int) -> None:
        self.state(ledger_id).fenced = True

    def journaled(self, records: Sequence[JournalRecord]) -> tuple[list[JournalRecord], int]:
        """A batch the journal made durable: its adds are held from now on (UNLOGGED, their bytes
        kept, until the entry log has them), fences and deletes take effect. Returns the adds and
        their bytes."""
        adds: list[JournalRecord] = []
        size = 0
        ledger_id, ledger = -1, LedgerState(-1)  # the last ledger looked up: batches come in runs
        for record in records:
            if record.kind is RecordKind.ADD:
                if record.ledger_id != ledger_id:
                    ledger_id = record.ledger_id
                    ledger = self.state(ledger_id)
                entry_id = record.entry_id
                ledger.unlogged[entry_id] = record.data
                if entry_id > ledger.last_entry_id:  # the usual case: the next entry
                    ledger.last_entry_id = entry_id
                    ledger.length = record.length
                else:
                    if entry_id == ledger.last_entry_id and record.length >= 0:
                        ledger.length = record.length  # a recovery's copy of the last entry
                    # A second copy of an entry (re-replication, a writer's retry) replaces the
                    # first at once: reads get it from memory until its own location is known.
                    previous = ledger.get(entry_id)
                    if previous < UNLOGGED:
                        self.file_refs[previous >> OFFSET_BITS] -= 1
                ledger.changed[entry_id] = UNLOGGED
                self.overlay_added += 1
                if record.last_add_confirmed > ledger.last_add_confirmed:
                    ledger.last_add_confirmed = record.last_add_confirmed
                adds.append(record)
                size += len(record.data)
                continue
            ledger_id = -1  # a delete may drop the ledger looked up last
            if record.kind is RecordKind.FENCE:
                self.fence(record.ledger_id)
            elif record.kind is RecordKind.DELETE:
                self._delete(record.ledger_id)
        return adds, size

    def _delete(self, ledger_id: int) -> None:
        dropped = self.index.pop(ledger_id, None)
        self._touched.discard(ledger_id)
        if dropped is None:
            return
        self._deleted.add(ledger_id)  # a commit in flight may hold some of its entries
        # Its unlogged entries go with it: their entry log copies are dead bytes.
        self.file_refs.subtract(loc >> OFFSET_BITS for loc in dropped.changed.values() if loc < UNLOGGED)
        if dropped.in_db and self.db is not None:
            self.dropped.append(DroppedLedger(ledger_id, set(dropped.changed), self._reader(), self._generation))

    def _reader(self) -> lmdb.Transaction:
        """A read of LMDB as of now; the last one again if no commit came since (a burst of deletes
        shares one: LMDB has a bounded number of reader slots)."""
        assert self.db is not None
        last = self.dropped[-1] if self.dropped else None
        if last is not None and last.generation == self._generation:
            return last.reader
        return self.db.reader()

    def count_dropped(self, dropped: list[DroppedLedger]) -> Counter[int]:
        """Live entries per entry log file that the dropped ledgers' committed entries held.
        Blocking (a cursor over each range): on a worker thread, or in recovery."""
        assert self.db is not None
        counts: Counter[int] = Counter()
        try:
            for ledger in dropped:
                self.db.count_files(ledger.reader, ledger.ledger_id, ledger.replaced, counts)
        finally:
            for reader in {id(ledger.reader): ledger.reader for ledger in dropped}.values():
                reader.abort()
        return counts

    def logged(self, entries: Sequence[Entry], locations: Sequence[int]) -> None:
        """The entry log holds entries at locations: the index points at them."""
        index = self.index
        # Entries and bytes per (file, ledger), counted once per batch rather than once per entry.
        counts: dict[tuple[int, int], list[int]] = {}
        ledger_id, ledger = -1, None
        for entry, location in zip(entries, locations, strict=True):
            if entry.ledger_id != ledger_id:
                ledger_id = entry.ledger_id
                ledger = index.get(ledger_id)
                if ledger is not None:
                    self._touched.add(ledger_id)
            # Not the copy awaited (its ledger was deleted, or a later copy replaced it): dead bytes.
            if ledger is None or ledger.unlogged.get(entry.entry_id) is not entry.data:
                continue
            del ledger.unlogged[entry.entry_id]
            ledger.changed[entry.entry_id] = location  # in place of UNLOGGED
            count = counts.get(file_ledger := (location >> OFFSET_BITS, ledger_id))
            if count is None:
                count = counts[file_ledger] = [0, 0]
            count[0] += 1
            count[1] += HEADER_SIZE + len(entry.data)
        for (file_id, of_ledger), (entries_in_file, size) in counts.items():
            self.file_refs[file_id] += entries_in_file
            self.usage.added(file_id, of_ledger, size)

    def repoint(self, ledger_id: int, entry_id: int, old: int, new: int) -> bool:
        """Point the entry at a compaction's copy unless it changed meanwhile; True if it did."""
        ledger = self.index.get(ledger_id)
        if ledger is None or ledger.get(entry_id) != old:
            return False
        ledger.changed[entry_id] = new
        self._touched.add(ledger_id)
        return True

    def lookup(self, ledger: LedgerState, first: int, last: int) -> list[Wanted]:
        """Entries first..last of the ledger up to the first one not held: each with its location,
        and its bytes if it is not in the entry log yet. One LMDB cursor read for the range."""
        wanted: list[Wanted] = []
        unlogged, changed = ledger.unlogged, ledger.changed
        last = min(last, ledger.last_entry_id)
        committed: dict[int, int] = {}
        if ledger.in_db and self.db is not None and first <= ledger.committed_last:
            committed = self.db.range(ledger.ledger_id, first, min(last, ledger.committed_last))
        for entry_id in range(first, last + 1):
            location = changed.get(entry_id)
            if location is None:
                location = committed.get(entry_id, MISSING)
            if location == MISSING:
                break
            wanted.append((entry_id, location, unlogged[entry_id] if location == UNLOGGED else None))
        return wanted

    def checkpoint_batch(self, journal_file_id: int) -> CheckpointBatch:
        """What the entry log has that LMDB has not, for a checkpoint covering the journal before
        journal_file_id. Entries not logged yet are left out: they were journaled from that file on
        (everything before it is logged by now), so a restart replays them."""
        batch = CheckpointBatch(journal_file_id, deleted=self._deleted)
        for ledger_id in self._touched:
            ledger = self.index[ledger_id]
            logged = {e: loc for e, loc in ledger.changed.items() if loc < UNLOGGED}
            batch.locations[ledger_id] = logged
            last = max(ledger.committed_last, max(logged, default=-1))
            # The length goes with the last entry: unknown while that one is not logged yet (a
            # restart replays it, length and all).
            length = ledger.length if last == ledger.last_entry_id else -1
            batch.ledgers[ledger_id] = LedgerMeta(last, ledger.last_add_confirmed, ledger.fenced, length)
        self._touched, self._deleted = set(), set()
        self.overlay_added = 0
        return batch

    def committed(self, batch: CheckpointBatch) -> None:
        """The batch is in LMDB: drop from the overlay what it holds (unless changed since)."""
        self._generation += 1
        for ledger_id, logged in batch.locations.items():
            ledger = self.index.get(ledger_id)
            if ledger is None or (not ledger.in_db and ledger_id in self._deleted):
                continue  # deleted since the batch was taken (then maybe made again)
            changed = ledger.changed
            for entry_id, location in logged.items():
                if changed.get(entry_id) == location:
                    del changed[entry_id]
            ledger.in_db = True
            ledger.committed_last = batch.ledgers[ledger_id].last_entry_id

    def not_committed(self, batch: CheckpointBatch) -> None:
        """The batch failed: the next one takes its ledgers again."""
        self._touched.update(i for i in batch.locations if i in self.index)
        self._deleted |= batch.deleted

    def unreferenced(self, file_ids: list[int]) -> list[int]:
        return [i for i in file_ids if self.file_refs.get(i, 0) <= 0]

    def forget_files(self, file_ids: list[int]) -> None:
        for file_id in file_ids:
            self.file_refs.pop(file_id, None)
            self.usage.forget(file_id)
