"""What a storage node knows of its ledgers, kept on the event loop: the index (entry locations,
LAC, fencing per ledger), the entries journaled but not yet in the entry log (their bytes, which
reads are served from till then), and the live entries and bytes per entry log file (which files
may be deleted, which are worth compacting).

Two steps change it, each batch after batch in journal order: `journaled`, once the journal's
fsync covers a batch (its adds are answered then: from here on the node holds them), and
`logged`, once the entry log has its adds (appended after they were answered). A replay at
start-up takes both steps for each batch at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from herald.storage.node.compaction import EntryLogUsage
from herald.storage.node.entry_log import HEADER_SIZE, OFFSET_BITS, Entry
from herald.storage.node.index import MISSING, UNLOGGED, LedgerIndex, Snapshot
from herald.storage.node.journal import JournalRecord, RecordKind

# A wanted entry: (entry id, entry log location or UNLOGGED, its bytes if they are in memory).
Wanted = tuple[int, int, bytes | None]


class Ledgers:
    """The ledgers of one node. Use from the event loop (or from recovery, before it serves)."""

    def __init__(self) -> None:
        self.index: dict[int, LedgerIndex] = {}
        # Live entries per entry log file: a file with none left is deleted at a checkpoint.
        self.file_refs: Counter[int] = Counter()
        # Bytes per ledger per entry log file: which files are worth compacting.
        self.usage = EntryLogUsage()

    def load(self, ledgers: dict[int, LedgerIndex]) -> None:
        """Start from a snapshot's index."""
        self.index = ledgers
        for ledger in ledgers.values():
            self.file_refs.update(loc >> OFFSET_BITS for loc in ledger.present())

    def journaled(self, records: Sequence[JournalRecord]) -> tuple[list[JournalRecord], int]:
        """A batch the journal made durable: its adds are held from now on (UNLOGGED, their bytes
        kept, until the entry log has them), fences and deletes take effect. Returns the adds and
        their bytes."""
        adds: list[JournalRecord] = []
        size = 0
        index = self.index
        ledger_id, ledger = -1, LedgerIndex()  # the last ledger looked up: batches come in runs
        for record in records:
            if record.kind is RecordKind.ADD:
                if record.ledger_id != ledger_id:
                    ledger_id = record.ledger_id
                    found = index.get(ledger_id)
                    if found is None:
                        found = index[ledger_id] = LedgerIndex()
                    ledger = found
                entry_id = record.entry_id
                ledger.unlogged[entry_id] = record.data
                locations = ledger.locations
                if entry_id == len(locations):  # the usual case: the next entry
                    locations.append(UNLOGGED)
                else:
                    # A second copy of an entry (re-replication, a writer's retry) replaces the
                    # first at once: reads get it from memory until its own location is known.
                    previous = ledger.put(entry_id, UNLOGGED)
                    if previous < UNLOGGED:
                        self.file_refs[previous >> OFFSET_BITS] -= 1
                if record.last_add_confirmed > ledger.last_add_confirmed:
                    ledger.last_add_confirmed = record.last_add_confirmed
                adds.append(record)
                size += len(record.data)
                continue
            ledger_id = -1  # a delete may drop the ledger looked up last
            if record.kind is RecordKind.FENCE:
                index.setdefault(record.ledger_id, LedgerIndex()).fenced = True
            elif record.kind is RecordKind.DELETE:
                dropped = index.pop(record.ledger_id, None)
                if dropped is not None:  # its unlogged entries go with it: their entry log copies are dead bytes
                    self.file_refs.subtract(loc >> OFFSET_BITS for loc in dropped.present())
        return adds, size

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
            # Not the copy awaited (its ledger was deleted, or a later copy replaced it): dead bytes.
            if ledger is None or ledger.unlogged.get(entry.entry_id) is not entry.data:
                continue
            del ledger.unlogged[entry.entry_id]
            ledger.locations[entry.entry_id] = location  # in place of UNLOGGED
            count = counts.get(file_ledger := (location >> OFFSET_BITS, ledger_id))
            if count is None:
                count = counts[file_ledger] = [0, 0]
            count[0] += 1
            count[1] += HEADER_SIZE + len(entry.data)
        for (file_id, of_ledger), (entries_in_file, size) in counts.items():
            self.file_refs[file_id] += entries_in_file
            self.usage.added(file_id, of_ledger, size)

    def lookup(self, ledger: LedgerIndex, first: int, last: int) -> list[Wanted]:
        """Entries first..last of the ledger up to the first one not held: each with its location,
        and its bytes if it is not in the entry log yet."""
        wanted: list[Wanted] = []
        unlogged = ledger.unlogged
        for entry_id in range(first, last + 1):
            location = ledger.get(entry_id)
            if location == MISSING:
                break
            wanted.append((entry_id, location, unlogged[entry_id] if location == UNLOGGED else None))
        return wanted

    def snapshot(self, journal_file_id: int) -> Snapshot:
        """The index as the entry log has it, for a checkpoint covering the journal before
        journal_file_id. Entries not logged yet are left out: they were journaled from that file on
        (everything before it is logged by now), so a restart replays them."""
        ledgers: dict[int, LedgerIndex] = {}
        for ledger_id, ledger in self.index.items():
            copy = ledgers[ledger_id] = ledger.copy()
            for entry_id in ledger.unlogged:
                copy.forget(entry_id)
        return Snapshot(journal_file_id, ledgers)

    def unreferenced(self, file_ids: list[int]) -> list[int]:
        return [i for i in file_ids if self.file_refs.get(i, 0) <= 0]

    def forget_files(self, file_ids: list[int]) -> None:
        for file_id in file_ids:
            self.file_refs.pop(file_id, None)
            self.usage.forget(file_id)
