"""The index markers (MISSING, UNLOGGED), and the snapshot format of releases before LMDB: read once
at start to migrate a data directory into LMDB (storage.node.index_db); save_snapshot writes one (tests).

Before LMDB, the index held what the node knows of each ledger — where each entry is in the entry log, the highest
last-add-confirmed its writer reported, and whether it is fenced.

Entry ids of a ledger are dense from 0, so a ledger's locations are one array('Q') indexed by
entry id (MISSING where this node holds no copy; UNLOGGED for an entry journaled, so held and
acknowledged, but not yet in the entry log: its bytes are kept in memory till then). A checkpoint
saves the whole index as one snapshot file, replaced atomically; start-up loads it and replays the
journal written since.

Snapshot format (little-endian): magic `HRLDIDX1` | i64 first journal file to replay | u32 ledgers,
then per ledger: i64 ledger id | i64 last add confirmed | u8 fenced | 7 pad | u64 n | n u64
locations; then u32 crc32c of everything before it.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from struct import Struct

import google_crc32c

from herald.common.codec.checksum import crc32c
from herald.common.errors import PersistenceError
from herald.storage.node.files import atomic_write

MISSING = (1 << 64) - 1
# Beyond any entry log location (file ids stop below 2**24 - 1), so never inside a file's range.
UNLOGGED = MISSING - 1
SNAPSHOT_MAGIC = b"HRLDIDX1"
SNAPSHOT_NAME = "index.snapshot"
_MISSING_BYTES = b"\xff" * 8

_SNAP_HEAD = Struct("<qI")
_LEDGER_HEAD = Struct("<qqB7xQ")
_CRC = Struct("<I")


@dataclass(slots=True)
class LedgerIndex:
    """One ledger as this node knows it."""

    locations: array[int] = field(default_factory=lambda: array("Q"))
    last_add_confirmed: int = -1
    fenced: bool = False
    # entry id -> the bytes of an UNLOGGED entry (the latest copy journaled): never in a snapshot.
    unlogged: dict[int, bytes] = field(default_factory=dict)

    @property
    def last_entry_id(self) -> int:
        """The highest entry id held, -1 if none (the array never ends in MISSING)."""
        return len(self.locations) - 1

    def get(self, entry_id: int) -> int:
        """The entry's location, or MISSING."""
        if 0 <= entry_id < len(self.locations):
            return self.locations[entry_id]
        return MISSING

    def put(self, entry_id: int, location: int) -> int:
        """Record the entry's location; return the location it replaces, or MISSING."""
        locations = self.locations
        gap = entry_id - len(locations)
        if gap >= 0:
            if gap:
                locations.frombytes(_MISSING_BYTES * gap)
            locations.append(location)
            return MISSING
        previous = locations[entry_id]
        locations[entry_id] = location
        return previous

    def present(self) -> Iterator[int]:
        """The entry log locations of the entries held (not those still unlogged)."""
        return (loc for loc in self.locations if loc < UNLOGGED)

    def forget(self, entry_id: int) -> None:
        """Mark the entry MISSING (then drop MISSING ones from the end: the array never ends in one)."""
        locations = self.locations
        if entry_id < len(locations):
            locations[entry_id] = MISSING
        while locations and locations[-1] == MISSING:
            locations.pop()

    def copy(self) -> LedgerIndex:
        return LedgerIndex(array("Q", self.locations), self.last_add_confirmed, self.fenced)


@dataclass(slots=True)
class Snapshot:
    """The index as of a checkpoint; the journal from `journal_file_id` on holds what came after."""

    journal_file_id: int
    ledgers: dict[int, LedgerIndex]


def save_snapshot(directory: Path, snapshot: Snapshot) -> None:
    """Write the snapshot atomically (temp file, fsync, rename, fsync the directory). Blocking."""
    buffers = [SNAPSHOT_MAGIC, _SNAP_HEAD.pack(snapshot.journal_file_id, len(snapshot.ledgers))]
    for ledger_id, ledger in sorted(snapshot.ledgers.items()):
        locations = ledger.locations
        if sys.byteorder != "little":
            locations = array("Q", locations)
            locations.byteswap()
        buffers.append(_LEDGER_HEAD.pack(ledger_id, ledger.last_add_confirmed, ledger.fenced, len(locations)))
        buffers.append(locations.tobytes())
    crc = 0
    for buffer in buffers:
        crc = google_crc32c.extend(crc, buffer)
    buffers.append(_CRC.pack(crc))
    atomic_write(directory / SNAPSHOT_NAME, buffers)


def load_snapshot(directory: Path) -> Snapshot | None:
    """The saved snapshot, or None if there is none yet. Blocking."""
    path = directory / SNAPSHOT_NAME
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return None
    view = memoryview(content)
    body_end = len(content) - _CRC.size
    if (len(content) < len(SNAPSHOT_MAGIC) + _SNAP_HEAD.size + _CRC.size
            or content[: len(SNAPSHOT_MAGIC)] != SNAPSHOT_MAGIC
            or crc32c(view[:body_end]) != _CRC.unpack_from(content, body_end)[0]):
        raise PersistenceError(f"index snapshot {path} is damaged (bad header or checksum); "
                               "restore the node's disk or rebuild the node from its peers")
    offset = len(SNAPSHOT_MAGIC)
    journal_file_id, count = _SNAP_HEAD.unpack_from(content, offset)
    offset += _SNAP_HEAD.size
    ledgers: dict[int, LedgerIndex] = {}
    for _ in range(count):
        ledger_id, lac, fenced, n = _LEDGER_HEAD.unpack_from(content, offset)
        offset += _LEDGER_HEAD.size
        locations = array("Q")
        locations.frombytes(view[offset: offset + 8 * n])
        if sys.byteorder != "little":
            locations.byteswap()
        offset += 8 * n
        ledgers[ledger_id] = LedgerIndex(locations, lac, bool(fenced))
    return Snapshot(journal_file_id, ledgers)
