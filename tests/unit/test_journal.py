"""The journal on its own: group commit (one fsync for many records), replay, torn tails, failures."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest
from herald.common.errors import PersistenceError, ServiceNotReadyError
from herald.storage.node.journal import (
    FILE_MAGIC,
    HEADER_SIZE,
    SUFFIX,
    Journal,
    JournalRecord,
    RecordKind,
    encode_header,
)

DEADLINE = 10.0


class Recorder:
    """A SyncedBatchHandler that remembers what it was given, and where."""

    def __init__(self) -> None:
        self.synced: list[list[JournalRecord]] = []
        self.applied: list[list[JournalRecord]] = []
        self.written: list[list[JournalRecord]] = []
        self.writer_threads: set[str] = set()

    def apply_synced(self, records: Sequence[JournalRecord]) -> None:
        self.applied.append(list(records))

    def write_synced(self, records: Sequence[JournalRecord]) -> object:
        self.writer_threads.add(threading.current_thread().name)
        self.synced.append(list(records))
        return len(records)

    def apply_written(self, records: Sequence[JournalRecord], outcome: object) -> None:
        assert outcome == len(records)
        assert self.applied[len(self.written)] == list(records)  # each batch applied before its outcome
        self.written.append(list(records))


class HeldFsync:
    """Replaces the journal's fsync: the first call blocks until released, so a test can queue
    records behind it and know exactly what the next sync will cover."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            if not self.release.wait(DEADLINE):
                raise AssertionError("test never released the held fsync")
        self.real(fd)


def make_journal(directory: Path, handler: Recorder | None = None, **overrides: int) -> Journal:
    options = {"max_file_size": 1 << 20, "max_group_bytes": 1 << 20, "max_queued_bytes": 8 << 20}
    options.update(overrides)
    return Journal(directory, handler or Recorder(), **options)


def add(ledger: int, entry: int, data: bytes = b"", lac: int = -1) -> JournalRecord:
    return JournalRecord(RecordKind.ADD, ledger, entry, lac, data)


def replayed(directory: Path, first_file_id: int = 0) -> list[tuple[RecordKind, int, int, int, bytes]]:
    journal = make_journal(directory)
    return [(r.kind, r.ledger_id, r.entry_id, r.last_add_confirmed, r.data) for r in journal.replay(first_file_id)]


def journal_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{SUFFIX}"))


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    j = make_journal(tmp_path / "journal")
    await j.open(0)
    yield j
    await j.close()


async def test_append_resolves_after_sync_and_replays_in_order(tmp_path: Path) -> None:
    handler = Recorder()
    j = make_journal(tmp_path, handler)
    await j.open(0)
    futures = [j.append(add(1, i, f"entry {i}".encode(), lac=i - 1)) for i in range(5)]
    futures.append(j.append(JournalRecord(RecordKind.FENCE, 1)))
    futures.append(j.append(JournalRecord(RecordKind.DELETE, 2)))
    await asyncio.wait_for(asyncio.gather(*futures), DEADLINE)
    await j.close()

    # Each batch was applied (and answered), then went through the handler on the writer thread,
    # and its outcome was applied too, in order.
    assert handler.applied == handler.synced == handler.written
    assert [(r.kind, r.ledger_id) for b in handler.applied for r in b][-2:] == [(RecordKind.FENCE, 1),
                                                                             (RecordKind.DELETE, 2)]
    assert handler.writer_threads == {"journal-writer"}
    assert replayed(tmp_path) == [
        *[(RecordKind.ADD, 1, i, i - 1, f"entry {i}".encode()) for i in range(5)],
        (RecordKind.FENCE, 1, -1, -1, b""),
        (RecordKind.DELETE, 2, -1, -1, b""),
    ]


async def test_a_batch_is_answered_before_the_handler_works_on_it_after_the_sync(tmp_path: Path) -> None:
    class HeldWrite(Recorder):
        """write_synced (the entry log write) blocks until released."""

        def __init__(self) -> None:
            super().__init__()
            self.entered, self.release = threading.Event(), threading.Event()

        def write_synced(self, records: Sequence[JournalRecord]) -> object:
            self.entered.set()
            if not self.release.wait(DEADLINE):
                raise AssertionError("test never released the held write")
            return super().write_synced(records)

    handler = HeldWrite()
    j = make_journal(tmp_path, handler)
    await j.open(0)
    # Answered while the handler's work after the sync is held: the fsync alone made it durable.
    await asyncio.wait_for(j.append(add(1, 0, b"x")), DEADLINE)
    assert await asyncio.to_thread(handler.entered.wait, DEADLINE)
    assert [[(r.ledger_id, r.entry_id, r.data) for r in b] for b in handler.applied] == [[(1, 0, b"x")]]
    assert handler.written == []
    handler.release.set()
    await j.close()  # the outcome is applied before the journal stops
    assert handler.written == handler.applied


async def test_future_resolves_only_after_the_fsync_that_covers_it(journal: Journal) -> None:
    held = HeldFsync(journal._fsync)
    journal._fsync = held
    future = journal.append(add(1, 0, b"x"))
    assert await asyncio.to_thread(held.entered.wait, DEADLINE)
    # The record is written and its fsync has started but not returned: the add is not done.
    await asyncio.sleep(0)
    assert not future.done()
    held.release.set()
    await asyncio.wait_for(future, DEADLINE)
    assert journal.fsync_count == 1


async def test_concurrent_appends_share_one_fsync(journal: Journal) -> None:
    held = HeldFsync(journal._fsync)
    journal._fsync = held
    first = journal.append(add(1, 0, b"first"))
    assert await asyncio.to_thread(held.entered.wait, DEADLINE)
    # While the first sync runs, 200 adds queue up: one write and one fsync must cover them all.
    rest = [journal.append(add(2, i, os.urandom(100))) for i in range(200)]
    held.release.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), DEADLINE)
    assert journal.record_count == 201
    assert journal.fsync_count == 2


async def test_group_is_capped_by_max_group_bytes(tmp_path: Path) -> None:
    j = make_journal(tmp_path, max_group_bytes=3 * (HEADER_SIZE + 1000))
    await j.open(0)
    held = HeldFsync(j._fsync)
    j._fsync = held
    first = j.append(add(1, 0))
    assert await asyncio.to_thread(held.entered.wait, DEADLINE)
    rest = [j.append(add(1, i, b"y" * 1000)) for i in range(1, 10)]
    held.release.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), DEADLINE)
    await j.close()
    assert j.fsync_count == 1 + 3  # 9 records of which at most 3 per group


async def test_torn_tail_is_truncated_and_later_replays_agree(tmp_path: Path) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    await asyncio.gather(*(j.append(add(7, i, b"d" * 50)) for i in range(3)))
    await j.close()
    (path,) = journal_files(tmp_path)
    intact_size = path.stat().st_size
    # A crash mid-write: a whole header, then only part of the data it announces.
    torn = add(7, 3, b"z" * 500)
    torn.data_crc = 0
    append_bytes(path, encode_header(torn) + b"z" * 123)

    assert [r[2] for r in replayed(tmp_path)] == [0, 1, 2]
    assert path.stat().st_size == intact_size
    assert [r[2] for r in replayed(tmp_path)] == [0, 1, 2]


@pytest.mark.parametrize("damage", ["half header", "header crc", "data crc"])
async def test_bad_last_record_ends_replay_there(tmp_path: Path, damage: str) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    await asyncio.gather(*(j.append(add(7, i, b"d" * 50)) for i in range(3)))
    await j.close()
    (path,) = journal_files(tmp_path)
    content = bytearray(path.read_bytes())
    last = len(content) - (HEADER_SIZE + 50)
    if damage == "half header":
        del content[last + HEADER_SIZE // 2:]
    elif damage == "header crc":
        content[last + 10] ^= 0xFF
    else:
        content[-1] ^= 0xFF
    path.write_bytes(bytes(content))

    assert [r[2] for r in replayed(tmp_path)] == [0, 1]
    assert path.stat().st_size == last


async def test_damage_in_an_older_file_refuses_to_replay(tmp_path: Path) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    await j.append(add(1, 0, b"a" * 100))
    await j.rotate(lambda: None)
    await j.append(add(1, 1, b"b" * 100))
    await j.close()
    older = journal_files(tmp_path)[0]
    content = bytearray(older.read_bytes())
    content[-5] ^= 0x01
    older.write_bytes(bytes(content))
    with pytest.raises(PersistenceError, match="damaged"):
        replayed(tmp_path)


async def test_last_file_without_its_header_is_removed(tmp_path: Path) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    await j.append(add(1, 0, b"kept"))
    await j.close()
    empty = tmp_path / f"{99:016d}{SUFFIX}"
    empty.write_bytes(FILE_MAGIC[:3])  # crashed right after creating it
    assert replayed(tmp_path) == [(RecordKind.ADD, 1, 0, -1, b"kept")]
    assert not empty.exists()


async def test_a_file_that_is_not_a_journal_is_refused(tmp_path: Path) -> None:
    (tmp_path / f"{1:016d}{SUFFIX}").write_bytes(b"something else entirely")
    with pytest.raises(PersistenceError, match="does not start with"):
        replayed(tmp_path)


async def test_files_rotate_by_size_and_replay_spans_them(tmp_path: Path) -> None:
    j = make_journal(tmp_path, max_file_size=4096)
    await j.open(0)
    for i in range(40):
        await j.append(add(3, i, bytes([i]) * 300))
    await j.close()
    assert len(journal_files(tmp_path)) > 3
    assert [(r[2], r[4]) for r in replayed(tmp_path)] == [(i, bytes([i]) * 300) for i in range(40)]


async def test_rotate_starts_a_new_file_and_older_files_can_be_deleted(tmp_path: Path) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    await j.append(add(1, 0))
    before = j.current_file_id
    file_id, result = await j.rotate(lambda: "ran on the writer thread")
    assert (file_id, result) == (before + 1, "ran on the writer thread")
    await j.append(add(1, 1))
    assert await asyncio.to_thread(j.delete_files_before, file_id) == [before]
    await j.close()
    assert [r[2] for r in replayed(tmp_path, file_id)] == [1]


async def test_start_numbers_the_new_file_after_existing_and_checkpointed_ones(tmp_path: Path) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    first = j.current_file_id
    await j.close()
    again = make_journal(tmp_path)
    await again.open(0)
    assert again.current_file_id == first + 1
    await again.close()
    later = make_journal(tmp_path)
    await later.open(50)  # files before 50 were covered by a checkpoint and deleted
    assert later.current_file_id == 50
    await later.close()


async def test_fsync_failure_fails_the_batch_and_every_later_append(journal: Journal) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    journal._fsync = broken
    with pytest.raises(PersistenceError, match="accepts no more writes"):
        await asyncio.wait_for(journal.append(add(1, 0)), DEADLINE)
    with pytest.raises(PersistenceError):
        journal.append(add(1, 1))


async def test_handler_failure_is_a_journal_failure(tmp_path: Path) -> None:
    class Broken(Recorder):
        def write_synced(self, records: Sequence[JournalRecord]) -> object:
            raise OSError(28, "No space left on device")

    j = make_journal(tmp_path, Broken())
    await j.open(0)
    # The record was durable before the handler ran: it is answered; nothing after it is taken.
    await asyncio.wait_for(j.append(add(1, 0)), DEADLINE)
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while j.problem() is None:
        assert asyncio.get_running_loop().time() < deadline, "the failure was never reported"
        await asyncio.sleep(0.01)
    with pytest.raises(PersistenceError, match="No space left"):
        j.append(add(1, 1))
    await j.close()


async def test_append_after_close_is_refused(tmp_path: Path) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    await j.close()
    await j.close()  # idempotent
    with pytest.raises(ServiceNotReadyError):
        j.append(add(1, 0))
    with pytest.raises(ServiceNotReadyError):
        await j.rotate(lambda: None)


async def test_close_syncs_everything_queued(tmp_path: Path) -> None:
    j = make_journal(tmp_path)
    await j.open(0)
    futures = [j.append(add(1, i, b"q")) for i in range(100)]
    await j.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(replayed(tmp_path)) == 100


async def test_writers_wait_while_too_many_bytes_are_queued(tmp_path: Path) -> None:
    j = make_journal(tmp_path, max_queued_bytes=10_000)
    await j.open(0)
    held = HeldFsync(j._fsync)
    j._fsync = held
    futures = [j.append(add(1, 0, b"a" * 6000))]
    assert await asyncio.to_thread(held.entered.wait, DEADLINE)
    futures.append(j.append(add(1, 1, b"b" * 6000)))  # now over the limit
    waiter = asyncio.create_task(j.wait_for_room())
    await asyncio.sleep(0)
    # Nothing can complete while the sync is held, so the waiter must still be waiting.
    assert not waiter.done()
    held.release.set()
    await asyncio.wait_for(asyncio.gather(waiter, *futures), DEADLINE)
    await j.close()
