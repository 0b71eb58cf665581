"""The storage node's entry index in LMDB (storage.node.index_db): crash safety around its commit,
a full map, migration from the old snapshot, deleted ledgers' key ranges, compaction's repointing
across a restart, and resident memory that does not grow with the entries held."""

from __future__ import annotations

import asyncio
import shutil
from array import array
from pathlib import Path

import pytest
from herald.common.errors import EntryNotFoundError, LedgerNotFoundError, PersistenceError
from herald.storage.node import ledger_store
from herald.storage.node.entry_log import OFFSET_BITS
from herald.storage.node.index import MISSING, SNAPSHOT_NAME, LedgerIndex, Snapshot, save_snapshot
from herald.storage.node.index_db import DIRECTORY, CheckpointBatch, IndexDB
from herald.storage.node.ledger_store import LedgerStore

from tests.unit.test_entry_log_compaction import DEAD, ENTRIES, FULL, LIVE, assert_live_data, filled_store
from tests.unit.test_ledger_store import open_store, payload, read_all

MIB = 1024 * 1024


def committed(data_dir: Path) -> IndexDB:
    db = IndexDB(data_dir / DIRECTORY, 64 * MIB)
    db.open()
    return db


async def add_many(store: LedgerStore, ledger: int, first: int, count: int, size: int = 64) -> None:
    futures = [await store.begin_add(ledger, i, payload(ledger, i, size), last_add_confirmed=i - 1)
               for i in range(first, first + count)]
    await asyncio.gather(*futures)


async def test_a_crash_after_the_commit_before_the_journal_deletes_replays_idempotently(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The worst case of "replayed records LMDB already has": the commit keeps the replay position at
    # the start, so the whole journal replays over an index that holds every one of its effects.
    def commit_keeping_the_position(db: IndexDB, batch: CheckpointBatch) -> None:
        batch.journal_file_id = 0
        db.commit(batch)

    store = await open_store(tmp_path)
    monkeypatch.setattr(ledger_store, "commit_index", commit_keeping_the_position)
    monkeypatch.setattr(store.journal, "delete_files_before", lambda file_id: [])
    await add_many(store, 1, 0, 50)
    await add_many(store, 2, 0, 10)
    await store.add_entry(1, 7, b"a second copy")
    await store.fence(1)
    await store.delete_ledger(2)
    assert await store.checkpoint()
    await store.close(checkpoint=False)
    monkeypatch.undo()

    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.adds_replayed == 61
    expected = [(i, b"a second copy" if i == 7 else payload(1, i)) for i in range(50)]
    assert await read_all(store, 1, 0, 49) == expected
    info = store.ledger_info(1)
    assert (info.last_entry_id, info.last_add_confirmed, info.fenced) == (49, 48, True)
    with pytest.raises(LedgerNotFoundError):
        await read_all(store, 2, 0, 0)
    # The live-entry counts per file came out right: compacting deletes no file that is still read.
    await store.compact(threshold=1.0)
    assert await read_all(store, 1, 0, 49) == expected
    await store.close()
    store = await open_store(tmp_path)
    assert await read_all(store, 1, 0, 49) == expected
    await store.close()


async def test_a_crash_before_the_commit_replays_the_whole_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(tmp_path)
    await add_many(store, 1, 0, 20)
    assert await store.checkpoint()
    await add_many(store, 1, 20, 30)
    await store.fence(1)

    def dies(db: IndexDB, batch: CheckpointBatch) -> None:
        raise OSError("the node died before the index commit")

    monkeypatch.setattr(ledger_store, "commit_index", dies)
    with pytest.raises(OSError, match="died"):
        await store.checkpoint()
    await store.close(checkpoint=False)
    monkeypatch.undo()

    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.adds_replayed == 30
    assert await read_all(store, 1, 0, 100) == [(i, payload(1, i)) for i in range(50)]
    assert store.ledger_info(1).fenced
    await store.close()


async def test_a_full_index_fails_the_checkpoint_clearly_and_loses_nothing(tmp_path: Path) -> None:
    store = await open_store(tmp_path, index_map_size=256 * 1024)
    await add_many(store, 1, 0, 20_000, size=8)
    with pytest.raises(PersistenceError, match=r"index .* is full \(index_map_size 262144 bytes\).*raise "
                                               r"index_map_size and restart"):
        await store.checkpoint()
    assert await read_all(store, 1, 19_990, 19_999) == [(i, payload(1, i, 8)) for i in range(19_990, 20_000)]
    await store.close(checkpoint=False)

    store = await open_store(tmp_path, index_map_size=64 * MIB)
    assert await read_all(store, 1, 0, 19_999) == [(i, payload(1, i, 8)) for i in range(20_000)]
    await store.close()


async def test_an_old_snapshot_is_migrated_into_lmdb_once(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await add_many(store, 1, 0, 30)
    await add_many(store, 5, 0, 3)
    await store.fence(5)
    await store.close()
    # Rebuild the data dir as a node before LMDB left it: the same entry logs, the index in a snapshot.
    db = committed(tmp_path)
    journal_file_id = db.journal_file_id()
    assert journal_file_id is not None
    ledgers = {}
    for ledger_id, meta in db.ledgers().items():
        found = db.range(ledger_id, 0, meta.last_entry_id)
        locations = array("Q", [found.get(i, MISSING) for i in range(meta.last_entry_id + 1)])
        ledgers[ledger_id] = LedgerIndex(locations, meta.last_add_confirmed, meta.fenced)
    db.close()
    shutil.rmtree(tmp_path / DIRECTORY)
    save_snapshot(tmp_path, Snapshot(journal_file_id, ledgers))

    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.snapshot_loaded
    assert not (tmp_path / SNAPSHOT_NAME).exists()
    assert await read_all(store, 1, 0, 29) == [(i, payload(1, i)) for i in range(30)]
    assert store.ledger_info(5).fenced and store.ledger_info(5).last_entry_id == 2
    await store.close()
    store = await open_store(tmp_path)  # from LMDB alone now
    assert await read_all(store, 5, 0, 2) == [(i, payload(5, i)) for i in range(3)]
    await store.close()


async def test_a_deleted_ledger_leaves_its_key_range_empty(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await add_many(store, 7, 0, 40)
    await add_many(store, 8, 0, 5)
    assert await store.checkpoint()
    await store.delete_ledger(7)
    # The same id written again before the delete is committed: the old range must not show through.
    await store.add_entry(7, 0, b"new")
    assert await read_all(store, 7, 0, 39) == [(0, b"new")]
    with pytest.raises(EntryNotFoundError):
        await read_all(store, 7, 1, 1)
    assert await store.checkpoint()
    assert await read_all(store, 7, 0, 39) == [(0, b"new")]
    await store.delete_ledger(7)
    await store.close()

    db = committed(tmp_path)
    assert db.range(7, 0, 2**63) == {}
    assert sorted(db.ledgers()) == [8]
    assert len(db.range(8, 0, 2**63)) == 5
    db.close()


async def test_deleted_ledgers_committed_entries_free_their_files(tmp_path: Path) -> None:
    # More deletes in one checkpoint than LMDB has reader slots (126): they share one read.
    store = await open_store(tmp_path, entry_log_max_size=4096)
    for ledger in range(300):
        await add_many(store, 1000 + ledger, 0, 4, size=200)
    await add_many(store, 1, 0, 3)
    assert await store.checkpoint()
    files_before = len(list((tmp_path / "entrylog").iterdir()))
    for ledger in range(300):
        await store.delete_ledger(1000 + ledger)
    assert await store.checkpoint()
    await store.checkpoint()  # the files the deletes emptied go (a file is kept while it is written to)
    files_after = len(list((tmp_path / "entrylog").iterdir()))
    assert files_after < files_before / 10, (files_before, files_after)
    assert await read_all(store, 1, 0, 2) == [(i, payload(1, i)) for i in range(3)]
    await store.close()
    store = await open_store(tmp_path)
    assert await read_all(store, 1, 0, 2) == [(i, payload(1, i)) for i in range(3)]
    await store.close()


async def test_compaction_repointing_survives_a_restart(tmp_path: Path) -> None:
    store = await filled_store(tmp_path)
    assert (await store.compact()).files_compacted > 0
    await store.close()
    existing = {int(p.stem) for p in (tmp_path / "entrylog").iterdir() if p.stem.isdigit()}
    db = committed(tmp_path)
    for ledger_id in (LIVE, FULL):
        files = {location >> OFFSET_BITS for location in db.range(ledger_id, 0, ENTRIES).values()}
        assert files <= existing, f"ledger {ledger_id} points at deleted entry log files"
    assert DEAD not in db.ledgers()
    db.close()

    store = await open_store(tmp_path)
    await assert_live_data(store)
    await store.close()


async def test_the_overlay_is_bounded_by_an_early_checkpoint(tmp_path: Path) -> None:
    store = await open_store(tmp_path, index_overlay_max_entries=1000)  # the timer: an hour
    await add_many(store, 1, 0, 5000, size=8)
    deadline = asyncio.get_running_loop().time() + 10.0
    while store.checkpoint_count < 1:
        assert asyncio.get_running_loop().time() < deadline, "no checkpoint started with the overlay full"
        await asyncio.sleep(0.01)
    store_ledgers = store._ledgers  # the overlay is internal
    assert len(store_ledgers.index[1].changed) < 5000
    assert await read_all(store, 1, 0, 4999) == [(i, payload(1, i, 8)) for i in range(5000)]
    await store.close()


def rss_anon() -> int:
    """Anonymous resident memory (the heap: file-backed LMDB pages the kernel may drop are not in it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


async def test_resident_memory_does_not_grow_with_the_entries_held(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await add_many(store, 1, 0, 100_000, size=1)
    await store.checkpoint()
    before = rss_anon()
    # Half a million entries: an index held in memory would grow by over 60 MiB (dict entries of ~150 B).
    total = 500_000
    for first in range(100_000, total, 100_000):
        await add_many(store, 1, first, 100_000, size=1)
        await store.checkpoint()
    grown = rss_anon() - before
    print(f"RssAnon growth over {total - 100_000} entries: {grown / MIB:.1f} MiB")
    assert grown < 32 * MIB, f"anonymous memory grew {grown / MIB:.1f} MiB with the entries held"
    tail = range(total - 10, total)
    assert await read_all(store, 1, tail[0], tail[-1]) == [(i, payload(1, i, 1)) for i in tail]
    await store.close()
