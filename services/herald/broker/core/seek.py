"""Where a seek, a cursor reset or a reader's start lands in a managed ledger: a target (a position,
a publish time or an edge) resolved to the first entry to read.

A position is taken as "the first entry at or after it": one in a ledger retention deleted means the
first entry still kept, one past the end means the end (where the next entry will be). A publish
time is found by binary search over the entries (Pulsar's findNewestMatching does the same): the
producer stamps publish times, so they rise with the log in practice, and a search reads only
about log2(entries) entries.
"""

from __future__ import annotations

from typing import Protocol

from herald.broker.core.cursor import InitialPosition, PublishTime, ResetTarget
from herald.broker.core.ledger_list import LedgerInfo, Position
from herald.common.codec.entry import read_metadata
from herald.common.codec.message_id import check_position
from herald.common.errors import HeraldError, InvalidArgumentError


class SeekableLedger(Protocol):
    """What resolving a target needs of the managed ledger."""

    @property
    def last_confirmed_position(self) -> Position: ...
    @property
    def first_position(self) -> Position: ...
    @property
    def ledgers(self) -> list[LedgerInfo]: ...
    def normalize(self, position: Position) -> Position: ...
    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]: ...


def end_position(ledger: SeekableLedger) -> Position:
    """Where the next entry will be: a reader started here sees only new entries."""
    last = ledger.last_confirmed_position
    return ledger.normalize(Position(last.ledger_id, last.entry_id + 1))


def first_at_or_after(ledger: SeekableLedger, position: Position) -> Position:
    """The first entry at or after `position`, the end when it is past the last entry."""
    return min(ledger.normalize(position), end_position(ledger))


def first_after(ledger: SeekableLedger, position: Position) -> Position:
    """The first entry after `position` (an exclusive start)."""
    return first_at_or_after(ledger, Position(position.ledger_id, position.entry_id + 1))


async def resolve_target(ledger: SeekableLedger, target: ResetTarget) -> Position:
    """The first entry a cursor moved to `target` reads."""
    if isinstance(target, InitialPosition):
        return ledger.first_position if target is InitialPosition.EARLIEST else end_position(ledger)
    if isinstance(target, PublishTime):
        return await find_by_publish_time(ledger, target.ms)
    if isinstance(target, Position):
        check_position(target.ledger_id, target.entry_id)
        return first_at_or_after(ledger, target)
    raise InvalidArgumentError(f"cannot seek to {target!r}: give a position, a publish time or an edge")


async def find_by_publish_time(ledger: SeekableLedger, publish_time_ms: int) -> Position:
    """The first entry published at or after `publish_time_ms` (unix ms); the end when none is."""
    if publish_time_ms < 0:
        raise InvalidArgumentError(f"publish time {publish_time_ms} is invalid: give unix milliseconds >= 0")
    last = ledger.last_confirmed_position
    # The kept entries as (ledger id, entries) runs, counted up to the last durable entry.
    runs: list[tuple[int, int]] = []
    for info in ledger.ledgers:
        count = info.entries if info.ledger_id != last.ledger_id else min(info.entries, last.entry_id + 1)
        if count > 0 and info.ledger_id <= last.ledger_id:
            runs.append((info.ledger_id, count))
    total = sum(count for _, count in runs)

    def at(index: int) -> Position:
        for ledger_id, count in runs:
            if index < count:
                return Position(ledger_id, index)
            index -= count
        raise IndexError(index)

    low, high = 0, total
    while low < high:
        middle = (low + high) // 2
        if await _publish_time(ledger, at(middle)) >= publish_time_ms:
            high = middle
        else:
            low = middle + 1
    return at(low) if low < total else end_position(ledger)


async def _publish_time(ledger: SeekableLedger, position: Position) -> int:
    """An entry's publish time; an entry whose metadata cannot be read counts as the oldest."""
    entries = await ledger.read_entries(position, 1)
    if not entries:
        return -1
    try:
        return int(read_metadata(entries[0][1], verify=False).publish_time)
    except HeraldError:
        return -1
