"""The ledger store in-process: adds, reads, fencing, LACs, deletes, checkpoints and restart recovery."""

from __future__ import annotations

import asyncio
import os
import threading
from array import array
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from herald.common.errors import (
    ChecksumError,
    EntryNotFoundError,
    FencedError,
    InvalidArgumentError,
    LedgerNotFoundError,
    PersistenceError,
    ServiceNotReadyError,
)
from herald.storage.node.entry_log import SUFFIX as ENTRY_LOG_SUFFIX
from herald.storage.node.index import MISSING, SNAPSHOT_NAME, LedgerIndex, Snapshot, load_snapshot, save_snapshot
from herald.storage.node.journal import SUFFIX as JOURNAL_SUFFIX
from herald.storage.node.journal import JournalRecord, RecordKind, encode_header
from herald.storage.node.ledger_store import LedgerStore
from herald.storage.node.settings import StorageSettings

DEADLINE = 10.0


def settings_for(data_dir: Path, **overrides: object) -> StorageSettings:
    # A long interval: tests checkpoint explicitly, never by waiting for the timer.
    settings = StorageSettings(data_dir=str(data_dir), checkpoint_interval=3600.0)
    for name, value in overrides.items():
        setattr(settings, name, value)
    return settings


async def open_store(data_dir: Path, **overrides: object) -> LedgerStore:
    store = LedgerStore(settings_for(data_dir, **overrides))
    await store.open()
    return store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LedgerStore]:
    s = await open_store(tmp_path)
    yield s
    await s.close()


async def read_all(store: LedgerStore, ledger: int, first: int, last: int,
                   max_bytes: int = 0) -> list[tuple[int, bytes]]:
    return [e for chunk in await read_chunks(store, ledger, first, last, max_bytes) for e in chunk]


async def read_chunks(store: LedgerStore, ledger: int, first: int, last: int,
                      max_bytes: int = 0) -> list[list[tuple[int, bytes]]]:
    return [chunk async for chunk in store.read_entries(ledger, first, last, max_bytes=max_bytes)]


def payload(ledger: int, entry: int, size: int = 64) -> bytes:
    return f"{ledger}/{entry}/".encode().ljust(size, b".")


def files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"*{suffix}"))


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x01]))


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# ---- adds and reads ---------------------------------------------------------------------------


async def test_added_entries_read_back_in_order(store: LedgerStore) -> None:
    for i in range(20):
        await store.add_entry(1, i, payload(1, i))
    assert await read_all(store, 1, 0, 19) == [(i, payload(1, i)) for i in range(20)]
    assert await read_all(store, 1, 5, 7) == [(i, payload(1, i)) for i in (5, 6, 7)]


async def test_reads_stop_at_the_last_entry_held(store: LedgerStore) -> None:
    for i in range(3):
        await store.add_entry(1, i, payload(1, i))
    assert [e for e, _ in await read_all(store, 1, 1, 100)] == [1, 2]


async def test_reads_stop_early_at_a_hole(store: LedgerStore) -> None:
    # A node of a striped ensemble holds some entries only.
    for i in (0, 1, 3, 4):
        await store.add_entry(1, i, payload(1, i))
    assert [e for e, _ in await read_all(store, 1, 0, 4)] == [0, 1]
    assert [e for e, _ in await read_all(store, 1, 3, 4)] == [3, 4]
    with pytest.raises(EntryNotFoundError, match="entry 2 of ledger 1"):
        await read_all(store, 1, 2, 4)


async def test_read_chunks_respect_max_bytes(store: LedgerStore) -> None:
    for i in range(10):
        await store.add_entry(1, i, payload(1, i, size=100))
    await store.add_entry(1, 10, payload(1, 10, size=1000))  # larger than a chunk: comes alone
    await store.add_entry(1, 11, payload(1, 11, size=100))
    chunks = await read_chunks(store, 1, 0, 11, max_bytes=350)
    assert [[e for e, _ in c] for c in chunks] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], [10], [11]]
    assert [e for c in chunks for e in c] == [(i, payload(1, i, 1000 if i == 10 else 100)) for i in range(12)]


async def test_reads_of_many_entries_span_lookup_batches(store: LedgerStore) -> None:
    await asyncio.gather(*(store.add_entry(4, i, payload(4, i, 10)) for i in range(3000)))
    entries = await read_all(store, 4, 0, 2999)
    assert entries == [(i, payload(4, i, 10)) for i in range(3000)]


async def test_pipelined_adds_complete_in_order(store: LedgerStore) -> None:
    done: list[tuple[int, int]] = []
    futures = []
    for i in range(300):
        ledger = i % 3
        future = await store.begin_add(ledger, i // 3, payload(ledger, i // 3))
        future.add_done_callback(lambda _, key=(ledger, i // 3): done.append(key))  # type: ignore[misc]
        futures.append(future)
    await asyncio.wait_for(asyncio.gather(*futures), DEADLINE)
    assert done == [(i % 3, i // 3) for i in range(300)]


async def test_concurrent_adds_share_fsyncs(store: LedgerStore) -> None:
    journal = store.journal
    entered, release = threading.Event(), threading.Event()
    real = journal._fsync

    def held(fd: int) -> None:
        entered.set()
        release.wait(DEADLINE)
        real(fd)

    journal._fsync = held
    fsyncs, records = journal.fsync_count, journal.record_count
    first = asyncio.create_task(store.add_entry(1, 0, b"first"))
    assert await asyncio.to_thread(entered.wait, DEADLINE)
    journal._fsync = real
    # 100 adds arrive while the first one's fsync runs: they all share the next one.
    rest = [asyncio.create_task(store.add_entry(2, i, payload(2, i))) for i in range(100)]
    await asyncio.sleep(0)  # let every task queue its add
    release.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), DEADLINE)
    assert journal.record_count - records == 101
    assert journal.fsync_count - fsyncs == 2


async def test_a_duplicate_add_replaces_the_entry(store: LedgerStore) -> None:
    await store.add_entry(1, 0, b"first copy")
    await store.add_entry(1, 1, b"one")
    await store.add_entry(1, 0, b"first copy")  # a writer's retry: identical
    assert await read_all(store, 1, 0, 1) == [(0, b"first copy"), (1, b"one")]
    await store.add_entry(1, 0, b"recovered copy", recovery=True)  # re-replication
    assert await read_all(store, 1, 0, 1) == [(0, b"recovered copy"), (1, b"one")]
    assert store.last_entry_id(1) == 1


async def test_empty_entries_are_stored(store: LedgerStore) -> None:
    await store.add_entry(1, 0, b"")
    assert await read_all(store, 1, 0, 0) == [(0, b"")]


# ---- errors -----------------------------------------------------------------------------------


async def test_reading_an_unknown_ledger_or_entry_is_a_clear_error(store: LedgerStore) -> None:
    await store.add_entry(1, 0, b"x")
    with pytest.raises(LedgerNotFoundError, match="ledger 2 is not on this storage node"):
        await read_all(store, 2, 0, 0)
    with pytest.raises(EntryNotFoundError, match=r"entry 5 of ledger 1 .*last entry it holds is 0"):
        await read_all(store, 1, 5, 9)


@pytest.mark.parametrize(("ledger", "first", "last", "max_bytes", "message"), [
    (-1, 0, 0, 0, "ledger id -1 is negative"),
    (1, -1, 0, 0, "first entry id -1 is negative"),
    (1, 3, 2, 0, "last entry id 2 is before first entry id 3"),
    (1, 0, 0, -5, "max_bytes -5 is negative"),
])
async def test_invalid_reads_are_refused(store: LedgerStore, ledger: int, first: int, last: int,
                                         max_bytes: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        await read_all(store, ledger, first, last, max_bytes)


async def test_invalid_adds_are_refused(store: LedgerStore) -> None:
    with pytest.raises(InvalidArgumentError, match="ledger id -2 is negative"):
        await store.add_entry(-2, 0, b"x")
    with pytest.raises(InvalidArgumentError, match="entry id -1 is negative"):
        await store.add_entry(1, -1, b"x")
    with pytest.raises(InvalidArgumentError, match="too far past the last entry held"):
        await store.add_entry(1, 10**12, b"x")
    with pytest.raises(InvalidArgumentError, match="ledger id -1"):
        await store.fence(-1)
    with pytest.raises(InvalidArgumentError, match="ledger id -1"):
        await store.delete_ledger(-1)
    with pytest.raises(InvalidArgumentError, match="ledger id -1"):
        store.ledger_info(-1)
    assert store.ledger_info(1).last_entry_id == -1


async def test_flipped_bytes_in_the_entry_log_give_a_checksum_error(store: LedgerStore, tmp_path: Path) -> None:
    marker = b"MARKER-" + os.urandom(16) + b"-" * 2000
    await store.add_entry(1, 0, b"before")
    await store.add_entry(1, 1, marker)
    await store.add_entry(1, 2, b"after")
    (path,) = files(tmp_path / "entrylog", ENTRY_LOG_SUFFIX)
    flip_byte(path, path.read_bytes().index(marker) + 1000)
    with pytest.raises(ChecksumError, match=r"entry 1 of ledger 1 .* is corrupt"):
        await read_all(store, 1, 0, 2)
    assert await read_all(store, 1, 2, 2) == [(2, b"after")]


async def test_a_journal_failure_fails_adds_with_persistence_error(store: LedgerStore) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    store.journal._fsync = broken
    with pytest.raises(PersistenceError, match="Input/output error"):
        await asyncio.wait_for(store.add_entry(1, 0, b"x"), DEADLINE)
    with pytest.raises(PersistenceError):
        await store.add_entry(1, 1, b"y")
    with pytest.raises(PersistenceError):
        await store.fence(1)


async def test_a_closed_store_refuses_everything(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(ServiceNotReadyError):
        await store.add_entry(1, 0, b"x")
    with pytest.raises(ServiceNotReadyError):
        await store.fence(1)
    with pytest.raises(ServiceNotReadyError):
        await read_all(store, 1, 0, 0)
    with pytest.raises(ServiceNotReadyError):
        await store.open()


async def test_a_damaged_index_snapshot_refuses_to_open(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await store.add_entry(1, 0, b"x")
    await store.close()
    # Snapshots are only read once now, to migrate them to LMDB: a damaged one awaiting migration.
    save_snapshot(tmp_path, Snapshot(0, {1: LedgerIndex(array("Q", [5]))}))
    snapshot = tmp_path / SNAPSHOT_NAME
    content = bytearray(snapshot.read_bytes())
    content[len(content) // 2] ^= 0xFF
    snapshot.write_bytes(bytes(content))
    damaged = LedgerStore(settings_for(tmp_path))
    with pytest.raises(PersistenceError, match=r"index snapshot .* is damaged"):
        await damaged.open()
    await asyncio.wait_for(damaged.close(), DEADLINE)


# ---- fencing and LAC --------------------------------------------------------------------------


async def test_fencing_stops_adds_but_not_recovery_adds(store: LedgerStore) -> None:
    await store.add_entry(1, 0, b"a", last_add_confirmed=-1)
    await store.add_entry(1, 1, b"b", last_add_confirmed=0)
    assert await store.fence(1) == 1
    with pytest.raises(FencedError, match="ledger 1 is fenced"):
        await store.add_entry(1, 2, b"c")
    await store.add_entry(1, 2, b"c", recovery=True)
    assert store.ledger_info(1).fenced
    assert await read_all(store, 1, 0, 2) == [(0, b"a"), (1, b"b"), (2, b"c")]
    await store.add_entry(2, 0, b"other ledgers are not fenced")


async def test_fence_waits_for_adds_begun_before_it(store: LedgerStore) -> None:
    begun = [await store.begin_add(1, i, payload(1, i)) for i in range(50)]
    assert await store.fence(1) == 49
    assert all(f.done() for f in begun)


async def test_fencing_an_unknown_ledger_records_it(store: LedgerStore) -> None:
    assert await store.fence(77) == -1
    info = store.ledger_info(77)
    assert (info.last_entry_id, info.last_add_confirmed, info.fenced) == (-1, -1, True)
    with pytest.raises(FencedError):
        await store.add_entry(77, 0, b"late writer")
    with pytest.raises(EntryNotFoundError):
        await read_all(store, 77, 0, 0)


async def test_lac_is_the_highest_piggybacked_one(store: LedgerStore) -> None:
    assert store.last_add_confirmed(1) == -1
    await store.add_entry(1, 0, b"a", last_add_confirmed=-1)
    await store.add_entry(1, 1, b"b", last_add_confirmed=0)
    await store.add_entry(1, 0, b"a", last_add_confirmed=-1, recovery=True)  # an older LAC later
    assert store.last_add_confirmed(1) == 0
    assert store.last_entry_id(1) == 1


@pytest.mark.parametrize("checkpoint", [True, False])
async def test_fencing_and_lac_survive_a_restart(tmp_path: Path, checkpoint: bool) -> None:
    store = await open_store(tmp_path)
    await store.add_entry(1, 0, b"a", last_add_confirmed=-1)
    await store.add_entry(1, 1, b"b", last_add_confirmed=0)
    await store.fence(1)
    await store.fence(2)
    await store.close(checkpoint=checkpoint)

    store = await open_store(tmp_path)
    assert store.ledger_info(1).fenced and store.ledger_info(2).fenced
    assert store.last_add_confirmed(1) == 0
    with pytest.raises(FencedError):
        await store.add_entry(1, 2, b"c")
    await store.close()


# ---- deletes ----------------------------------------------------------------------------------


async def test_deleted_ledgers_are_gone_and_stay_gone(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    for i in range(5):
        await store.add_entry(1, i, payload(1, i), last_add_confirmed=i - 1)
        await store.add_entry(2, i, payload(2, i))
    await store.fence(1)
    await store.delete_ledger(1)
    await store.delete_ledger(99)  # unknown: nothing to do
    with pytest.raises(LedgerNotFoundError):
        await read_all(store, 1, 0, 4)
    info = store.ledger_info(1)
    assert (info.last_entry_id, info.last_add_confirmed, info.fenced) == (-1, -1, False)
    await store.close(checkpoint=False)  # replay must delete it again

    store = await open_store(tmp_path)
    with pytest.raises(LedgerNotFoundError):
        await read_all(store, 1, 0, 4)
    assert len(await read_all(store, 2, 0, 4)) == 5
    await store.close()


async def test_entry_log_files_holding_only_deleted_ledgers_are_removed(tmp_path: Path) -> None:
    store = await open_store(tmp_path, entry_log_max_size=4096)
    for i in range(10):
        await store.add_entry(1, i, payload(1, i, size=1000))
    await store.add_entry(2, 0, b"keep me")
    entry_logs = tmp_path / "entrylog"
    before = len(files(entry_logs, ENTRY_LOG_SUFFIX))
    await store.delete_ledger(1)
    await store.checkpoint()
    await store.checkpoint()  # rotated files are closed by one checkpoint and removable by the next
    await store.add_entry(2, 1, b"and me")
    await store.checkpoint()
    assert len(files(entry_logs, ENTRY_LOG_SUFFIX)) < before
    assert await read_all(store, 2, 0, 1) == [(0, b"keep me"), (1, b"and me")]
    await store.close()


# ---- checkpoints and recovery -----------------------------------------------------------------


async def test_restart_without_checkpoint_replays_the_journal(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    for i in range(30):
        await store.add_entry(3, i, payload(3, i))
    await store.close(checkpoint=False)  # as after a crash: only the journal has it

    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.adds_replayed == 30
    assert await read_all(store, 3, 0, 29) == [(i, payload(3, i)) for i in range(30)]
    await store.close()


async def test_restart_after_a_checkpoint_replays_only_the_tail(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    for i in range(50):
        await store.add_entry(1, i, payload(1, i))
    assert await store.checkpoint()
    assert not await store.checkpoint()  # nothing new
    for i in range(50, 57):
        await store.add_entry(1, i, payload(1, i))
    await store.close(checkpoint=False)

    store = await open_store(tmp_path)
    assert store.recovery is not None
    assert store.recovery.snapshot_loaded
    assert (store.recovery.records_replayed, store.recovery.adds_replayed) == (7, 7)
    assert await read_all(store, 1, 0, 56) == [(i, payload(1, i)) for i in range(57)]
    await store.close()

    # The restart checkpointed what it replayed, and the clean close checkpointed the rest.
    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.records_replayed == 0
    await store.close()


async def test_a_checkpoint_deletes_the_journal_files_it_covers(tmp_path: Path) -> None:
    store = await open_store(tmp_path, journal_file_max_size=2048)
    for i in range(40):
        await store.add_entry(1, i, payload(1, i, size=200))
    journals = tmp_path / "journal"
    assert len(files(journals, JOURNAL_SUFFIX)) > 3
    await store.checkpoint()
    assert len(files(journals, JOURNAL_SUFFIX)) == 1  # the new, empty one
    await store.close()


async def test_a_torn_journal_tail_after_a_crash_is_handled(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    for i in range(10):
        await store.add_entry(1, i, payload(1, i))
    await store.close(checkpoint=False)
    newest = files(tmp_path / "journal", JOURNAL_SUFFIX)[-1]
    torn = JournalRecord(RecordKind.ADD, 1, 10, 9, b"never acknowledged" * 100, data_crc=12345)
    append_bytes(newest, encode_header(torn) + torn.data[:300])

    store = await open_store(tmp_path)
    assert await read_all(store, 1, 0, 100) == [(i, payload(1, i)) for i in range(10)]
    await store.add_entry(1, 10, b"the writer retries")
    assert await read_all(store, 1, 10, 10) == [(10, b"the writer retries")]
    await store.close()


async def test_a_crash_before_a_checkpoint_deletes_its_journal_files_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(tmp_path)
    for i in range(20):
        await store.add_entry(1, i, payload(1, i))
    # The snapshot is saved, then the node dies before deleting the journal files it covers.
    monkeypatch.setattr(store.journal, "delete_files_before", lambda file_id: [])
    await store.checkpoint()
    covered = files(tmp_path / "journal", JOURNAL_SUFFIX)[:-1]
    for i in range(20, 25):
        await store.add_entry(1, i, payload(1, i))
    await store.close(checkpoint=False)
    monkeypatch.undo()

    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.adds_replayed == 5
    assert covered and not any(path.exists() for path in covered)
    assert await read_all(store, 1, 0, 24) == [(i, payload(1, i)) for i in range(25)]
    await store.close()


async def test_the_timer_checkpoints_on_its_own(tmp_path: Path) -> None:
    store = await open_store(tmp_path, checkpoint_interval=0.01)
    await store.add_entry(1, 0, b"x")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while store.checkpoint_count < 1:
        assert loop.time() < deadline, "no checkpoint happened"
        await asyncio.sleep(0.01)
    await store.close()


# ---- the index snapshot -----------------------------------------------------------------------


def test_index_snapshot_round_trip(tmp_path: Path) -> None:
    ledgers = {
        1: LedgerIndex(array("Q", [5, MISSING, 7]), last_add_confirmed=1, fenced=True),
        2: LedgerIndex(),
        2**40: LedgerIndex(array("Q", [2**63]), last_add_confirmed=-1, fenced=False),
    }
    save_snapshot(tmp_path, Snapshot(42, ledgers))
    loaded = load_snapshot(tmp_path)
    assert loaded is not None
    assert loaded.journal_file_id == 42
    assert loaded.ledgers == ledgers
    assert loaded.ledgers[1].last_entry_id == 2
    assert loaded.ledgers[1].get(1) == MISSING and loaded.ledgers[1].get(99) == MISSING
    assert load_snapshot(tmp_path / "nowhere") is None


def test_index_put_fills_holes_and_reports_replaced_locations() -> None:
    ledger = LedgerIndex()
    assert ledger.put(3, 30) == MISSING
    assert list(ledger.locations) == [MISSING, MISSING, MISSING, 30]
    assert ledger.put(1, 10) == MISSING
    assert ledger.put(1, 11) == 10
    assert list(ledger.present()) == [11, 30]
