"""The committed index in LMDB (index.lmdb/ in the data directory): where each entry of each ledger
is in the entry log, each ledger's LAC, fencing and last entry, the live entries per entry log
file, and the journal file a restart replays from.

LMDB rather than RocksDB: the index is written once per checkpoint (one write transaction) and read
far more often than written, point lookups and short ordered ranges; LMDB's copy-on-write B+tree
commits atomically with no log or compaction of its own (the journal already is the write-ahead
log), reads are memory-mapped with no cache to size, and py-lmdb is a small maintained binding with
wheels. Resident memory is the pages the kernel keeps mapped, not Python objects per entry.

Databases: `entries` keyed big-endian (ledger id, entry id) -> u64 location, so a ledger's entries
are contiguous and ordered; `ledgers` keyed big-endian ledger id -> (LAC, fenced, last entry id);
`meta`: `journal` -> the first journal file to replay, `f` + big-endian file id -> live entries.
Every checkpoint is one transaction, synced at commit: the entries, the ledgers and the journal
position it covers become durable together or not at all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from struct import Struct

import lmdb

from herald.common.errors import PersistenceError
from herald.storage.node.entry_log import OFFSET_BITS
from herald.storage.node.index import MISSING

DIRECTORY = "index.lmdb"
_ENTRY_KEY = Struct(">QQ")
_LEDGER_KEY = Struct(">Q")
_U64 = Struct(">Q")
_LEDGER_VALUE = Struct(">qBq")  # last add confirmed, fenced, last entry id held in `entries`
# ... and the writer's length at that entry (-1: unknown); a value of _LEDGER_VALUE alone was
# written before lengths were kept.
_LENGTH = Struct(">q")
_I64 = Struct(">q")
_JOURNAL_KEY = b"journal"
_FILE_PREFIX = b"f"


@dataclass(frozen=True, slots=True)
class LedgerMeta:
    last_entry_id: int
    last_add_confirmed: int
    fenced: bool
    length: int = -1  # the writer's length of the ledger up to last_entry_id, -1 if unknown


@dataclass(slots=True)
class CheckpointBatch:
    """What one checkpoint commits: ledgers whose key ranges go (applied first), then locations
    and ledger states, and the journal file from which a restart replays."""

    journal_file_id: int
    deleted: set[int] = field(default_factory=set)
    locations: dict[int, dict[int, int]] = field(default_factory=dict)
    ledgers: dict[int, LedgerMeta] = field(default_factory=dict)


class IndexDB:
    """One LMDB environment. Reads from any thread; commits from one thread at a time."""

    def __init__(self, path: Path, map_size: int) -> None:
        self.path = path
        self.map_size = map_size
        self._env: lmdb.Environment | None = None
        self._entries: lmdb._Database | None = None
        self._ledgers: lmdb._Database | None = None
        self._meta: lmdb._Database | None = None

    def open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            # sync: a commit (one per checkpoint) is fsynced; readahead off: lookups are random.
            env = lmdb.open(str(self.path), map_size=self.map_size, subdir=True, max_dbs=4, sync=True,
                            metasync=True, readahead=False, meminit=False, lock=True)
        except lmdb.Error as exc:
            raise PersistenceError(f"the index {self.path} could not be opened: {exc}; check the data "
                                   "directory's disk and permissions (or index_map_size)") from exc
        self._entries = env.open_db(b"entries")
        self._ledgers = env.open_db(b"ledgers")
        self._meta = env.open_db(b"meta")
        self._env = env

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    @property
    def env(self) -> lmdb.Environment:
        if self._env is None:
            raise PersistenceError(f"the index {self.path} is closed")
        return self._env

    # ---- reads ---------------------------------------------------------------------------------

    def journal_file_id(self) -> int | None:
        """The first journal file a restart replays, or None if nothing was ever committed."""
        with self.env.begin(db=self._meta) as txn:
            value = txn.get(_JOURNAL_KEY)
        return None if value is None else int(_I64.unpack(value)[0])

    def ledgers(self) -> dict[int, LedgerMeta]:
        """Every ledger held (a cursor over `ledgers`: one object per ledger, none per entry)."""
        found: dict[int, LedgerMeta] = {}
        with self.env.begin(db=self._ledgers) as txn:
            for key, value in txn.cursor():
                lac, fenced, last = _LEDGER_VALUE.unpack_from(value)
                length = _LENGTH.unpack_from(value, _LEDGER_VALUE.size)[0] if len(value) > _LEDGER_VALUE.size else -1
                found[_LEDGER_KEY.unpack(key)[0]] = LedgerMeta(last, lac, bool(fenced), length)
        return found

    def file_refs(self) -> Counter[int]:
        refs: Counter[int] = Counter()
        with self.env.begin(db=self._meta) as txn:
            cursor = txn.cursor()
            if cursor.set_range(_FILE_PREFIX):
                for key, value in cursor:
                    if not key.startswith(_FILE_PREFIX):
                        break
                    refs[_U64.unpack(key[1:])[0]] = _I64.unpack(value)[0]
        return refs

    def get(self, ledger_id: int, entry_id: int) -> int:
        """The committed location of the entry, or MISSING."""
        with self.env.begin(db=self._entries) as txn:
            value = txn.get(_ENTRY_KEY.pack(ledger_id, entry_id))
        return MISSING if value is None else int(_U64.unpack(value)[0])

    def range(self, ledger_id: int, first: int, last: int) -> dict[int, int]:
        """Committed locations of entries first..last of the ledger (those held), by entry id."""
        found: dict[int, int] = {}
        end = _ENTRY_KEY.pack(ledger_id, last)
        with self.env.begin(db=self._entries) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(_ENTRY_KEY.pack(ledger_id, first)):
                return found
            for key, value in cursor:
                if key > end:
                    break
                found[_ENTRY_KEY.unpack(key)[1]] = _U64.unpack(value)[0]
        return found

    def locations_in_file(self, ledger_id: int, file_id: int) -> list[tuple[int, int]]:
        """(entry id, location) of the ledger's committed entries that are in the entry log file."""
        low, high = file_id << OFFSET_BITS, (file_id + 1) << OFFSET_BITS
        found: list[tuple[int, int]] = []
        with self.env.begin(db=self._entries) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(_ENTRY_KEY.pack(ledger_id, 0)):
                return found
            for key, value in cursor:
                of_ledger, entry_id = _ENTRY_KEY.unpack(key)
                if of_ledger != ledger_id:
                    break
                location = _U64.unpack(value)[0]
                if low <= location < high:
                    found.append((entry_id, location))
        return found

    def reader(self) -> lmdb.Transaction:
        """A read transaction: the index as of now, for a worker thread to read later (abort it)."""
        return self.env.begin(db=self._entries)

    def count_files(self, reader: lmdb.Transaction, ledger_id: int, skip: set[int], counts: Counter[int]) -> None:
        """Add to counts the committed entries of the ledger per entry log file, but those in skip."""
        cursor = reader.cursor(db=self._entries)
        if not cursor.set_range(_ENTRY_KEY.pack(ledger_id, 0)):
            return
        for key, value in cursor:
            of_ledger, entry_id = _ENTRY_KEY.unpack(key)
            if of_ledger != ledger_id:
                return
            if entry_id not in skip:
                counts[_U64.unpack(value)[0] >> OFFSET_BITS] += 1

    # ---- the checkpoint's write ------------------------------------------------------------------

    def commit(self, batch: CheckpointBatch) -> None:
        """Apply the batch in one write transaction, fsynced at commit. Blocking: off the loop."""
        try:
            with self.env.begin(write=True) as txn:
                refs: Counter[int] = Counter()
                for ledger_id in batch.deleted:
                    self._delete_range(txn, ledger_id, refs)
                entries = txn.cursor(db=self._entries)
                for ledger_id, locations in batch.locations.items():
                    for entry_id, location in sorted(locations.items()):
                        old = entries.replace(_ENTRY_KEY.pack(ledger_id, entry_id), _U64.pack(location))
                        if old is not None:
                            refs[_U64.unpack(old)[0] >> OFFSET_BITS] -= 1
                        refs[location >> OFFSET_BITS] += 1
                for ledger_id, meta in batch.ledgers.items():
                    txn.put(_LEDGER_KEY.pack(ledger_id),
                            _LEDGER_VALUE.pack(meta.last_add_confirmed, meta.fenced, meta.last_entry_id)
                            + _LENGTH.pack(meta.length),
                            db=self._ledgers)
                for file_id, change in refs.items():
                    if change:
                        key = _FILE_PREFIX + _U64.pack(file_id)
                        old_count = txn.get(key, db=self._meta)
                        count = change + (0 if old_count is None else _I64.unpack(old_count)[0])
                        if count > 0:
                            txn.put(key, _I64.pack(count), db=self._meta)
                        else:
                            txn.delete(key, db=self._meta)
                txn.put(_JOURNAL_KEY, _I64.pack(batch.journal_file_id), db=self._meta)
        except lmdb.MapFullError as exc:
            raise PersistenceError(
                f"the index {self.path} is full (index_map_size {self.map_size} bytes): nothing of this "
                "checkpoint was committed and the journal keeps it; raise index_map_size and restart "
                "the node") from exc
        except lmdb.Error as exc:
            raise PersistenceError(f"the index {self.path} could not be written: {exc}; the journal keeps "
                                   "everything until a checkpoint succeeds") from exc

    def _delete_range(self, txn: lmdb.Transaction, ledger_id: int, refs: Counter[int]) -> None:
        txn.delete(_LEDGER_KEY.pack(ledger_id), db=self._ledgers)
        cursor = txn.cursor(db=self._entries)
        if not cursor.set_range(_ENTRY_KEY.pack(ledger_id, 0)):
            return
        while True:
            key = cursor.key()
            if not key or _ENTRY_KEY.unpack(key)[0] != ledger_id:
                return
            refs[_U64.unpack(cursor.value())[0] >> OFFSET_BITS] -= 1
            if not cursor.delete():  # moves to the next record
                return
