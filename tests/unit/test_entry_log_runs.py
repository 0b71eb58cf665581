"""Reads of entries near each other in the entry log, one pread per run (EntryLog.read_run, used by
LedgerStore reads): the right bytes whatever lies between them, and every entry still checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from herald.common.codec.checksum import crc32c
from herald.common.errors import ChecksumError
from herald.storage.node.entry_log import RUN_MAX_GAP, EntryLog, EntryToWrite
from herald.storage.node.ledger_store import LedgerStore
from herald.storage.node.settings import StorageSettings


def sizes(count: int) -> list[int]:
    # Small ones, ones past a header's read-ahead (16 KiB), and ones past a whole run's gap.
    pattern = [0, 100, 3000, 20_000, 90, RUN_MAX_GAP + 10, 7]
    return [pattern[i % len(pattern)] for i in range(count)]


async def reopened(data_dir: Path) -> LedgerStore:
    store = LedgerStore(StorageSettings(data_dir=str(data_dir), checkpoint_interval=3600.0))
    await store.open()
    return store


async def read_all(store: LedgerStore, ledger: int, last: int, max_bytes: int = 0) -> list[tuple[int, bytes]]:
    return [e async for chunk in store.read_entries(ledger, 0, last, max_bytes=max_bytes) for e in chunk]


@pytest.mark.parametrize("max_bytes", [0, 25_000])
async def test_entries_of_interleaved_ledgers_read_back_exactly(tmp_path: Path, max_bytes: int) -> None:
    store = await reopened(tmp_path)
    written: dict[int, list[bytes]] = {1: [], 2: []}
    for i, size in enumerate(sizes(60)):
        for ledger in (1, 2):  # the two ledgers' entries alternate in the entry log
            data = os.urandom(size if ledger == 1 else 50)
            await store.add_entry(ledger, i, data)
            written[ledger].append(data)
    await store.close()
    store = await reopened(tmp_path)  # every read from the entry log now, none from memory
    try:
        for ledger in (1, 2):
            assert await read_all(store, ledger, 59, max_bytes) == list(enumerate(written[ledger]))
    finally:
        await store.close()


def test_a_damaged_entry_within_a_run_is_a_checksum_error(tmp_path: Path) -> None:
    log = EntryLog(tmp_path, max_file_size=1 << 24)
    log.open()
    try:
        payloads = [os.urandom(n) for n in (10, 500, 40_000, 10)]
        locations = log.append([EntryToWrite(3, i, p, crc32c(p)) for i, p in enumerate(payloads)])
        run = list(enumerate(locations))
        assert log.read_run(3, run) == payloads
        (path,) = tmp_path.glob("*.entrylog")
        data = bytearray(path.read_bytes())
        data[data.index(payloads[2]) + 30_000] ^= 0x01  # read within the run's one pread
        path.write_bytes(bytes(data))
        with pytest.raises(ChecksumError, match=r"entry 2 of ledger 3 .* is corrupt"):
            log.read_run(3, run)
        data[data.index(payloads[1]) + 10] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(ChecksumError, match=r"entry 1 of ledger 3 .* is corrupt"):
            log.read_run(3, run)
    finally:
        log.close()
