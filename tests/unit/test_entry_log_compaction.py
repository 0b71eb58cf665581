"""Entry log compaction on a real ledger store: deleted ledgers' space comes back, live entries stay
readable during and after it (and after a restart), and a crash at any step loses nothing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from herald.common.errors import LedgerNotFoundError
from herald.storage.node import compaction, ledger_store
from herald.storage.node.entry_log import SUFFIX as ENTRY_LOG_SUFFIX
from herald.storage.node.ledger_store import LedgerStore

from tests.unit.test_ledger_store import DEADLINE, files, open_store, payload, read_all

LIVE, DEAD, FULL = 2, 1, 3
ENTRIES = 60
DEAD_BYTES = ENTRIES * 1000  # the deleted ledger's entries, their headers not counted


def entry_log_files(data_dir: Path) -> list[Path]:
    return files(data_dir / "entrylog", ENTRY_LOG_SUFFIX)


def entry_log_bytes(data_dir: Path) -> int:
    """The entry logs' total size; a file the compactor deletes between listing and measuring counts 0."""
    total = 0
    for path in entry_log_files(data_dir):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total


def live_payload(entry: int) -> bytes:
    return payload(LIVE, entry, size=100)


async def fill(store: LedgerStore) -> None:
    """Interleave a big ledger (to be deleted) with a small live one over many small files, then
    write a ledger that stays whole in files of its own."""
    for i in range(ENTRIES):
        await store.add_entry(DEAD, i, payload(DEAD, i, size=1000))
        await store.add_entry(LIVE, i, live_payload(i))
    for i in range(ENTRIES):
        await store.add_entry(FULL, i, payload(FULL, i, size=500))


async def assert_live_data(store: LedgerStore) -> None:
    assert await read_all(store, LIVE, 0, ENTRIES - 1) == [(i, live_payload(i)) for i in range(ENTRIES)]
    assert await read_all(store, FULL, 0, ENTRIES - 1) == [(i, payload(FULL, i, size=500)) for i in range(ENTRIES)]
    with pytest.raises(LedgerNotFoundError):
        await read_all(store, DEAD, 0, 0)


async def filled_store(tmp_path: Path) -> LedgerStore:
    store = await open_store(tmp_path, entry_log_max_size=8192)
    await fill(store)
    await store.delete_ledger(DEAD)
    await store.checkpoint()  # seals the files written so far
    return store


async def test_compaction_reclaims_the_space_of_deleted_ledgers(tmp_path: Path) -> None:
    store = await filled_store(tmp_path)
    files_before, bytes_before = len(entry_log_files(tmp_path)), entry_log_bytes(tmp_path)
    full_files = {path.name for path in entry_log_files(tmp_path)[-3:-1]}  # only FULL's entries
    stats = await store.compact()
    assert stats.files_compacted > 0 and stats.entries_moved >= ENTRIES
    assert len(entry_log_files(tmp_path)) < files_before
    assert bytes_before - entry_log_bytes(tmp_path) >= DEAD_BYTES
    # Files that are all live are left alone.
    assert full_files <= {path.name for path in entry_log_files(tmp_path)}
    await assert_live_data(store)
    assert (await store.compact()).files_compacted == 0  # nothing left worth compacting
    await store.close()

    store = await open_store(tmp_path)
    await assert_live_data(store)
    await store.close()


async def test_files_found_at_start_up_are_scanned_and_compacted(tmp_path: Path) -> None:
    store = await filled_store(tmp_path)
    await store.close()
    bytes_before = entry_log_bytes(tmp_path)
    store = await open_store(tmp_path)
    assert (await store.compact()).files_compacted > 0
    assert bytes_before - entry_log_bytes(tmp_path) >= DEAD_BYTES
    await assert_live_data(store)
    await store.close()


async def test_reads_during_compaction_return_the_right_data(tmp_path: Path) -> None:
    store = await filled_store(tmp_path)
    stop = asyncio.Event()
    reads = 0

    async def keep_reading() -> None:
        nonlocal reads
        while not stop.is_set():
            assert await read_all(store, LIVE, 0, ENTRIES - 1) == [(i, live_payload(i)) for i in range(ENTRIES)]
            reads += 1

    reader = asyncio.create_task(keep_reading())
    compaction.COPY_BATCH_BYTES, saved = 1024, compaction.COPY_BATCH_BYTES  # many small steps
    try:
        assert (await store.compact()).files_compacted > 0
    finally:
        compaction.COPY_BATCH_BYTES = saved
        stop.set()
        await reader
    assert reads > 0
    await store.close()


async def test_a_read_that_looked_up_a_compacted_file_reads_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = await filled_store(tmp_path)
    entered, release = threading.Event(), threading.Event()
    original = store._read_chunk
    calls = 0

    def held_first_time(*args: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:  # the locations are looked up; hold the read until their file is gone
            entered.set()
            release.wait(DEADLINE)
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "_read_chunk", held_first_time)
    first_file = entry_log_files(tmp_path)[0]
    reading = asyncio.create_task(read_all(store, LIVE, 0, ENTRIES - 1))
    await asyncio.to_thread(entered.wait, DEADLINE)
    assert (await store.compact()).files_compacted > 0
    assert not first_file.exists()
    release.set()
    assert await reading == [(i, live_payload(i)) for i in range(ENTRIES)]
    assert calls == 2  # the first read found its file gone; the second read the copies
    await store.close()


async def test_a_crash_after_copying_before_the_snapshot_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = await filled_store(tmp_path)
    names = {path.name for path in entry_log_files(tmp_path)}

    def no_snapshot(*args: object) -> None:
        raise OSError("the node died before saving the index snapshot")

    monkeypatch.setattr(ledger_store, "commit_index", no_snapshot)  # the index commit (was the snapshot)
    with pytest.raises(OSError, match="died"):
        await store.compact()
    # The copies are written (and even fsynced), but the old files are all still there.
    assert names <= {path.name for path in entry_log_files(tmp_path)}
    await store.close(checkpoint=False)
    monkeypatch.undo()

    store = await open_store(tmp_path)
    await assert_live_data(store)
    assert (await store.compact()).files_compacted > 0  # and it can be done again, to the end
    await assert_live_data(store)
    await store.close()


async def test_a_crash_in_the_middle_of_copying_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = await filled_store(tmp_path)
    first_file = entry_log_files(tmp_path)[0]
    monkeypatch.setattr(compaction, "COPY_BATCH_BYTES", 1)  # one entry per append
    original = store.journal.call_on_writer
    appends = 0

    async def dies_on_the_third_append(action: object) -> object:
        nonlocal appends
        appends += 1
        if appends == 3:
            raise OSError("the node died while copying")
        return await original(action)  # type: ignore[arg-type]

    monkeypatch.setattr(store.journal, "call_on_writer", dies_on_the_third_append)
    with pytest.raises(OSError, match="died"):
        await store.compact()
    await assert_live_data(store)  # half-moved: the index points at copies and originals alike
    await store.close(checkpoint=False)
    assert first_file.exists()  # it died copying the first file's entries

    store = await open_store(tmp_path)
    await assert_live_data(store)
    await store.close()


async def test_a_crash_between_the_snapshot_and_the_delete_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = await filled_store(tmp_path)
    monkeypatch.setattr(store.entry_log, "delete_files", lambda file_ids: [])
    assert (await store.compact()).files_compacted > 0
    files_left = len(entry_log_files(tmp_path))
    await store.close(checkpoint=False)
    monkeypatch.undo()

    store = await open_store(tmp_path)
    await assert_live_data(store)  # read from the copies the snapshot names
    await store.checkpoint()  # nothing new, but the files nothing refers to go
    assert len(entry_log_files(tmp_path)) < files_left
    await assert_live_data(store)
    await store.close()


async def test_the_timer_compacts_on_its_own(tmp_path: Path) -> None:
    store = await open_store(tmp_path, entry_log_max_size=8192, compaction_interval=0.01)
    await fill(store)
    await store.delete_ledger(DEAD)
    bytes_before = entry_log_bytes(tmp_path)
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while bytes_before - entry_log_bytes(tmp_path) < DEAD_BYTES:
        assert asyncio.get_running_loop().time() < deadline, "no compaction happened"
        await asyncio.sleep(0.01)
    await assert_live_data(store)
    await store.close()
