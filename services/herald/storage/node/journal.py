"""The journal: the append-only log that makes every add, fence and delete durable before it is answered.

Group commit: one writer thread takes every record queued since its last sync, writes them all with
one writev, fsyncs once, and only then completes their futures — concurrent adds share one fsync.
The journal alone makes an add durable: its future completes right after that fsync; the work the
ledger store does after it on the writer thread (the entry log write) comes after the answer, and
before the next group is written (so it needs no queue and no memory bound of its own).
Files rotate by size and at each checkpoint; the ledger store deletes the files a checkpoint covers.
On open, `replay` reads the files from the last checkpoint and truncates a torn tail (the partial
last record a SIGKILL or power loss leaves behind).

Disk full: before each group commit, the space check (storage.node.space) may refuse the batch's
adds (StorageFullError; its fences and deletes still go). A write or fsync failing with ENOSPC
answers none of its batch (StorageFullError), cuts the file back to where the batch began, and the
journal goes on; any other failure stops it for good (PersistenceError) until a restart.

File format: the 8-byte magic `HRLDJRN1`, then records, each a 40-byte header and the data:

    u32 data length | u8 kind | u8 flags | 2 pad | i64 ledger id | i64 entry id
    | i64 last add confirmed | u32 crc32c(data) | u32 crc32c(the 36 header bytes before it)

then, if flags has HAS_LENGTH (an add that carried the writer's length of the ledger up to it),
`i64 length | u32 crc32c(those 8 bytes)`. Files written before lengths have flags 0. All integers
little-endian. A record whose header, data or length fails its crc ends the readable journal.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from herald.common.codec.checksum import crc32c
from herald.common.errors import PersistenceError, ServiceNotReadyError, StorageFullError
from herald.storage.node.files import fsync_dir, numbered_files, write_all

if TYPE_CHECKING:
    from herald.storage.node.metrics import StorageMetrics

log = logging.getLogger(__name__)

FILE_MAGIC = b"HRLDJRN1"
SUFFIX = ".journal"
_HEAD = struct.Struct("<IBB2xqqqI")
_CRC = struct.Struct("<I")
HEADER_SIZE = _HEAD.size + _CRC.size
_LENGTH = struct.Struct("<q")
HAS_LENGTH = 1
LENGTH_SIZE = _LENGTH.size + _CRC.size


class RecordKind(enum.IntEnum):
    ADD = 1
    FENCE = 2
    DELETE = 3


_KINDS = frozenset(int(k) for k in RecordKind)


@dataclass(slots=True)
class JournalRecord:
    kind: RecordKind
    ledger_id: int
    entry_id: int = -1
    last_add_confirmed: int = -1
    data: bytes = b""
    # crc32c of data; computed on the writer thread when left at -1.
    data_crc: int = -1
    # An add's writer's length of the ledger up to and including it (-1: not given).
    length: int = -1


def encode_header(record: JournalRecord) -> bytes:
    flags = HAS_LENGTH if record.length >= 0 else 0
    head = _HEAD.pack(len(record.data), record.kind, flags, record.ledger_id, record.entry_id,
                      record.last_add_confirmed, record.data_crc)
    return head + _CRC.pack(crc32c(head))


def encode_length(record: JournalRecord) -> bytes:
    """What follows the data of a record with a length (none otherwise)."""
    if record.length < 0:
        return b""
    length = _LENGTH.pack(record.length)
    return length + _CRC.pack(crc32c(length))


def record_size(record: JournalRecord) -> int:
    return HEADER_SIZE + len(record.data) + (LENGTH_SIZE if record.length >= 0 else 0)


class SyncedBatchHandler(Protocol):
    """What the ledger store does with each batch once the journal holds it durably. Each step
    sees the batches in journal order."""

    def apply_synced(self, records: Sequence[JournalRecord]) -> None:
        """On the event loop, once the fsync covering records returned, before their futures resolve."""

    def write_synced(self, records: Sequence[JournalRecord]) -> object:
        """On the writer thread, after records were handed to the loop to be answered (e.g. write
        the entry log). A PersistenceError (or any error) fails the journal: records stay
        acknowledged (they are durable) and nothing more is accepted. Also called with no records
        before a rotation: then an error only fails that rotation."""

    def apply_written(self, records: Sequence[JournalRecord], outcome: object) -> None:
        """On the event loop, with write_synced's outcome: after apply_synced of the same batch."""


@dataclass(slots=True)
class _Pending:
    record: JournalRecord
    future: asyncio.Future[None]
    queued: float  # time.perf_counter() at append: the add latency starts here


@dataclass(slots=True)
class _Control:
    """A task for the writer thread between two batches: rotate the file, or stop."""

    action: Callable[[], object] | None  # None: stop the thread
    future: asyncio.Future[Any] | None


class Journal:
    """Group-commit journal over numbered files in one directory."""

    def __init__(self, directory: Path, handler: SyncedBatchHandler, *, max_file_size: int,
                 max_group_bytes: int, max_queued_bytes: int, metrics: StorageMetrics | None = None,
                 space_check: Callable[[int], str | None] | None = None, fsync_delay: float = 0.0) -> None:
        self._dir = directory
        self._handler = handler
        self._metrics = metrics  # add latency (on the loop), fsync latency and group sizes (writer thread)
        self._max_file_size = max_file_size
        self._max_group_bytes = max_group_bytes
        self._max_queued_bytes = max_queued_bytes
        # Called on the writer thread with the bytes of a batch's adds: why the disk cannot take them
        # (the adds are refused with StorageFullError), or None.
        self._space_check = space_check
        self._fsync_delay = fsync_delay  # fault injection: seconds slept before each fsync
        self._queue: queue.SimpleQueue[_Pending | _Control] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._file_id = 0
        self._file_size = 0
        self._failure: PersistenceError | None = None  # set once a write or fsync fails: fatal
        self._closing = False
        # Owned by the event loop: bytes queued and not yet completed, and who waits for room.
        self._queued_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        # Tests swap this to observe or hold a sync; fdatasync also persists the file's size.
        self._fsync: Callable[[int], None] = os.fdatasync
        # The last batch's write_synced outcome, not yet handed to the loop: it goes with the next
        # batch's completion (one wake-up of the loop per group, as before), or before a control
        # (a checkpoint's rotation, a compaction's copies, the stop). Until then the ledger store
        # serves that batch's entries from memory: one group at most.
        self._written: tuple[list[JournalRecord], object] | None = None
        # Counters (written by the writer thread, read anywhere): show that adds share fsyncs.
        self.fsync_count = 0
        self.record_count = 0
        self.refused_adds = 0  # refused by the space check (disk full)

    # ---- replay (before start, on a plain thread) -------------------------------------------

    def file_ids(self) -> list[int]:
        if not self._dir.is_dir():
            return []
        return sorted(numbered_files(self._dir, SUFFIX))

    def replay(self, first_file_id: int) -> Iterator[JournalRecord]:
        """Yield every record in files numbered first_file_id and after, in order.

        The last file may end in a torn record: it is truncated there. A bad record anywhere else
        means the disk lost data the journal had synced, and raises PersistenceError.
        """
        ids = [i for i in self.file_ids() if i >= first_file_id]
        for n, file_id in enumerate(ids):
            yield from self._replay_file(file_id, last=n == len(ids) - 1)

    def _replay_file(self, file_id: int, *, last: bool) -> Iterator[JournalRecord]:
        path = self._path(file_id)
        with open(path, "r+b") as f:
            magic = f.read(len(FILE_MAGIC))
            if magic != FILE_MAGIC:
                if last and FILE_MAGIC.startswith(magic):
                    # Created but never written before the crash: nothing in it.
                    log.warning("journal file %s has no header: removing it", path)
                    path.unlink()
                    fsync_dir(self._dir)
                    return
                raise PersistenceError(f"journal file {path} does not start with {FILE_MAGIC!r}: it is "
                                       "not a journal file or is damaged; restore the node's disk")
            offset = len(FILE_MAGIC)
            while True:
                record = self._read_record(f)
                if record is None:
                    break
                yield record
                offset += record_size(record)
            size = os.fstat(f.fileno()).st_size
            if offset == size:
                return
            if not last:
                raise PersistenceError(
                    f"journal file {path} is damaged at offset {offset} (not its last file, so "
                    "synced records were lost); restore the node's disk")
            log.warning("journal file %s ends in a torn record at offset %d (of %d bytes): truncating it",
                        path, offset, size)
            f.truncate(offset)
            os.fsync(f.fileno())

    @staticmethod
    def _read_record(f: BinaryIO) -> JournalRecord | None:
        """The next whole, intact record of f, or None at its end or at a torn or damaged record."""
        header = f.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE:
            return None
        head = header[: _HEAD.size]
        (stored_crc,) = _CRC.unpack_from(header, _HEAD.size)
        if crc32c(head) != stored_crc:
            return None
        length, kind, flags, ledger_id, entry_id, lac, data_crc = _HEAD.unpack(head)
        if kind not in _KINDS:
            return None
        data = f.read(length)
        if len(data) < length or crc32c(data) != data_crc:
            return None
        ledger_length = -1
        if flags & HAS_LENGTH:
            trailer = f.read(LENGTH_SIZE)
            if (len(trailer) < LENGTH_SIZE
                    or crc32c(trailer[:_LENGTH.size]) != _CRC.unpack_from(trailer, _LENGTH.size)[0]):
                return None
            (ledger_length,) = _LENGTH.unpack_from(trailer)
        return JournalRecord(RecordKind(kind), ledger_id, entry_id, lac, data, data_crc, ledger_length)

    # ---- running --------------------------------------------------------------------------

    async def open(self, min_file_id: int) -> None:
        """open_for_append on a worker thread, then start."""
        await asyncio.to_thread(self.open_for_append, min_file_id)
        self.start()

    def open_for_append(self, min_file_id: int) -> None:
        """Create the file to append to, numbered after every existing one and at least min_file_id
        (files before it were deleted by a checkpoint). Blocking: call it after replay."""
        self._dir.mkdir(parents=True, exist_ok=True)
        existing = self.file_ids()
        self._open_file(max(min_file_id, existing[-1] + 1 if existing else 1))

    def start(self) -> None:
        """Start the writer thread (on the event loop that will await the appends)."""
        if self._fd < 0:
            raise ServiceNotReadyError("the journal has no file to append to: call open_for_append first")
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._thread.start()

    @property
    def current_file_id(self) -> int:
        return self._file_id

    def problem(self) -> str | None:
        """Why the journal cannot take appends now (a failed write, not started, closing), or None."""
        if self._failure is not None:
            return f"the journal failed: {self._failure}"
        if self._closing or self._thread is None or not self._thread.is_alive():
            return "the journal is not open"
        return None

    def append(self, record: JournalRecord) -> asyncio.Future[None]:
        """Queue record; the future resolves once an fsync covers it (on the event loop thread)."""
        if self._closing or self._loop is None:
            raise ServiceNotReadyError("the storage node is stopping: retry on another node or later")
        if self._failure is not None:
            raise PersistenceError(str(self._failure))
        future: asyncio.Future[None] = self._loop.create_future()
        self._queued_bytes += len(record.data) + HEADER_SIZE
        if self._queued_bytes > self._max_queued_bytes:
            self._room.clear()
        self._queue.put(_Pending(record, future, time.perf_counter()))
        return future

    async def wait_for_room(self) -> None:
        """Wait while more than max_queued_bytes are queued (backpressure on writers)."""
        while not self._room.is_set():
            await self._room.wait()

    async def rotate(self, before: Callable[[], object]) -> tuple[int, object]:
        """Between two batches, call before() on the writer thread, then start a new file.

        Returns the new file's id and before()'s result. Every record queued earlier is in an older
        file and has been applied (apply_synced, write_synced, apply_written) by the time this
        returns.
        """
        def action() -> tuple[int, object]:
            if self._failure is not None:
                # What failed after its sync (an entry-log write) is acknowledged and only in these
                # files: no checkpoint may cover them; a restart replays them.
                raise self._failure
            # Adds a full disk held back from the entry log go first (raises while they do not fit).
            held_back = self._handler.write_synced(())
            if held_back is not None:
                self._call_soon(self._handler.apply_written, [], held_back)
            result = before()
            self._rotate_file()
            return self._file_id, result

        file_id, result = await self._control(action)
        return int(file_id), result

    async def call_on_writer(self, action: Callable[[], Any]) -> Any:
        """Run action on the writer thread between two batches (e.g. an entry log append that must
        not interleave with the adds'); returns its result, after every earlier batch was applied."""
        return await self._control(action)

    async def _control(self, action: Callable[[], Any]) -> Any:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            raise ServiceNotReadyError("the journal is not running")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._queue.put(_Control(action, future))
        return await future

    def delete_files_before(self, file_id: int) -> list[int]:
        """Remove the files older than file_id (a checkpoint covers them). Blocking."""
        removed = [i for i in self.file_ids() if i < file_id]
        for i in removed:
            self._path(i).unlink(missing_ok=True)
        if removed:
            fsync_dir(self._dir)
        return removed

    async def close(self) -> None:
        """Write and sync everything queued, then stop the writer thread and close the file."""
        if self._closing:
            return
        self._closing = True
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(_Control(None, None))
            await asyncio.to_thread(thread.join)
        self._close_file()

    # ---- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        batch: list[_Pending] = []
        while True:
            if self._written is not None and self._queue.empty():
                # Idle: the last batch's entry-log outcome goes to the loop now rather than with the
                # next batch's answers, so its bytes are not held in memory until more adds come.
                self._post_written()
            item: _Pending | _Control = self._queue.get()
            size = 0
            while True:
                if isinstance(item, _Control):
                    self._write_batch(batch)
                    batch = []
                    self._post_written()  # a control's result comes after every earlier batch applied
                    if item.action is None:
                        self._close_file()
                        return
                    self._run_control(item)
                else:
                    batch.append(item)
                    size += len(item.record.data) + HEADER_SIZE
                    if size >= self._max_group_bytes:
                        break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write_batch(batch)
            batch = []

    def _write_batch(self, batch: list[_Pending]) -> None:
        if not batch:
            return
        if self._failure is None and self._space_check is not None:
            batch = self._refuse_adds_if_full(batch)
            if not batch:
                return
        records = [p.record for p in batch]
        size_before = self._file_size
        try:
            if self._failure is not None:
                raise self._failure
            buffers: list[bytes] = []
            for record in records:
                if record.data_crc < 0:
                    record.data_crc = crc32c(record.data)
                buffers.append(encode_header(record))
                buffers.append(record.data)
                if record.length >= 0:
                    buffers.append(encode_length(record))
            written = write_all(self._fd, buffers)
            self._file_size += written
            started = time.perf_counter()
            if self._fsync_delay > 0:
                time.sleep(self._fsync_delay)  # fault injection (a slow disk): counted as fsync time
            self._fsync(self._fd)
            if self._metrics is not None:
                self._metrics.journal_fsync_latency.observe(time.perf_counter() - started)
                self._metrics.journal_group_records.observe(len(records))
                self._metrics.journal_group_bytes.observe(written)
            self.fsync_count += 1
            self.record_count += len(records)
        except Exception as exc:
            if _out_of_space(exc) and self._undo_write(size_before):
                # Disk full: nothing of this batch is acknowledged and the file is as it was, so
                # the journal goes on (the next batch tries again, or is refused by the space check).
                log.warning("journal %s: disk full (%s): %d records refused", self._path(self._file_id), exc,
                            len(batch))
                self.refused_adds += sum(1 for r in records if r.kind is RecordKind.ADD)
                self._call_soon(self._fail, batch, StorageFullError(
                    f"the storage node's disk is full (writing its journal failed: {exc}): nothing was kept; "
                    "write to another storage node, or free space on this one"))
                return
            # A failed write or fsync leaves the file in an unknown state (and Linux may forget the
            # failed pages): the journal accepts nothing more; a restart replays what is intact.
            if self._failure is None:
                log.exception("journal failure")
                self._failure = PersistenceError(
                    f"the journal could not write or sync {self._path(self._file_id)}: {exc}; "
                    "this storage node accepts no more writes until it is restarted")
            self._call_soon(self._fail, batch, self._failure)
            return
        if self._file_size >= self._max_file_size:
            try:
                self._rotate_file()
            except OSError as exc:  # e.g. disk full: keep appending to the current file
                log.warning("journal: could not start a new file (%s): the current one goes on", exc)
        # Durable: answered now, with what the previous batch's write_synced gave.
        previous, self._written = self._written, None
        self._call_soon(self._complete, batch, previous)
        try:
            self._written = (records, self._handler.write_synced(records))
        except Exception as exc:
            if self._failure is None:
                log.exception("failure after the journal's sync")
                self._failure = exc if isinstance(exc, PersistenceError) else PersistenceError(
                    f"the work after the journal's sync failed: {exc!r}; this storage node accepts no more "
                    "writes until it is restarted")

    def _refuse_adds_if_full(self, batch: list[_Pending]) -> list[_Pending]:
        """The batch without its adds if the space check finds the disk full (its fences and deletes
        still go: they are small, and what lets writers move away and space come back)."""
        assert self._space_check is not None
        add_bytes = sum(len(p.record.data) + HEADER_SIZE for p in batch if p.record.kind is RecordKind.ADD)
        problem = self._space_check(add_bytes) if add_bytes else None
        if problem is None:
            return batch
        refused = [p for p in batch if p.record.kind is RecordKind.ADD]
        self.refused_adds += len(refused)
        self._call_soon(self._fail, refused, StorageFullError(
            f"this storage node refuses adds: {problem}; write to another storage node (reads, fencing and "
            "deletes go on here, and adds are taken again once space returns)"))
        return [p for p in batch if p.record.kind is not RecordKind.ADD]

    def _undo_write(self, size: int) -> bool:
        """Cut the current file back to size (a write or fsync that failed for want of space may
        have left part of a batch) and sync that; False if even that fails."""
        try:
            os.ftruncate(self._fd, size)
            self._fsync(self._fd)
        except OSError:
            log.exception("journal: could not cut %s back to %d bytes after a failed write",
                          self._path(self._file_id), size)
            return False
        self._file_size = size
        return True

    def _post_written(self) -> None:
        written, self._written = self._written, None
        if written is not None:
            self._call_soon(self._handler.apply_written, *written)

    def _run_control(self, control: _Control) -> None:
        assert control.action is not None and control.future is not None
        try:
            result = control.action()
        except Exception as exc:
            self._call_soon(_set_exception, control.future, exc)
        else:
            self._call_soon(_set_result, control.future, result)

    def _call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _rotate_file(self) -> None:
        # The new file first: if it cannot be made (disk full), the current one stays open.
        old_fd = self._fd
        self._open_file(self._file_id + 1)
        os.close(old_fd)

    def _close_file(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _open_file(self, file_id: int) -> None:
        path = self._path(file_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            write_all(fd, [FILE_MAGIC])
            os.fsync(fd)
            fsync_dir(self._dir)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fd, self._file_id, self._file_size = fd, file_id, len(FILE_MAGIC)

    def _path(self, file_id: int) -> Path:
        return self._dir / f"{file_id:016d}{SUFFIX}"

    # ---- completions (on the event loop) ----------------------------------------------------

    def _complete(self, batch: list[_Pending], written: tuple[list[JournalRecord], object] | None) -> None:
        if written is not None:
            self._handler.apply_written(*written)
        self._release(batch)
        self._handler.apply_synced([p.record for p in batch])
        if self._metrics is not None:
            now, observe = time.perf_counter(), self._metrics.add_latency.observe
            for pending in batch:
                if pending.record.kind is RecordKind.ADD:
                    observe(now - pending.queued)
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(None)

    def _fail(self, batch: list[_Pending], error: Exception) -> None:
        self._release(batch)
        for pending in batch:
            if not pending.future.done():
                pending.future.set_exception(error)

    def _release(self, batch: list[_Pending]) -> None:
        self._queued_bytes -= sum(len(p.record.data) + HEADER_SIZE for p in batch)
        if self._queued_bytes <= self._max_queued_bytes:
            self._room.set()


def _out_of_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _set_result(future: asyncio.Future[Any], result: object) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
