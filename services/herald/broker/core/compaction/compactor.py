"""The two-phase compactor (Pulsar's TwoPhaseCompactor): one run over a topic up to a horizon.

Phase one reads the current compacted view (if any), then the managed ledger after the previous
horizon up to the new one, and maps each key to the position (entry, batch index) of its latest
message; a message with an empty (Herald) or null/empty (Pulsar) value deletes its key. Phase two
reads the same entries again and writes each one holding a surviving message to a NEW ledger
(compacted_ledger), rewritten with the others flagged compacted-out; an unbatched message that
does not survive is not written. Messages without a key are not kept, as Pulsar does since 3.2
(topicCompactionRetainNullKey=false, PIP-318); nor are encrypted entries and chunks, which the
broker cannot read. Reads go by windows and the loop yields after each: a run over a million
messages never holds the broker's event loop for long."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from herald.broker.core.compaction.compacted_ledger import CompactedLedgerWriter, CompactedView
from herald.broker.core.ledger_list import Position
from herald.broker.core.ledger_reader import LedgerStorage
from herald.broker.core.managed_ledger import ManagedLedger
from herald.common.codec.compaction import compact_entry, compactable_records, is_tombstone
from herald.common.errors import HeraldError

log = logging.getLogger(__name__)

# Entries read per storage read, at most, and about how many bytes: a standalone serves the read
# on the broker's own loop, and a read of megabytes would hold it for tens of milliseconds.
READ_WINDOW = 100
READ_WINDOW_BYTES = 256 * 1024
# Bytes of entries decoded (or rewritten) between two yields to the event loop: about a
# millisecond of work, whatever the batch sizes.
YIELD_EVERY_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class CompactionResult:
    ledger_id: int
    horizon: Position
    entries_written: int
    bytes_written: int
    entries_read: int  # per phase
    messages_read: int
    keys_kept: int
    keys_removed: int  # keys whose latest message deleted them
    unreadable_entries: int  # encrypted, chunks or corrupt: left out


class TwoPhaseCompactor:
    def __init__(self, ledger: ManagedLedger, storage: LedgerStorage, limit: int, window: int = READ_WINDOW) -> None:
        self._ledger = ledger
        self._storage = storage
        self._limit = limit  # the most bytes an entry's payload may decompress to
        average = ledger.storage_size // max(1, ledger.number_of_entries_total)
        self._window = max(1, min(window, READ_WINDOW_BYTES // max(1, average)))
        self._unreadable = 0

    async def compact(
        self, previous: CompactedView | None, horizon: Position, on_ledger_created: Callable[[int], Awaitable[None]],
    ) -> CompactionResult:
        """Compact up to `horizon`. `on_ledger_created(id)` runs before anything is written to the
        new ledger (the state records it as pending); on failure the new ledger is deleted."""
        after = previous.horizon if previous is not None else Position(-1, -1)
        latest: dict[str, tuple[Position, int] | None] = {}
        entries = messages = 0
        work = 0
        async for window in self._entries(previous, after, horizon):
            for position, entry in window:
                entries += 1
                messages += self._scan(position, entry, latest)
                work += len(entry)
                if work >= YIELD_EVERY_BYTES:
                    work = 0
                    await asyncio.sleep(0)
        survivors: dict[Position, set[int]] = {}
        for found in latest.values():
            if found is not None:
                survivors.setdefault(found[0], set()).add(found[1])
        kept = sum(len(indexes) for indexes in survivors.values())
        unreadable = self._unreadable
        persistence = self._ledger.persistence
        handle = await self._storage.create_ledger(*persistence, {"compacted-ledger": self._ledger.name})
        try:
            await on_ledger_created(handle.ledger_id)
            writer = CompactedLedgerWriter(handle)
            if survivors:
                await self._phase_two(previous, after, horizon, survivors, writer)
            await writer.finish()
        except BaseException:
            await self._delete_quietly(handle.ledger_id)
            raise
        return CompactionResult(handle.ledger_id, horizon, writer.entries, writer.bytes, entries, messages, kept,
                                len(latest) - kept, unreadable)

    async def _phase_two(
        self, previous: CompactedView | None, after: Position, horizon: Position,
        survivors: dict[Position, set[int]], writer: CompactedLedgerWriter,
    ) -> None:
        last = max(survivors)
        work = 0
        async for window in self._entries(previous, after, last):
            for position, entry in window:
                keep = survivors.get(position)
                if not keep:
                    continue
                try:
                    compacted = compact_entry(entry, keep, self._limit)
                except HeraldError as exc:  # read in phase one: only storage corrupting it since
                    log.warning("compaction of %s: entry %s is left out: it does not read (%s)", self._ledger.name,
                                position, exc)
                    continue
                if compacted is not None:
                    await writer.add(position, compacted)
                work += len(entry)
                if work >= YIELD_EVERY_BYTES:
                    work = 0
                    await asyncio.sleep(0)

    def _scan(self, position: Position, entry: bytes, latest: dict[str, tuple[Position, int] | None]) -> int:
        """Phase one over one entry: each keyed message becomes its key's latest (None: deleted).
        Returns how many keyed messages it held. An entry that does not read is left out (its
        messages read before the error stay counted)."""
        count = 0
        try:
            records = compactable_records(entry, self._limit)
            if records is None:
                self._unreadable += 1
                return 0
            for index, record in enumerate(records):
                key = record.key
                if key is None or record.compacted_out:
                    continue
                count += 1
                latest[key] = None if is_tombstone(record) else (position, index)
        except HeraldError as exc:
            log.warning("compaction of %s: entry %s is left out: it does not read (%s)", self._ledger.name,
                        position, exc)
            self._unreadable += 1
        return count

    async def _entries(
        self, previous: CompactedView | None, after: Position, horizon: Position,
    ) -> AsyncIterator[list[tuple[Position, bytes]]]:
        """Windows of (original position, entry): the previous view's, then the managed ledger's
        after `after` up to `horizon`."""
        if previous is not None:
            start = Position(-1, -1)
            while window := await previous.read_entries(start, self._window):
                window = [(p, e) for p, e in window if p <= horizon]
                if not window:
                    return
                yield window
                start = Position(window[-1][0].ledger_id, window[-1][0].entry_id + 1)
        ledger = self._ledger
        position = ledger.normalize(ledger.next_position(after))
        while position <= horizon:
            window = [(p, e) for p, e in await ledger.read_entries(position, self._window) if p <= horizon]
            if not window:
                return
            yield window
            position = ledger.normalize(ledger.next_position(window[-1][0]))

    async def _delete_quietly(self, ledger_id: int) -> None:
        try:
            await self._storage.delete_ledger(ledger_id)
        except HeraldError as exc:
            log.warning("compaction of %s: could not delete ledger %s: %s", self._ledger.name, ledger_id, exc)
