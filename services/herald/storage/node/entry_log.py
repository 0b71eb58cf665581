"""The entry log: where entries live for reading, appended to numbered files that rotate by size.

The journal makes adds durable; the entry log is written after it (on the journal's writer thread)
and only fsynced at checkpoints, so adds never wait for it. Each entry is wrapped with the node's
own crc32c of its bytes: a read verifies it and raises ChecksumError rather than return bad data.

File format: the 8-byte magic `HRLDELG1`, then records, each a 28-byte header and the data:

    u32 data length | i64 ledger id | i64 entry id | u32 crc32c(data) | u32 crc32c(those 24 bytes)

A location packs (file id, offset of the record) into one u64: file id << 40 | offset. Files are
immutable once the log moves past them; deleted ledgers leave dead bytes in them, which compaction
(storage.node.compaction) reclaims by copying the live entries to the current file.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from herald.common.codec.checksum import crc32c
from herald.common.errors import ChecksumError, EntryNotFoundError
from herald.storage.node.files import fsync_dir, numbered_files, write_all

FILE_MAGIC = b"HRLDELG1"
SUFFIX = ".entrylog"
_HEAD = struct.Struct("<IqqI")
_CRC = struct.Struct("<I")
HEADER_SIZE = _HEAD.size + _CRC.size

OFFSET_BITS = 40
_OFFSET_MASK = (1 << OFFSET_BITS) - 1
MAX_FILE_ID = (1 << (64 - OFFSET_BITS)) - 2  # the all-ones location means "missing" in the index
# One pread fetches the header and this many bytes after it: most entries need no second read.
_READ_AHEAD = 16 * 1024


# read_run: at most this many bytes between the first and the last entry of a run, and at most
# RUN_MAX_GAP between two of its entries (other ledgers' entries in between are read and skipped).
RUN_MAX_SPAN = 1024 * 1024
RUN_MAX_GAP = 256 * 1024


def _decode(chunk: bytes, at: int, fd: int, file_id: int, offset: int, ledger_id: int,
            entry_id: int) -> tuple[bytes, int]:
    """The entry whose record starts at chunk[at] (file offset `offset`) and its stored crc32c,
    after checking it is (ledger_id, entry_id) and intact; its data is read apart when the chunk
    holds only its start."""
    where = f"entry {entry_id} of ledger {ledger_id} in entry log file {file_id} at offset {offset}"
    if len(chunk) < at + HEADER_SIZE:
        raise ChecksumError(f"{where} is cut short: the entry log file is truncated")
    head = chunk[at: at + _HEAD.size]
    (stored_crc,) = _CRC.unpack_from(chunk, at + _HEAD.size)
    if crc32c(head) != stored_crc:
        raise ChecksumError(f"{where} is corrupt: its header fails its checksum")
    length, stored_ledger, stored_entry, data_crc = _HEAD.unpack(head)
    if (stored_ledger, stored_entry) != (ledger_id, entry_id):
        raise ChecksumError(f"{where} holds entry {stored_entry} of ledger {stored_ledger} "
                            "instead: the index is corrupt")
    start = at + HEADER_SIZE
    # A small entry was read with its header; a large one is read whole, straight into its own
    # bytes (no slice, no concatenation).
    in_chunk = len(chunk) >= start + length
    data = chunk[start: start + length] if in_chunk else os.pread(fd, length, offset + HEADER_SIZE)
    if len(data) < length:
        raise ChecksumError(f"{where} is cut short: the entry log file is truncated")
    actual = crc32c(data)
    if actual != data_crc:
        raise ChecksumError(f"{where} is corrupt: its data checksum is {actual:#010x}, "
                            f"{data_crc:#010x} was stored; read it from another storage node")
    return data, data_crc


def pack_location(file_id: int, offset: int) -> int:
    return (file_id << OFFSET_BITS) | offset


def unpack_location(location: int) -> tuple[int, int]:
    return location >> OFFSET_BITS, location & _OFFSET_MASK


class Entry(Protocol):
    """An entry to append (the journal's add records are ones)."""

    @property
    def ledger_id(self) -> int: ...
    @property
    def entry_id(self) -> int: ...
    @property
    def data(self) -> bytes: ...
    @property
    def data_crc(self) -> int: ...


@dataclass(slots=True)
class EntryToWrite:
    ledger_id: int
    entry_id: int
    data: bytes
    data_crc: int


class EntryLogFileGone(EntryNotFoundError):
    """The entry log file a location points into was deleted (its ledger was deleted, or the file
    was compacted after the location was looked up: look it up again)."""


@dataclass(slots=True)
class _Reader:
    fd: int
    refs: int = 0
    retired: bool = False  # the file was deleted: close the fd when the last reader is done


class EntryLog:
    """Numbered entry log files in one directory; appends from one thread, reads from any."""

    def __init__(self, directory: Path, *, max_file_size: int) -> None:
        self._dir = directory
        self._max_file_size = max_file_size
        self._lock = threading.Lock()
        self._files: set[int] = set()
        # Files open for writing: the current one and rotated ones not yet fsynced by a checkpoint.
        self._writers: dict[int, int] = {}
        self._current = 0
        self._size = 0
        self._readers: dict[int, _Reader] = {}

    def open(self) -> None:
        """Find the existing files and start a new one: a restart never appends to an old file."""
        self._dir.mkdir(parents=True, exist_ok=True)
        self._files = set(numbered_files(self._dir, SUFFIX))
        self._new_file(max(self._files, default=0) + 1)

    def close(self) -> None:
        with self._lock:
            for fd in self._writers.values():
                os.close(fd)
            self._writers.clear()
            for reader in self._readers.values():
                reader.retired = True
                if reader.refs == 0:
                    os.close(reader.fd)
            self._readers.clear()

    @property
    def current_file_id(self) -> int:
        return self._current

    def file_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._files)

    def sealed_file_ids(self) -> list[int]:
        """Files no longer written (nor waiting for a checkpoint's fsync): their bytes are final."""
        with self._lock:
            return sorted(i for i in self._files if i not in self._writers)

    def file_size(self, file_id: int) -> int:
        """The file's size in bytes, its header included. Any thread."""
        return self._path(file_id).stat().st_size

    # ---- writing (the journal's writer thread, or recovery before it starts) ----------------

    def append(self, entries: Sequence[Entry]) -> list[int]:
        """Append entries (not synced); return their locations."""
        if self._size >= self._max_file_size:
            self._new_file(self._current + 1)
        buffers: list[bytes] = []
        locations: list[int] = []
        offset = self._size
        for entry in entries:
            head = _HEAD.pack(len(entry.data), entry.ledger_id, entry.entry_id, entry.data_crc)
            buffers.append(head + _CRC.pack(crc32c(head)))
            buffers.append(entry.data)
            locations.append(pack_location(self._current, offset))
            offset += HEADER_SIZE + len(entry.data)
        fd = self._writers[self._current]
        try:
            self._size += write_all(fd, buffers)
        except OSError:
            # A write cut short (disk full) must leave no partial entry where the next one goes.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            raise
        return locations

    def _new_file(self, file_id: int) -> None:
        if file_id > MAX_FILE_ID:
            raise OSError(f"entry log file ids are exhausted ({file_id} > {MAX_FILE_ID})")
        fd = os.open(self._path(file_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            write_all(fd, [FILE_MAGIC])
        except OSError:  # disk full: no half-made file (the next attempt creates it again)
            os.close(fd)
            self._path(file_id).unlink(missing_ok=True)
            raise
        with self._lock:
            self._writers[file_id] = fd
            self._files.add(file_id)
            self._current, self._size = file_id, len(FILE_MAGIC)

    def open_for_writing(self) -> list[int]:
        """The files that may hold unsynced writes (call on the writer thread, for a checkpoint)."""
        with self._lock:
            return sorted(self._writers)

    def sync(self, file_ids: Sequence[int]) -> None:
        """Fsync file_ids (from open_for_writing), then close those no longer written. Any thread.

        Only the checkpoint calls this, one at a time, so the fds stay open while it runs.
        """
        with self._lock:
            fds = [(i, self._writers[i]) for i in file_ids if i in self._writers]
        for _, fd in fds:
            os.fdatasync(fd)
        fsync_dir(self._dir)
        with self._lock:
            for file_id, fd in fds:
                if file_id != self._current:
                    del self._writers[file_id]
                    os.close(fd)

    def delete_files(self, file_ids: Sequence[int]) -> list[int]:
        """Delete files no longer referenced (never one still open for writing). Any thread."""
        deleted: list[int] = []
        with self._lock:
            for file_id in file_ids:
                if file_id in self._writers or file_id not in self._files:
                    continue
                self._files.discard(file_id)
                reader = self._readers.pop(file_id, None)
                if reader is not None:
                    reader.retired = True
                    if reader.refs == 0:
                        os.close(reader.fd)
                self._path(file_id).unlink(missing_ok=True)
                deleted.append(file_id)
        if deleted:
            fsync_dir(self._dir)
        return deleted

    # ---- reading (any thread) ---------------------------------------------------------------

    def read(self, location: int, ledger_id: int, entry_id: int) -> bytes:
        """The entry at location, after checking it is (ledger_id, entry_id) and intact."""
        return self.read_record(location, ledger_id, entry_id)[0]

    def read_record(self, location: int, ledger_id: int, entry_id: int) -> tuple[bytes, int]:
        """The entry at location and its stored crc32c, checked as read() checks it."""
        file_id, offset = unpack_location(location)
        reader = self._acquire(file_id, ledger_id, entry_id)
        try:
            chunk = os.pread(reader.fd, HEADER_SIZE + _READ_AHEAD, offset)
            return _decode(chunk, 0, reader.fd, file_id, offset, ledger_id, entry_id)
        finally:
            self._release(reader)

    def read_run(self, ledger_id: int, run: Sequence[tuple[int, int]]) -> list[bytes]:
        """Entries (entry id, location) of one ledger in one file at ascending offsets, read with
        one pread from the first to just past the last (a catch-up read: its entries are mostly
        adjacent), each checked as read() checks it. Callers keep the span small (RUN_MAX_SPAN)."""
        file_id, first = unpack_location(run[0][1])
        last = unpack_location(run[-1][1])[1]
        reader = self._acquire(file_id, ledger_id, run[0][0])
        try:
            block = os.pread(reader.fd, last - first + HEADER_SIZE + _READ_AHEAD, first)
            return [_decode(block, unpack_location(location)[1] - first, reader.fd, file_id,
                            unpack_location(location)[1], ledger_id, entry_id)[0]
                    for entry_id, location in run]
        finally:
            self._release(reader)

    def _acquire(self, file_id: int, ledger_id: int, entry_id: int) -> _Reader:
        with self._lock:
            reader = self._readers.get(file_id)
            if reader is None:
                try:
                    fd = os.open(self._path(file_id), os.O_RDONLY)
                except FileNotFoundError:
                    raise EntryLogFileGone(
                        f"entry {entry_id} of ledger {ledger_id}: its entry log file {file_id} is gone "
                        "(the ledger was deleted, or the file compacted)") from None
                reader = self._readers[file_id] = _Reader(fd)
            reader.refs += 1
            return reader

    def scan(self, file_id: int) -> dict[int, int]:
        """Bytes per ledger in a sealed file, read from its record headers (for files found at
        start-up, whose usage was not seen being written). Stops at the first damaged header: what
        follows is a torn tail no index points into. Any thread."""
        usage: dict[int, int] = {}
        with open(self._path(file_id), "rb", buffering=1024 * 1024) as f:
            if f.read(len(FILE_MAGIC)) != FILE_MAGIC:
                return usage
            while len(header := f.read(HEADER_SIZE)) == HEADER_SIZE:
                head = header[: _HEAD.size]
                if crc32c(head) != _CRC.unpack_from(header, _HEAD.size)[0]:
                    break
                length, ledger_id, _, _ = _HEAD.unpack(head)
                usage[ledger_id] = usage.get(ledger_id, 0) + HEADER_SIZE + length
                f.seek(length, os.SEEK_CUR)
        return usage

    def _release(self, reader: _Reader) -> None:
        with self._lock:
            reader.refs -= 1
            if reader.retired and reader.refs == 0:
                os.close(reader.fd)

    def _path(self, file_id: int) -> Path:
        return self._dir / f"{file_id:010d}{SUFFIX}"


def one_read_run(wanted: Sequence[tuple[int, int, bytes | None]], i: int, room: int) -> list[tuple[int, int]]:
    """The (entry id, location)s from wanted[i] on that one pread reads (EntryLog.read_run): logged,
    in one file, at ascending offsets each at most RUN_MAX_GAP after the last, within RUN_MAX_SPAN and
    `room` bytes. `wanted` holds (entry id, location, bytes still in memory or None)."""
    first_file, first = unpack_location(wanted[i][1])
    span = min(RUN_MAX_SPAN, room)
    run = [(wanted[i][0], wanted[i][1])]
    previous = first
    for entry_id, location, in_memory in wanted[i + 1:]:
        file_id, offset = unpack_location(location)
        if (in_memory is not None or file_id != first_file or offset <= previous
                or offset - previous > RUN_MAX_GAP or offset - first > span):
            break
        run.append((entry_id, location))
        previous = offset
    return run
