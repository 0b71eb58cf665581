"""The entry log off the acknowledgement path: an add is answered once the journal holds it, before
its entry log write; reads, LACs and fences see it at once (from memory); a crash before the entry
log write loses nothing (the journal replays it); a failed entry log write stops the node taking
writes but keeps what it acknowledged. And the ledgers' two steps (journaled, then logged) alone."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from herald.common.errors import PersistenceError
from herald.storage.node.entry_log import pack_location
from herald.storage.node.index import MISSING
from herald.storage.node.journal import JournalRecord, RecordKind
from herald.storage.node.ledger_store import LedgerInfo, LedgerStore
from herald.storage.node.ledgers import Ledgers

from tests.unit.test_ledger_store import DEADLINE, open_store, payload, read_all

Append = Callable[[Sequence[object]], list[int]]


class HeldAppend:
    """Wraps the entry log's append: the first call blocks (before writing anything) until
    released, as a slow disk would; later calls go straight through."""

    def __init__(self, real: Append) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, entries: Sequence[object]) -> list[int]:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            if not self.release.wait(DEADLINE):
                raise AssertionError("test never released the held entry log append")
        return self.real(entries)


def hold_entry_log(store: LedgerStore, monkeypatch: pytest.MonkeyPatch) -> HeldAppend:
    held = HeldAppend(store.entry_log.append)
    monkeypatch.setattr(store.entry_log, "append", held)
    return held


async def test_an_add_is_answered_before_its_entry_log_write_and_read_from_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(tmp_path)
    await store.add_entry(1, 0, payload(1, 0))
    await store.checkpoint()  # entry 0 is in the entry log: the next append is entry 1's
    held = hold_entry_log(store, monkeypatch)
    # Answered although its entry log write is held: the journal alone made it durable.
    await asyncio.wait_for(store.add_entry(1, 1, payload(1, 1), last_add_confirmed=0), DEADLINE)
    assert await asyncio.to_thread(held.entered.wait, DEADLINE)  # its entry log write is under way, held
    # Everything that looks at the ledger sees the entry already (its bytes from memory).
    assert await read_all(store, 1, 0, 1) == [(0, payload(1, 0)), (1, payload(1, 1))]
    assert store.ledger_info(1) == LedgerInfo(last_entry_id=1, last_add_confirmed=0, fenced=False)
    held.release.set()
    assert await store.fence(1) == 1
    await store.checkpoint()  # runs after the held write: the entry is in the entry log now
    assert await read_all(store, 1, 0, 1) == [(0, payload(1, 0)), (1, payload(1, 1))]
    await store.close()


async def test_an_add_answered_before_its_entry_log_write_survives_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(tmp_path / "node")
    await store.add_entry(1, 0, payload(1, 0))
    await store.checkpoint()  # entry 0 in the entry log and the snapshot
    held = hold_entry_log(store, monkeypatch)
    await asyncio.wait_for(store.add_entry(1, 1, payload(1, 1)), DEADLINE)
    assert await asyncio.to_thread(held.entered.wait, DEADLINE)
    # The disk as a crash now would leave it: entry 1 answered, in the journal, in no entry log.
    await asyncio.to_thread(shutil.copytree, tmp_path / "node", tmp_path / "crashed")
    held.release.set()
    await store.close()

    recovered = await open_store(tmp_path / "crashed")
    assert recovered.recovery is not None and recovered.recovery.adds_replayed == 1
    assert await read_all(recovered, 1, 0, 1) == [(0, payload(1, 0)), (1, payload(1, 1))]
    await recovered.close()


async def test_a_failed_entry_log_write_stops_writes_but_keeps_what_was_acknowledged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(tmp_path)

    # An I/O error: ENOSPC is not fatal (the adds wait in memory for space: storage.node.space,
    # tests/integration/test_storage_disk_full.py); any other failure of the entry log is.
    def broken(entries: Sequence[object]) -> list[int]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store.entry_log, "append", broken)
    await asyncio.wait_for(store.add_entry(1, 0, payload(1, 0)), DEADLINE)  # the journal holds it: answered
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while store.problem() is None:
        assert asyncio.get_running_loop().time() < deadline, "the entry log failure was never reported"
        await asyncio.sleep(0.01)
    assert "entry log could not be written" in (store.problem() or "")
    with pytest.raises(PersistenceError, match=r"entry log could not be written: .*Input/output error.*restarted"):
        await store.add_entry(1, 1, payload(1, 1))
    with pytest.raises(PersistenceError, match="entry log could not be written"):
        await store.fence(1)
    assert await read_all(store, 1, 0, 0) == [(0, payload(1, 0))]  # still served, from memory
    await store.close()
    monkeypatch.undo()

    restarted = await open_store(tmp_path)  # the journal replays what the entry log missed
    assert restarted.problem() is None
    assert await read_all(restarted, 1, 0, 0) == [(0, payload(1, 0))]
    await restarted.add_entry(1, 1, payload(1, 1))
    await restarted.close()


# ---- the ledgers' two steps (storage.node.ledgers), without files -------------------------------


def add(ledger: int, entry: int, data: bytes = b"x", lac: int = -1) -> JournalRecord:
    return JournalRecord(RecordKind.ADD, ledger, entry, lac, data)


def test_a_snapshot_leaves_out_the_entries_not_logged_yet() -> None:
    ledgers = Ledgers()
    first, _ = ledgers.journaled([add(1, 0), add(1, 1)])
    ledgers.logged(first, [pack_location(1, 8), pack_location(1, 100)])
    ledgers.journaled([add(1, 2, lac=1), add(2, 0)])
    assert ledgers.index[1].last_entry_id == 2 and ledgers.index[1].last_add_confirmed == 1
    snapshot = ledgers.checkpoint_batch(journal_file_id=7)  # what the checkpoint commits to the index
    # The journal from file 7 on holds entries 2 of ledger 1 and 0 of ledger 2: a restart replays them.
    assert list(snapshot.locations[1].values()) == [pack_location(1, 8), pack_location(1, 100)]
    assert snapshot.ledgers[1].last_add_confirmed == 1
    assert list(snapshot.locations[2].values()) == []
    assert ledgers.file_refs[1] == 2


def test_an_entry_log_write_that_lost_to_a_delete_or_a_later_copy_is_dead_bytes() -> None:
    ledgers = Ledgers()
    deleted, _ = ledgers.journaled([add(3, 0)])
    ledgers.journaled([JournalRecord(RecordKind.DELETE, 3)])
    ledgers.logged(deleted, [pack_location(1, 8)])
    assert 3 not in ledgers.index and ledgers.file_refs[1] == 0

    first, _ = ledgers.journaled([add(4, 0, b"first")])
    second, _ = ledgers.journaled([add(4, 0, b"second")])
    assert ledgers.lookup(ledgers.index[4], 0, 0)[0][2] == b"second"
    ledgers.logged(first, [pack_location(1, 40)])  # the first copy lands: nothing points at it
    ledgers.logged(second, [pack_location(1, 80)])
    assert ledgers.index[4].get(0) == pack_location(1, 80) and ledgers.file_refs[1] == 1
    assert ledgers.index[4].get(1) == MISSING
