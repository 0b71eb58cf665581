"""Bytes per ledger in each entry log file: what entry-log compaction (storage.node.compaction)
decides on, kept by the ledgers (storage.node.ledgers) as entries are logged."""

from __future__ import annotations

from collections.abc import Callable


class EntryLogUsage:
    """Bytes per ledger in each entry log file (BookKeeper's EntryLogMetadata): counted as entries
    are appended, or scanned from a file found at start-up. A file's live bytes are those of its
    ledgers that still exist. An entry replaced by a second copy still counts as live until its
    file is compacted: the estimate errs towards compacting less, never towards losing data (the
    copy step itself checks every entry against the index)."""

    def __init__(self) -> None:
        self._files: dict[int, dict[int, int]] = {}

    def added(self, file_id: int, ledger_id: int, size: int) -> None:
        ledgers = self._files.get(file_id)
        if ledgers is None:
            ledgers = self._files[file_id] = {}
        ledgers[ledger_id] = ledgers.get(ledger_id, 0) + size

    def known(self, file_id: int) -> bool:
        return file_id in self._files

    def set(self, file_id: int, usage: dict[int, int]) -> None:
        self._files[file_id] = usage

    def forget(self, file_id: int) -> None:
        self._files.pop(file_id, None)

    def ledgers(self, file_id: int) -> list[int]:
        return list(self._files.get(file_id, ()))

    def live_bytes(self, file_id: int, exists: Callable[[int], bool]) -> int:
        ledgers = self._files.get(file_id, {})
        for ledger_id in [lid for lid in ledgers if not exists(lid)]:
            del ledgers[ledger_id]  # deleted for good: ledger ids are never reused
        return sum(ledgers.values())
