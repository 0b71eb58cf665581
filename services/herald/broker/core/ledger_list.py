"""A managed ledger's list of ledgers and the position arithmetic over it.

Positions are (ledger id, entry id), ordered as tuples; ledger ids only grow along the list. The
list may start after ledgers that retention deleted: a position in (or before) a ledger no longer
listed means "before the first entry still kept", so a cursor whose mark-delete position was in
a deleted ledger reads on from the first kept entry.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple


class Position(NamedTuple):
    """Where an entry lives; ordered like (ledger id, entry id)."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


BEFORE_FIRST = Position(-1, -1)


@dataclass(slots=True)
class LedgerInfo:
    """One ledger of the list; for the open ledger, entries and size count confirmed adds."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    created_at: float = 0.0
    closed_at: float = 0.0  # 0 while open: retention ages a ledger from its close

    @property
    def last_position(self) -> Position:
        """Its last entry ((ledger, -1) when it has none)."""
        return Position(self.ledger_id, self.entries - 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class LedgerList:
    """The ledgers in id order: the last one is the open one while the managed ledger is writable."""

    __slots__ = ("_ids", "_ledgers")

    def __init__(self, ledgers: Iterable[LedgerInfo] = ()) -> None:
        self._ledgers: list[LedgerInfo] = []
        self._ids: list[int] = []  # ledger ids, for bisect
        for info in ledgers:
            self.append(info)

    def __len__(self) -> int:
        return len(self._ledgers)

    def __iter__(self) -> Iterator[LedgerInfo]:
        return iter(self._ledgers)

    def __getitem__(self, index: int) -> LedgerInfo:
        return self._ledgers[index]

    @property
    def ids(self) -> list[int]:
        return list(self._ids)

    def append(self, info: LedgerInfo) -> None:
        self._ledgers.append(info)
        self._ids.append(info.ledger_id)

    def pop_last(self) -> LedgerInfo:
        self._ids.pop()
        return self._ledgers.pop()

    def remove_first(self, count: int) -> list[LedgerInfo]:
        removed = self._ledgers[:count]
        del self._ledgers[:count], self._ids[:count]
        return removed

    def find(self, ledger_id: int) -> LedgerInfo | None:
        i = bisect.bisect_left(self._ids, ledger_id)
        if i < len(self._ids) and self._ids[i] == ledger_id:
            return self._ledgers[i]
        return None

    def to_json(self, extra: LedgerInfo | None = None) -> list[dict[str, Any]]:
        items = [info.to_json() for info in self._ledgers]
        if extra is not None:
            items.append(extra.to_json())
        return items

    # ---- positions ----

    @property
    def last_confirmed_position(self) -> Position:
        """The last durable entry; (first ledger, -1) when there is none yet."""
        for info in reversed(self._ledgers):
            if info.entries > 0:
                return info.last_position
        return Position(self._ids[0], -1) if self._ids else BEFORE_FIRST

    @property
    def first_position(self) -> Position:
        """Where the first entry is (or will be)."""
        return self.normalize(Position(-1, 0))

    def normalize(self, position: Position) -> Position:
        """The first entry at or after `position`, skipping empty and missing (deleted) ledgers;
        past the end, the position the next entry of the last ledger would have."""
        ledgers = self._ledgers
        if not ledgers:
            return position
        i = bisect.bisect_left(self._ids, position.ledger_id)
        if i < len(ledgers) and ledgers[i].ledger_id == position.ledger_id:
            if position.entry_id < ledgers[i].entries or i == len(ledgers) - 1:
                return Position(position.ledger_id, max(position.entry_id, 0))
            i += 1
        while i < len(ledgers):
            if ledgers[i].entries > 0 or i == len(ledgers) - 1:
                return Position(ledgers[i].ledger_id, 0)
            i += 1
        last = ledgers[-1]
        return Position(last.ledger_id, last.entries)

    def has_entry(self, position: Position) -> bool:
        info = self.find(position.ledger_id)
        return info is not None and 0 <= position.entry_id < info.entries

    def number_of_entries(self, after: Position, up_to: Position) -> int:
        """How many entries p there are with after < p <= up_to."""
        if up_to <= after:
            return 0
        ledgers = self._ledgers
        count = 0
        i = bisect.bisect_left(self._ids, after.ledger_id)
        while i < len(ledgers) and ledgers[i].ledger_id <= up_to.ledger_id:
            info = ledgers[i]
            low = after.entry_id + 1 if info.ledger_id == after.ledger_id else 0
            high = info.entries - 1
            if info.ledger_id == up_to.ledger_id:
                high = min(high, up_to.entry_id)
            if high >= low:
                count += high - low + 1
            i += 1
        return count

    def size_after(self, position: Position) -> int:
        """Bytes of the entries after `position`: every ledger after its ledger, plus the share of
        its own ledger past it, estimated from that ledger's average entry size."""
        ledgers = self._ledgers
        i = bisect.bisect_left(self._ids, position.ledger_id)
        total = 0
        if i < len(ledgers) and ledgers[i].ledger_id == position.ledger_id:
            info = ledgers[i]
            remaining = info.entries - (position.entry_id + 1)
            if remaining > 0 and info.entries > 0:
                total += info.size * min(remaining, info.entries) // info.entries
            i += 1
        return total + sum(info.size for info in ledgers[i:])

    @property
    def number_of_entries_total(self) -> int:
        return sum(info.entries for info in self._ledgers)

    @property
    def size_total(self) -> int:
        return sum(info.size for info in self._ledgers)


def managed_ledger_key(name: str) -> str:
    """Where a managed ledger's record lives in the metadata store."""
    return f"/managed-ledgers/{name}"


def encode_record(ledgers: list[dict[str, Any]], terminated: bool) -> bytes:
    """A managed ledger's record: its list of ledgers (LedgerList.to_json) and whether it was
    terminated."""
    return json.dumps({"ledgers": ledgers, "terminated": terminated}, separators=(",", ":")).encode()


def decode_record(value: bytes) -> tuple[list[LedgerInfo], bool]:
    """The ledgers and the terminated flag of a record encode_record wrote."""
    record = json.loads(value)
    return [LedgerInfo(**item) for item in record.get("ledgers", [])], bool(record.get("terminated", False))
