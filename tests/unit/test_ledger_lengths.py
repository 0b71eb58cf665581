"""The writer's length of a ledger piggybacked with each add (issue 21): the storage node keeps it
with the ledger's last entry through the journal (replayed after a crash, a torn length cut off)
and the index (after a checkpoint), and knows none for adds that carried none."""

from __future__ import annotations

import asyncio
from pathlib import Path

from herald.common.codec.checksum import crc32c
from herald.storage.node.journal import SUFFIX as JOURNAL_SUFFIX
from herald.storage.node.journal import JournalRecord, RecordKind, encode_header, encode_length
from herald.storage.node.ledger_store import LedgerStore
from herald.storage.node.settings import StorageSettings


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


async def open_store(data_dir: Path) -> LedgerStore:
    store = LedgerStore(StorageSettings(data_dir=str(data_dir), checkpoint_interval=3600.0, min_free_bytes=0))
    await store.open()
    return store


async def test_the_length_of_the_last_entry_survives_a_replay_and_a_checkpoint(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    total = 0
    for i in range(5):
        total += 10 + i
        await store.add_entry(1, i, b"x" * (10 + i), last_add_confirmed=i - 1, length=total)
    await store.add_entry(2, 0, b"old writer")  # no length given
    assert store.ledger_info(1).length == total
    assert store.ledger_info(2).length == -1
    # A copy of an earlier entry does not change it; a recovery's copy of the last one may.
    await store.add_entry(1, 2, b"x" * 12, length=10 + 11 + 12, recovery=True)
    assert store.ledger_info(1).length == total
    await store.close(checkpoint=False)  # as a crash: the journal is replayed

    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.adds_replayed == 7
    assert (store.ledger_info(1).last_entry_id, store.ledger_info(1).length) == (4, total)
    assert store.ledger_info(2).length == -1
    await store.close()  # checkpointed: the index holds it, the journal is gone

    store = await open_store(tmp_path)
    assert store.recovery is not None and store.recovery.records_replayed == 0
    assert store.ledger_info(1).length == total
    assert store.ledger_info(2).length == -1
    await store.close()


async def test_a_torn_length_ends_the_journal_before_its_record(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await store.add_entry(1, 0, b"first", length=5)
    await store.close(checkpoint=False)
    (path,) = sorted((tmp_path / "journal").glob(f"*{JOURNAL_SUFFIX}"))
    torn = JournalRecord(RecordKind.ADD, 1, 1, 0, b"second", length=11)
    torn.data_crc = crc32c(torn.data)
    # The crash cut the record in its length.
    await asyncio.to_thread(append_bytes, path, encode_header(torn) + torn.data + encode_length(torn)[:5])

    store = await open_store(tmp_path)
    assert (store.ledger_info(1).last_entry_id, store.ledger_info(1).length) == (0, 5)
    await store.close()
