"""A compacted ledger: one storage ledger holding, in the topic's order, every entry with at least
one message that survived compaction, each stored as its ORIGINAL position followed by the entry
(rewritten with the non-surviving messages flagged compacted-out: herald.common.codec.compaction).

    compacted entry = ledger_id:i64 | entry_id:i64 | stored entry (either format)

`CompactedLedgerWriter` fills a new ledger (adds pipelined, a bounded number in flight) and closes
it; `CompactedView` reads one back by original position (binary search over the ledger's entries,
which are in original-position order), immutable once published."""

from __future__ import annotations

import asyncio
import struct
from collections import OrderedDict

from herald.broker.core.ledger_list import Position
from herald.broker.core.ledger_reader import LedgerHandle, LedgerStorage
from herald.common.errors import HeraldError, InvalidArgumentError, PersistenceError

_POSITION = struct.Struct(">qq")
# Adds in flight at once while writing a compacted ledger: enough to keep storage's group commit
# busy, few enough that a compaction never holds more than a few MiB of entries in memory.
MAX_ADDS_IN_FLIGHT = 256
# Original positions of compacted entries remembered for binary searches (entry id -> position).
POSITION_CACHE_SIZE = 4096


def encode_compacted(position: Position, entry: bytes) -> bytes:
    return _POSITION.pack(position.ledger_id, position.entry_id) + entry


def decode_compacted(data: bytes) -> tuple[Position, bytes]:
    """The original position and the stored entry of a compacted ledger's entry."""
    if len(data) < _POSITION.size:
        raise InvalidArgumentError(f"a compacted ledger's entry of {len(data)} bytes has no position")
    ledger_id, entry_id = _POSITION.unpack_from(data)
    return Position(ledger_id, entry_id), data[_POSITION.size:]


class CompactedLedgerWriter:
    """Writes one new compacted ledger: `add` in original-position order, then `finish`. A failed
    add fails the next `add` or `finish` (PersistenceError naming the ledger)."""

    def __init__(self, handle: LedgerHandle) -> None:
        self.handle = handle
        self.entries = 0
        self.bytes = 0
        self._in_flight = 0
        self._error: HeraldError | None = None
        self._room = asyncio.Event()
        self._room.set()

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    async def add(self, position: Position, entry: bytes) -> None:
        self._check()
        while self._in_flight >= MAX_ADDS_IN_FLIGHT:
            self._room.clear()
            await self._room.wait()
            self._check()
        data = encode_compacted(position, entry)
        self._in_flight += 1
        self.entries += 1
        self.bytes += len(data)
        try:
            self.handle.add_entry_nowait(data, self._written)
        except HeraldError as exc:
            self._in_flight -= 1
            self._error = exc
            raise self._failure() from exc

    def _written(self, entry_id: int, error: HeraldError | None) -> None:
        self._in_flight -= 1
        if error is not None and self._error is None:
            self._error = error
        self._room.set()

    def _check(self) -> None:
        if self._error is not None:
            raise self._failure()

    def _failure(self) -> PersistenceError:
        return PersistenceError(f"writing compacted ledger {self.ledger_id} failed: {self._error}")

    async def finish(self) -> None:
        """Wait for every add, then close the ledger (recorded CLOSED at its last entry)."""
        while self._in_flight:
            self._room.clear()
            await self._room.wait()
        self._check()
        try:
            await self.handle.close()
        except HeraldError as exc:
            raise PersistenceError(f"closing compacted ledger {self.ledger_id} failed: {exc}") from exc


class CompactedView:
    """One published compacted ledger: the latest message of each key up to `horizon` (the last
    position of the topic the compaction covered). Immutable; a new compaction publishes a new
    view and the topic swaps its reference."""

    def __init__(self, handle: LedgerHandle | None, ledger_id: int, horizon: Position, entries: int) -> None:
        self._handle = handle
        self.ledger_id = ledger_id
        self.horizon = horizon
        self.entries = entries
        self._positions: OrderedDict[int, Position] = OrderedDict()
        # After a read ending at compacted entry i (original position p): the next read usually
        # starts right after p, and its first entry is then i + 1.
        self._hint: tuple[Position, int] | None = None

    @classmethod
    async def open(cls, storage: LedgerStorage, ledger_id: int, horizon: Position, entries: int) -> CompactedView:
        handle = await storage.open_ledger(ledger_id, recover=False) if entries else None
        return cls(handle, ledger_id, horizon, entries)

    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """The view's entries whose original position is >= start, in order (at most max_entries):
        (original position, stored entry with its compacted-out messages flagged)."""
        if max_entries < 1 or self._handle is None:
            return []
        first = await self._lower_bound(start)
        if first >= self.entries:
            return []
        last = min(self.entries - 1, first + max_entries - 1)
        result = []
        for entry_id, data in await self._handle.read_entries(first, last):
            position, entry = decode_compacted(data)
            self._remember(entry_id, position)
            result.append((position, entry))
        if result:
            self._hint = (result[-1][0], first + len(result))
        return result

    async def read_all(self, window: int) -> list[list[tuple[Position, bytes]]]:
        """Every entry, in windows of `window` (for tests and tools; a compaction streams instead)."""
        windows = []
        start = Position(-1, -1)
        while batch := await self.read_entries(start, window):
            windows.append(batch)
            start = Position(batch[-1][0].ledger_id, batch[-1][0].entry_id + 1)
        return windows

    async def _lower_bound(self, start: Position) -> int:
        """The first compacted entry id whose original position is >= start (self.entries: none)."""
        low, high = 0, self.entries
        if self._hint is not None and start > self._hint[0]:
            low = self._hint[1]
        while low < high:
            middle = (low + high) // 2
            if await self._original_position(middle) < start:
                low = middle + 1
            else:
                high = middle
        return low

    async def _original_position(self, entry_id: int) -> Position:
        known = self._positions.get(entry_id)
        if known is not None:
            return known
        assert self._handle is not None
        (_, data), = await self._handle.read_entries(entry_id, entry_id)
        position, _ = decode_compacted(data)
        self._remember(entry_id, position)
        return position

    def _remember(self, entry_id: int, position: Position) -> None:
        self._positions[entry_id] = position
        if len(self._positions) > POSITION_CACHE_SIZE:
            self._positions.popitem(last=False)
