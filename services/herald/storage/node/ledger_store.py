"""The ledger store: the storage node's core, tying the journal, entry log and index together.

An add is checked against fencing, queued to the journal and answered once the journal's fsync
covers it: the journal alone makes it durable. Only then, off the acknowledgement path, does the
journal's writer thread append it to the entry log, and the event loop records its location in
the index (batch after batch, in journal order, so the live state and a replay agree:
storage.ledgers). Reads go index -> entry log, or to the bytes in memory of an entry not logged
yet, never to the journal. A checkpoint makes the entry log durable, commits what changed in the
index (locations, fencing, LACs, and the journal position it covers) to LMDB in one transaction
(storage.node.index_db) and deletes the journal files it covers; a restart opens LMDB and replays
only the journal written after that position (idempotently: a crash between the commit and the
deletes replays records whose effects LMDB already has). Entry log files with no live entry are
deleted at checkpoints, and mostly-dead ones compacted (storage.node.compaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from herald.common.errors import (
    EntryNotFoundError,
    FencedError,
    InvalidArgumentError,
    LedgerNotFoundError,
    ServiceNotReadyError,
)
from herald.storage.node.compaction import CompactionStats, FileCompaction
from herald.storage.node.entry_log import (
    FILE_MAGIC,
    EntryLog,
    EntryLogFileGone,
    one_read_run,
)
from herald.storage.node.index import MISSING, SNAPSHOT_NAME, load_snapshot
from herald.storage.node.index_db import DIRECTORY as INDEX_DIRECTORY
from herald.storage.node.index_db import CheckpointBatch, IndexDB, LedgerMeta
from herald.storage.node.journal import Journal, JournalRecord, RecordKind
from herald.storage.node.ledgers import Ledgers, LedgerState, Wanted
from herald.storage.node.metrics import StorageReading
from herald.storage.node.settings import StorageSettings
from herald.storage.node.space import SPACE_REFRESH_INTERVAL, DiskSpace, EntryLogAppender

if TYPE_CHECKING:
    from herald.storage.node.metrics import StorageMetrics

log = logging.getLogger(__name__)

# Index lookups done on the event loop per read step; the entry log reads them on a worker thread.
_READ_LOOKUP_BATCH = 1024
# Replay hands the entry log this many records at a time.
_REPLAY_BATCH = 1024
# No read response chunk is larger than this, whatever the client asks (gRPC caps messages at 64 MiB).
_MAX_READ_CHUNK = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    """What open() found: whether a committed index was there and how much journal it replayed."""

    snapshot_loaded: bool  # an index committed by a checkpoint (LMDB, or a migrated snapshot)
    journal_first_file_id: int
    records_replayed: int
    adds_replayed: int


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    last_entry_id: int  # -1 if no entry is held
    last_add_confirmed: int  # -1 if the writer never reported one
    fenced: bool
    length: int = -1  # the writer's length of the ledger up to last_entry_id, -1 if unknown


class LedgerStore:
    """Durable storage of ledger entries on one node's disk. Use from one event loop."""

    def __init__(self, settings: StorageSettings, metrics: StorageMetrics | None = None) -> None:
        self._settings = settings
        self._metrics = metrics
        self._root = Path(settings.data_dir)
        self._entry_log = EntryLog(self._root / "entrylog", max_file_size=settings.entry_log_max_size)
        self.space = DiskSpace(self._root, max_data_bytes=settings.max_data_bytes,
                               min_free_bytes=settings.min_free_bytes)
        self._appender = EntryLogAppender(self._entry_log)
        self._journal = Journal(
            self._root / "journal", self,
            max_file_size=settings.journal_file_max_size,
            max_group_bytes=settings.journal_max_group_bytes,
            max_queued_bytes=settings.journal_max_queued_bytes, metrics=metrics,
            space_check=self.space.check, fsync_delay=settings.fault_fsync_delay_ms / 1000,
        )
        self._index_db = IndexDB(self._root / INDEX_DIRECTORY, settings.index_map_size)
        self._ledgers = Ledgers(self._index_db)
        self._dirty = False  # something was journaled since the last checkpoint
        self._state: Literal["new", "open", "closing", "closed"] = "new"
        self._checkpoint_lock = asyncio.Lock()
        self._persist_lock = threading.Lock()  # a cancelled checkpoint's thread may still be running
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._compaction_task: asyncio.Task[None] | None = None
        self._early_checkpoint: asyncio.Task[None] | None = None
        self._space_task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self.checkpoint_count = 0
        # For metrics: entries made durable and read, adds refused as fenced.
        self.entries_written = self.bytes_written = 0
        self.entries_read = self.bytes_read = 0
        self.fenced_adds = 0
        self.recovery: RecoveryStats | None = None

    @property
    def journal(self) -> Journal:
        return self._journal

    @property
    def entry_log(self) -> EntryLog:
        return self._entry_log

    # ---- life cycle ---------------------------------------------------------------------------

    async def open(self) -> RecoveryStats:
        """Open the index, replay the journal after it, checkpoint, and start serving."""
        if self._state != "new":
            raise ServiceNotReadyError(f"the ledger store is {self._state}: open it once")
        try:
            stats = await asyncio.to_thread(self._recover)
        except BaseException:
            self._state = "closed"
            await self._journal.close()
            await asyncio.to_thread(self._entry_log.close)
            self._index_db.close()
            self._closed.set()
            raise
        self.recovery = stats
        self.entries_written = self.bytes_written = 0  # replayed entries were written before the restart
        self._journal.start()
        self._state = "open"
        try:
            if stats.records_replayed:
                await self.checkpoint()  # so the next start need not replay it again
        except BaseException:
            await self.close(checkpoint=False)
            raise
        self._checkpoint_task = asyncio.create_task(self._checkpoint_loop(), name="storage-checkpoints")
        if self._settings.compaction_threshold > 0 and self._settings.compaction_interval > 0:
            self._compaction_task = asyncio.create_task(self._compaction_loop(), name="storage-compaction")
        if self.space.capped:
            self._space_task = asyncio.create_task(self.space.watch(SPACE_REFRESH_INTERVAL), name="storage-space")
        log.info("ledger store open in %s: %s", self._root, stats)
        return stats

    async def close(self, *, checkpoint: bool = True) -> None:
        """Finish queued writes, checkpoint (unless told not to), and close every file. Idempotent.

        checkpoint=False leaves the journal to be replayed, as after a crash (tests use it).
        """
        if self._state in ("closing", "closed"):
            await self._closed.wait()
            return
        opened = self._state == "open"
        self._state = "closing"
        try:
            for task in (self._compaction_task, self._checkpoint_task, self._early_checkpoint, self._space_task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if opened and checkpoint:
                try:
                    await self.checkpoint()
                except Exception:
                    log.exception("final checkpoint failed: the journal will be replayed at start")
            await self._journal.close()
            await asyncio.to_thread(self._entry_log.close)
            await asyncio.to_thread(self._close_index)
        finally:
            self._state = "closed"
            self._closed.set()

    def problem(self) -> str | None:
        """Why the store cannot take adds now (not open, its journal stopped or failed), or None."""
        if self._state != "open":
            return f"the ledger store is {self._state}"
        return self._journal.problem()

    def _check_open(self) -> None:
        if self._state != "open":
            raise ServiceNotReadyError(f"the storage node is {self._state}: retry later or on another node")

    # ---- adds, fencing, deletes ---------------------------------------------------------------

    async def add_entry(self, ledger_id: int, entry_id: int, data: bytes, *,
                        last_add_confirmed: int = -1, recovery: bool = False, length: int = -1) -> None:
        """Store an entry; returns once it is durable (journal fsynced)."""
        await (await self.begin_add(ledger_id, entry_id, data, last_add_confirmed=last_add_confirmed,
                                    recovery=recovery, length=length))

    async def begin_add(self, ledger_id: int, entry_id: int, data: bytes, *,
                        last_add_confirmed: int = -1, recovery: bool = False,
                        length: int = -1) -> asyncio.Future[None]:
        """Queue an add (waiting only while the journal is full) and return the future of its fsync.

        Raises at once, without queueing, if the ledger is fenced (and this is no recovery add) or
        the request is invalid. Adds begun in order complete in order.
        """
        await self._journal.wait_for_room()
        self._check_open()
        _check_id("ledger id", ledger_id)
        _check_id("entry id", entry_id)
        ledger = self._ledgers.index.get(ledger_id)
        last = -1 if ledger is None else ledger.last_entry_id
        if ledger is not None and ledger.fenced and not recovery:
            self.fenced_adds += 1
            raise FencedError(f"ledger {ledger_id} is fenced: a newer writer took it over, so this "
                              "writer must stop (only recovery adds are accepted)")
        if entry_id > last + self._settings.max_entry_id_gap:
            raise InvalidArgumentError(
                f"entry id {entry_id} of ledger {ledger_id} is too far past the last entry held ({last}): "
                f"entry ids of a ledger are dense (at most {self._settings.max_entry_id_gap} ahead)")
        record = JournalRecord(RecordKind.ADD, ledger_id, entry_id, last_add_confirmed, data, length=length)
        return self._journal.append(record)

    async def fence(self, ledger_id: int) -> int:
        """Fence the ledger durably (later adds fail with FencedError); return its last entry id."""
        self._check_open()
        _check_id("ledger id", ledger_id)
        # Fence at once so no later add gets in; the journal record makes it survive a restart.
        self._ledgers.fence(ledger_id)
        await self._journal.append(JournalRecord(RecordKind.FENCE, ledger_id))
        ledger = self._ledgers.index.get(ledger_id)
        return -1 if ledger is None else ledger.last_entry_id

    async def delete_ledger(self, ledger_id: int) -> None:
        """Drop the ledger's entries, LAC and fencing durably (a no-op for an unknown ledger)."""
        self._check_open()
        _check_id("ledger id", ledger_id)
        await self._journal.append(JournalRecord(RecordKind.DELETE, ledger_id))

    # ---- the journal's handler --------------------------------------------------------------

    def apply_synced(self, records: Sequence[JournalRecord]) -> None:
        """On the event loop, in journal order, once the journal holds records durably (before
        their adds are answered): the index takes them; their bytes serve reads until logged."""
        adds, size = self._ledgers.journaled(records)
        self.entries_written += len(adds)
        self.bytes_written += size
        self._dirty = True
        if (self._ledgers.overlay_added >= self._settings.index_overlay_max_entries and self._state == "open"
                and (self._early_checkpoint is None or self._early_checkpoint.done())):
            # The overlay holds a Python object per entry changed: bound it, whatever the interval.
            self._early_checkpoint = asyncio.create_task(self._checkpoint_early(), name="storage-early-checkpoint")

    async def _checkpoint_early(self) -> None:
        try:
            await self.checkpoint()
        except Exception:
            log.exception("early checkpoint (index overlay full) failed; the journal keeps everything till the next")

    def write_synced(self, records: Sequence[JournalRecord]) -> object:
        """On the journal's writer thread, after the batch was handed to the loop to be answered:
        append its adds to the entry log (storage.node.space.EntryLogAppender: a full disk holds
        them back in memory). Returns the adds and their locations, or None."""
        return self._appender.append(records)

    def apply_written(self, records: Sequence[JournalRecord], outcome: object) -> None:
        """On the event loop, in journal order: the index points at the entry log copies."""
        if outcome is not None:
            adds, locations = cast("tuple[list[JournalRecord], list[int]]", outcome)
            self._ledgers.logged(adds, locations)

    # ---- reads --------------------------------------------------------------------------------

    def ledger_ids(self) -> list[int]:
        """The ledgers held here (the garbage collector compares them with the metadata store)."""
        return list(self._ledgers.index)

    def ledger_counts(self) -> tuple[int, int]:
        """Ledgers held here, and how many of them are fenced (for metrics)."""
        ledgers = self._ledgers.index
        return len(ledgers), sum(1 for ledger in ledgers.values() if ledger.fenced)

    def reading(self) -> StorageReading:
        """The counters and ledger counts the metrics report. On the event loop."""
        ledgers, fenced = self.ledger_counts()
        return StorageReading(self.entries_written, self.bytes_written, self.entries_read, self.bytes_read,
                              self.fenced_adds, self.checkpoint_count, ledgers, fenced, self._journal.refused_adds)

    def ledger_info(self, ledger_id: int) -> LedgerInfo:
        """Last entry held, LAC and fencing of a ledger (-1, -1, False if unknown here)."""
        _check_id("ledger id", ledger_id)
        ledger = self._ledgers.index.get(ledger_id)
        if ledger is None:
            return LedgerInfo(-1, -1, False)
        return LedgerInfo(ledger.last_entry_id, ledger.last_add_confirmed, ledger.fenced, ledger.length)

    def last_entry_id(self, ledger_id: int) -> int:
        return self.ledger_info(ledger_id).last_entry_id

    def last_add_confirmed(self, ledger_id: int) -> int:
        return self.ledger_info(ledger_id).last_add_confirmed

    async def read_entries(self, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
                           max_bytes: int = 0) -> AsyncIterator[list[tuple[int, bytes]]]:
        """Entries first..last (inclusive) as (entry id, data) chunks of at most max_bytes each (a
        larger entry comes alone). Stops early at the first entry not held after the first one.

        Raises LedgerNotFoundError / EntryNotFoundError if the ledger or the first entry is not
        here, ChecksumError if an entry on disk is damaged (its bytes are never returned).
        """
        self._check_open()
        _check_id("ledger id", ledger_id)
        _check_id("first entry id", first_entry_id)
        if last_entry_id < first_entry_id:
            raise InvalidArgumentError(f"read of ledger {ledger_id}: last entry id {last_entry_id} is "
                                       f"before first entry id {first_entry_id}")
        if max_bytes < 0:
            raise InvalidArgumentError(f"read of ledger {ledger_id}: max_bytes {max_bytes} is negative")
        max_bytes = min(max_bytes or self._settings.read_chunk_max_bytes, _MAX_READ_CHUNK)
        ledger = self._ledger_or_raise(ledger_id)
        if ledger.get(first_entry_id) == MISSING:
            raise EntryNotFoundError(f"entry {first_entry_id} of ledger {ledger_id} is not on this storage "
                                     f"node (the last entry it holds is {ledger.last_entry_id})")
        next_id = first_entry_id
        carried: tuple[int, bytes] | None = None
        while True:
            ledger = self._ledger_or_raise(ledger_id)
            wanted = self._ledgers.lookup(ledger, next_id, min(last_entry_id, next_id + _READ_LOOKUP_BATCH - 1))
            if not wanted and carried is None:
                return
            started = time.perf_counter()
            if all(data is not None for _, _, data in wanted):
                # Not in the entry log yet (a tailing read): from memory, without a thread.
                chunk, carried = self._read_chunk(ledger_id, wanted, max_bytes, carried)
            else:
                try:
                    chunk, carried = await asyncio.to_thread(self._read_chunk, ledger_id, wanted, max_bytes,
                                                             carried)
                except EntryLogFileGone:
                    # Compaction moved the entries and deleted their old file after the lookup: look
                    # them up again. Unmoved entries in a deleted file are a deleted ledger's: an error.
                    current = self._ledger_or_raise(ledger_id)
                    if all(current.get(entry_id) == location for entry_id, location, _ in wanted):
                        raise
                    continue
            self._count_read(chunk, started)
            yield chunk
            next_id = (chunk[-1] if carried is None else carried)[0] + 1

    def _count_read(self, chunk: list[tuple[int, bytes]], started: float) -> None:
        self.entries_read += len(chunk)
        self.bytes_read += sum(len(data) for _, data in chunk)
        if self._metrics is not None:
            self._metrics.read_latency.observe(time.perf_counter() - started)

    def _ledger_or_raise(self, ledger_id: int) -> LedgerState:
        ledger = self._ledgers.index.get(ledger_id)
        if ledger is None:
            raise LedgerNotFoundError(f"ledger {ledger_id} is not on this storage node")
        return ledger

    def _read_chunk(self, ledger_id: int, wanted: list[Wanted], max_bytes: int,
                    carried: tuple[int, bytes] | None,
                    ) -> tuple[list[tuple[int, bytes]], tuple[int, bytes] | None]:
        """Read wanted entries (on a worker thread, unless all are in memory) until max_bytes;
        return them and the first one that did not fit. Entries near each other in one entry log
        file are read together, one pread per run (EntryLog.read_run)."""
        chunk = [carried] if carried is not None else []
        size = len(carried[1]) if carried is not None else 0
        i = 0
        while i < len(wanted):
            entry_id, location, in_memory = wanted[i]
            if in_memory is not None:
                got = [in_memory]
            else:
                run = one_read_run(wanted, i, max(max_bytes - size, 0))
                got = (self._entry_log.read_run(ledger_id, run) if len(run) > 1
                       else [self._entry_log.read(location, ledger_id, entry_id)])
            for data in got:
                entry_id = wanted[i][0]
                i += 1
                if chunk and size + len(data) > max_bytes:
                    return chunk, (entry_id, data)
                chunk.append((entry_id, data))
                size += len(data)
        return chunk, None

    # ---- checkpoints and recovery -------------------------------------------------------------

    async def checkpoint(self) -> bool:
        """Make everything journaled so far durable without the journal, and drop the journal files
        that only held it. Returns False if there was nothing new to checkpoint."""
        async with self._checkpoint_lock:
            return await self._checkpoint()

    async def _checkpoint(self) -> bool:
        self._check_open_or_closing()
        await self._count_dropped()
        if not self._dirty:
            # LMDB matches the index: entry log files it leaves unreferenced (say,
            # after a crash between a compaction's commit and its delete) can go at once.
            unreferenced = self._ledgers.unreferenced(self._entry_log.sealed_file_ids())
            if unreferenced:
                await asyncio.to_thread(self._delete_entry_logs, unreferenced)
                self._ledgers.forget_files(unreferenced)
            return False
        self._dirty = False
        try:
            journal_file_id, open_logs = await self._journal.rotate(self._entry_log.open_for_writing)
            assert isinstance(open_logs, list)
            # Every record in the journal files before journal_file_id is applied and in the entry
            # log by now (entries journaled since may not be: the batch leaves them out).
            batch = self._ledgers.checkpoint_batch(journal_file_id)
            # Files older than the one being written then get no new entries.
            writing = max(open_logs)
            unreferenced = self._ledgers.unreferenced([i for i in self._entry_log.file_ids() if i < writing])
            try:
                await asyncio.to_thread(self._persist, batch, open_logs, unreferenced)
            except BaseException:
                self._ledgers.not_committed(batch)
                raise
        except BaseException:
            self._dirty = True
            raise
        self._ledgers.committed(batch)
        self._ledgers.forget_files(unreferenced)
        self.checkpoint_count += 1
        return True

    def _close_index(self) -> None:
        with self._persist_lock:  # a cancelled checkpoint's commit may still be running
            for reader in {id(d.reader): d.reader for d in self._ledgers.dropped}.values():
                reader.abort()
            self._ledgers.dropped = []
            self._index_db.close()

    async def _count_dropped(self) -> None:
        """Count the ledgers deleted since the last checkpoint off their entry log files (till
        then those files are kept: a count too high only delays a delete)."""
        dropped, self._ledgers.dropped = self._ledgers.dropped, []
        if dropped:
            self._ledgers.file_refs.subtract(await asyncio.to_thread(self._ledgers.count_dropped, dropped))

    def _delete_entry_logs(self, file_ids: list[int]) -> None:
        with self._persist_lock:
            self._entry_log.delete_files(file_ids)

    def _check_open_or_closing(self) -> None:
        if self._state not in ("open", "closing"):
            raise ServiceNotReadyError(f"the ledger store is {self._state}")

    def _persist(self, batch: CheckpointBatch, open_logs: list[int], unreferenced: list[int]) -> None:
        # The order that makes every step crash-safe: entry log durable -> index committed (with
        # the journal position it covers) -> the journal files and entry log files it made useless.
        with self._persist_lock:
            self._entry_log.sync(open_logs)
            commit_index(self._index_db, batch)
            self._journal.delete_files_before(batch.journal_file_id)
            self._entry_log.delete_files(unreferenced)

    # ---- compaction -----------------------------------------------------------------------------

    async def compact(self, threshold: float | None = None) -> CompactionStats:
        """Compact every sealed entry log file whose live fraction is below threshold (default: the
        setting), one file at a time, each followed by the checkpoint that makes its copies durable
        and then deletes it. Files with no live entry are deleted without copying anything."""
        threshold = self._settings.compaction_threshold if threshold is None else threshold
        total = CompactionStats()
        async with self._checkpoint_lock:
            self._check_open()
            await self._checkpoint()  # seals the files rotated since the last one
            candidates = await self._compaction_candidates(threshold)
        for file_id in candidates:
            async with self._checkpoint_lock:
                self._check_open()
                if file_id not in self._entry_log.sealed_file_ids():
                    continue
                ledgers = self._ledgers
                compaction = FileCompaction(file_id, self._entry_log, self._journal, ledgers)
                try:
                    stats = await compaction.move_live_entries()
                finally:
                    # Whatever was repointed must reach LMDB before the file may go.
                    self._dirty = self._dirty or compaction.stats.entries_moved > 0
                await self._checkpoint()
            total.add(stats)
        return total

    async def _compaction_candidates(self, threshold: float) -> list[int]:
        ledgers = self._ledgers
        sealed = [i for i in self._entry_log.sealed_file_ids() if ledgers.file_refs.get(i, 0) > 0]
        unknown = [i for i in sealed if not ledgers.usage.known(i)]
        if unknown:
            scanned = await asyncio.to_thread(lambda: {i: self._entry_log.scan(i) for i in unknown})
            for file_id, usage in scanned.items():
                ledgers.usage.set(file_id, usage)
        sizes = await asyncio.to_thread(lambda: {i: self._entry_log.file_size(i) - len(FILE_MAGIC) for i in sealed})
        candidates = []
        for file_id in sealed:
            live = ledgers.usage.live_bytes(file_id, ledgers.index.__contains__)
            if sizes[file_id] > 0 and live < threshold * sizes[file_id]:
                candidates.append(file_id)
        return candidates

    async def _compaction_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.compaction_interval)
            try:
                stats = await self.compact()
                if stats.files_compacted:
                    log.info("compaction: %s", stats)
            except Exception:
                log.exception("entry log compaction failed; the files stay as they are until the next one")

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.checkpoint_interval)
            try:
                await self.checkpoint()
            except Exception:
                log.exception("checkpoint failed; the journal keeps everything until the next one")

    def _recover(self) -> RecoveryStats:
        """Open the index and replay the journal after it (on a worker thread, before serving)."""
        self._root.mkdir(parents=True, exist_ok=True)
        self._entry_log.open()
        self._index_db.open()
        self._migrate_snapshot()
        committed = self._index_db.journal_file_id()
        first_file_id = 0 if committed is None else committed
        self._ledgers.load()
        # A checkpoint that crashed after its commit may have left covered files behind.
        self._journal.delete_files_before(first_file_id)
        records = adds = 0
        batch: list[JournalRecord] = []
        for record in self._journal.replay(first_file_id):
            records += 1
            adds += record.kind is RecordKind.ADD
            batch.append(record)
            if len(batch) >= _REPLAY_BATCH:
                self._replay(batch)
                batch = []
        if batch:
            self._replay(batch)
        dropped, self._ledgers.dropped = self._ledgers.dropped, []
        self._ledgers.file_refs.subtract(self._ledgers.count_dropped(dropped))
        self._journal.open_for_append(first_file_id)
        self.space.refresh()
        self._dirty = records > 0
        return RecoveryStats(committed is not None, first_file_id, records, adds)

    def _migrate_snapshot(self) -> None:
        """A data directory from before LMDB: load its index snapshot into LMDB once (one
        transaction), then remove the snapshot. A crash before the removal just does it again."""
        path = self._root / SNAPSHOT_NAME
        snapshot = load_snapshot(self._root)
        if snapshot is None:
            return
        batch = CheckpointBatch(snapshot.journal_file_id, deleted=set(snapshot.ledgers))
        for ledger_id, ledger in snapshot.ledgers.items():
            batch.locations[ledger_id] = {e: loc for e, loc in enumerate(ledger.locations) if loc != MISSING}
            batch.ledgers[ledger_id] = LedgerMeta(ledger.last_entry_id, ledger.last_add_confirmed, ledger.fenced)
        commit_index(self._index_db, batch)
        path.unlink()
        log.info("index snapshot %s migrated to %s: %d ledgers", path, self._index_db.path, len(batch.ledgers))

    def _replay(self, batch: list[JournalRecord]) -> None:
        """Both steps of a journaled batch at once (before the writer threads start)."""
        adds, _ = self._ledgers.journaled(batch)
        if adds:
            self._ledgers.logged(adds, self._entry_log.append(adds))


def commit_index(db: IndexDB, batch: CheckpointBatch) -> None:
    """Commit a checkpoint's batch to LMDB (a module function: tests make it fail like a crash)."""
    db.commit(batch)


def _check_id(what: str, value: int) -> None:
    if value < 0:
        raise InvalidArgumentError(f"{what} {value} is negative: ids start at 0")
