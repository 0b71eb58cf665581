"""The entry log on its own: locations, rotation, checksum verification on every read, sync and deletion."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.common.codec.checksum import crc32c
from herald.common.errors import ChecksumError, EntryNotFoundError
from herald.storage.node.entry_log import (
    FILE_MAGIC,
    HEADER_SIZE,
    SUFFIX,
    EntryLog,
    EntryToWrite,
    pack_location,
    unpack_location,
)


def entry(ledger: int, entry_id: int, data: bytes) -> EntryToWrite:
    return EntryToWrite(ledger, entry_id, data, crc32c(data))


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EntryLog]:
    entry_log = EntryLog(tmp_path, max_file_size=1 << 20)
    entry_log.open()
    yield entry_log
    entry_log.close()


def log_file(directory: Path, file_id: int) -> Path:
    return directory / f"{file_id:010d}{SUFFIX}"


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def test_locations_pack_file_and_offset() -> None:
    assert unpack_location(pack_location(7, 123_456_789)) == (7, 123_456_789)
    assert unpack_location(pack_location(2**24 - 2, 2**40 - 1)) == (2**24 - 2, 2**40 - 1)


def test_appended_entries_read_back(log: EntryLog) -> None:
    payloads = [os.urandom(n) for n in (0, 1, 100, 40_000, 300_000)]  # some beyond one read-ahead
    locations = log.append([entry(5, i, p) for i, p in enumerate(payloads)])
    assert unpack_location(locations[0])[1] == len(FILE_MAGIC)
    for i, (location, payload) in enumerate(zip(locations, payloads, strict=True)):
        assert log.read(location, 5, i) == payload


def test_files_rotate_by_size_and_a_restart_starts_a_new_file(tmp_path: Path) -> None:
    entry_log = EntryLog(tmp_path, max_file_size=10_000)
    entry_log.open()
    locations = [entry_log.append([entry(1, i, bytes([i]) * 3000)])[0] for i in range(10)]
    assert len({unpack_location(loc)[0] for loc in locations}) >= 3
    last_file = entry_log.current_file_id
    entry_log.close()

    reopened = EntryLog(tmp_path, max_file_size=10_000)
    reopened.open()
    assert reopened.current_file_id == last_file + 1
    for i, location in enumerate(locations):
        assert reopened.read(location, 1, i) == bytes([i]) * 3000
    reopened.close()


@pytest.mark.parametrize("where", ["data", "header", "header crc"])
def test_a_flipped_byte_is_a_checksum_error_never_data(log: EntryLog, tmp_path: Path, where: str) -> None:
    (location,) = log.append([entry(9, 0, b"precious bytes" * 100)])
    (good,) = log.append([entry(9, 1, b"neighbour")])
    file_id, offset = unpack_location(location)
    flip(log_file(tmp_path, file_id), offset + {"data": HEADER_SIZE + 700, "header": 3, "header crc": 25}[where])
    with pytest.raises(ChecksumError, match=r"entry 0 of ledger 9 .* is corrupt"):
        log.read(location, 9, 0)
    assert log.read(good, 9, 1) == b"neighbour"


def test_a_truncated_file_is_a_checksum_error(log: EntryLog, tmp_path: Path) -> None:
    (location,) = log.append([entry(9, 0, b"x" * 50_000)])
    file_id, offset = unpack_location(location)
    os.truncate(log_file(tmp_path, file_id), offset + HEADER_SIZE + 100)
    with pytest.raises(ChecksumError, match="cut short"):
        log.read(location, 9, 0)
    os.truncate(log_file(tmp_path, file_id), offset + 10)
    with pytest.raises(ChecksumError, match="cut short"):
        log.read(location, 9, 0)


def test_a_location_holding_another_entry_is_a_checksum_error(log: EntryLog) -> None:
    (location,) = log.append([entry(9, 4, b"four")])
    with pytest.raises(ChecksumError, match="holds entry 4 of ledger 9 instead"):
        log.read(location, 9, 5)


def test_reading_from_a_missing_file_is_entry_not_found(log: EntryLog) -> None:
    with pytest.raises(EntryNotFoundError, match="entry log file 999 is gone"):
        log.read(pack_location(999, 8), 1, 0)


def test_sync_closes_rotated_files_and_only_closed_unused_files_are_deleted(tmp_path: Path) -> None:
    entry_log = EntryLog(tmp_path, max_file_size=1000)
    entry_log.open()
    first = entry_log.current_file_id
    (old,) = entry_log.append([entry(1, 0, b"a" * 2000)])
    entry_log.append([entry(1, 1, b"b" * 10)])  # rotates: the first file is no longer written
    current = entry_log.current_file_id
    assert current == first + 1
    # Not yet synced: the rotated file is still open for writing and must not be deleted.
    assert entry_log.open_for_writing() == [first, current]
    assert entry_log.delete_files([first]) == []
    assert entry_log.read(old, 1, 0) == b"a" * 2000

    entry_log.sync(entry_log.open_for_writing())
    assert entry_log.open_for_writing() == [current]
    assert entry_log.delete_files([first, current]) == [first]
    assert not log_file(tmp_path, first).exists()
    assert entry_log.file_ids() == [current]
    with pytest.raises(EntryNotFoundError):
        entry_log.read(old, 1, 0)
    entry_log.close()


def test_deleting_a_file_while_it_is_being_read_keeps_the_reader_working(log: EntryLog, tmp_path: Path) -> None:
    (location,) = log.append([entry(1, 0, b"still here")])
    log.sync(log.open_for_writing())
    file_id = unpack_location(location)[0]
    reader = log._acquire(file_id, 1, 0)  # a read in progress on another thread
    log._new_file(log.current_file_id + 1)
    log.sync(log.open_for_writing())
    assert log.delete_files([file_id]) == [file_id]
    assert os.pread(reader.fd, 4, len(FILE_MAGIC)) != b""  # its fd stays valid until released
    log._release(reader)
    with pytest.raises(OSError):
        os.fstat(reader.fd)
