"""Managed cursors: a subscription's durable position in its topic's managed ledger.

A cursor is a mark-delete position (everything up to it is acknowledged) plus the individually
acknowledged entries above it, kept as compact ranges, and a read position for dispatch. Only the
first two are persisted, as JSON at `/cursors/<managed ledger>/<subscription>`, so after a restart
reading starts again just after the mark-delete position and every unacknowledged entry comes back.
A non-durable cursor (a reader's) lives in memory only: it is never written to the metadata store.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from herald.broker.core.ledger_list import Position
from herald.common.errors import AlreadyExistsError, BadVersionError, HeraldError, InvalidArgumentError
from herald.metadata.store import NOT_EXISTS, MetadataStore

log = logging.getLogger(__name__)


class InitialPosition(enum.IntEnum):
    """Where a new subscription starts (values as in Herald's wire contract, and Pulsar's)."""

    LATEST = 0
    EARLIEST = 1

    @classmethod
    def parse(cls, number: int) -> InitialPosition:
        """The position numbered `number`; InvalidArgumentError otherwise."""
        try:
            return cls(number)
        except ValueError:
            raise InvalidArgumentError(f"initial position {number} is invalid: use EARLIEST or LATEST") from None


@dataclass(frozen=True, slots=True)
class PublishTime:
    """A seek / reset target: the first entry published at or after `ms` (unix milliseconds)."""

    ms: int


# Where a seek or cursor reset may send a subscription.
ResetTarget = Position | PublishTime | InitialPosition


class LedgerView(Protocol):
    """What a cursor needs to know of its managed ledger."""

    @property
    def last_confirmed_position(self) -> Position: ...
    @property
    def first_position(self) -> Position: ...
    def number_of_entries(self, after: Position, up_to: Position) -> int: ...
    def has_entry(self, position: Position) -> bool: ...
    def normalize(self, position: Position) -> Position: ...


class AckRanges:
    """Individually acknowledged entries: sorted, disjoint closed ranges [start, end] of entry ids,
    each within one ledger, adjacent ranges merged. Acks mostly arrive in order, so inserts land at
    the end and the list stays short."""

    __slots__ = ("_ends", "_starts", "count")

    def __init__(self) -> None:
        self._starts: list[tuple[int, int]] = []  # (ledger id, first entry id)
        self._ends: list[int] = []  # last entry id of each range
        self.count = 0  # entries covered

    def __len__(self) -> int:
        return len(self._starts)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def add(self, ledger_id: int, entry_id: int) -> bool:
        """Add one entry; False when it was already there."""
        starts, ends = self._starts, self._ends
        i = bisect.bisect_right(starts, (ledger_id, entry_id)) - 1
        joins_left = i >= 0 and starts[i][0] == ledger_id and ends[i] >= entry_id - 1
        if joins_left and ends[i] >= entry_id:
            return False
        j = i + 1
        joins_right = j < len(starts) and starts[j] == (ledger_id, entry_id + 1)
        if joins_left and joins_right:
            ends[i] = ends[j]
            del starts[j], ends[j]
        elif joins_left:
            ends[i] = entry_id
        elif joins_right:
            starts[j] = (ledger_id, entry_id)
        else:
            starts.insert(j, (ledger_id, entry_id))
            ends.insert(j, entry_id)
        self.count += 1
        return True

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        i = bisect.bisect_right(self._starts, (ledger_id, entry_id)) - 1
        return i >= 0 and self._starts[i][0] == ledger_id and self._ends[i] >= entry_id

    def first(self) -> tuple[Position, Position] | None:
        if not self._starts:
            return None
        ledger_id, start = self._starts[0]
        return Position(ledger_id, start), Position(ledger_id, self._ends[0])

    def pop_first(self) -> None:
        _, start = self._starts.pop(0)
        self.count -= self._ends.pop(0) - start + 1

    def remove_up_to(self, position: Position) -> None:
        """Forget every entry <= position."""
        starts, ends = self._starts, self._ends
        i = bisect.bisect_right(starts, (position.ledger_id, position.entry_id))
        if i == 0:
            return
        # Only the last range starting at or before `position` can reach past it.
        tail: tuple[int, int, int] | None = None
        if starts[i - 1][0] == position.ledger_id and ends[i - 1] > position.entry_id:
            tail = (position.ledger_id, position.entry_id + 1, ends[i - 1])
        for k in range(i):
            self.count -= ends[k] - starts[k][1] + 1
        del starts[:i], ends[:i]
        if tail is not None:
            starts.insert(0, (tail[0], tail[1]))
            ends.insert(0, tail[2])
            self.count += tail[2] - tail[1] + 1

    def positions(self) -> Iterable[Position]:
        for (ledger_id, start), end in zip(self._starts, self._ends, strict=True):
            for entry_id in range(start, end + 1):
                yield Position(ledger_id, entry_id)

    def to_json(self) -> list[list[int]]:
        return [[ledger_id, start, end] for (ledger_id, start), end in zip(self._starts, self._ends, strict=True)]

    @classmethod
    def from_json(cls, items: Iterable[Iterable[int]]) -> AckRanges:
        ranges = cls()
        for ledger_id, start, end in sorted(tuple(item) for item in items):  # type: ignore[misc]
            ranges._starts.append((ledger_id, start))
            ranges._ends.append(end)
            ranges.count += end - start + 1
        return ranges


class CursorFlush:
    """One write of a cursor's persistent state, by compare-and-set on the version last written."""

    __slots__ = ("expected_version", "key", "payload", "store")

    def __init__(self, store: MetadataStore, key: str, payload: bytes, expected_version: int) -> None:
        self.store = store
        self.key = key
        self.payload = payload
        self.expected_version = expected_version

    async def run(self) -> int:
        return await self.store.put(self.key, self.payload, expected_version=self.expected_version)


def cursor_key(ledger_name: str, subscription: str) -> str:
    return f"/cursors/{ledger_name}/{subscription}"


def before(position: Position) -> Position:
    """The mark-delete position that makes `position` the next entry to read."""
    return Position(position.ledger_id, position.entry_id - 1)


class ManagedCursor:
    def __init__(
        self, ledger: LedgerView, store: MetadataStore, ledger_name: str, name: str,
        mark_delete: Position, acked: AckRanges | None = None, version: int = NOT_EXISTS,
        *, durable: bool = True,
    ) -> None:
        self.name = name
        self.key = cursor_key(ledger_name, name)
        self.durable = durable
        self._ledger = ledger
        self._store = store
        self.mark_delete_position = mark_delete
        self._acked = acked if acked is not None else AckRanges()
        # Reading resumes right after the mark-delete position: unacknowledged entries come back.
        self.read_position = Position(mark_delete.ledger_id, mark_delete.entry_id + 1)
        self._version = version
        # Told when the cursor becomes dirty: its topic marks itself for the next cursor flush
        # (broker.core.topic_jobs), so the flush job visits only topics with something to persist.
        self.on_dirty: Callable[[], None] | None = None
        self._dirty = False
        self.fenced = False
        self._flush_lock = asyncio.Lock()

    @property
    def dirty(self) -> bool:
        return self._dirty

    @dirty.setter
    def dirty(self, value: bool) -> None:
        self._dirty = value
        if value and self.on_dirty is not None:
            self.on_dirty()

    @classmethod
    async def open(
        cls, ledger: LedgerView, store: MetadataStore, ledger_name: str, name: str,
        initial_position: InitialPosition, *, earliest: Position | None = None,
    ) -> ManagedCursor:
        """Load the cursor, or create and persist it at its initial position. `earliest`: the
        first entry EARLIEST reads (None: the log's first kept entry; a read_compacted
        subscription's starts before it, broker.core.compacted_reads.VIEW_START). A loaded
        cursor keeps its position whatever these say."""
        key = cursor_key(ledger_name, name)
        for _ in range(3):
            got = await store.get(key)
            if got is not None:
                return cls._parse(ledger, store, ledger_name, name, got.value, got.version)
            if initial_position is InitialPosition.EARLIEST:
                mark_delete = before(ledger.first_position if earliest is None else earliest)
            else:
                mark_delete = ledger.last_confirmed_position
            cursor = cls(ledger, store, ledger_name, name, mark_delete)
            cursor.dirty = True
            try:
                await cursor.flush()
                return cursor
            except BadVersionError:
                continue  # created concurrently: load that one
        raise BadVersionError(f"cursor {key} keeps changing while being opened: retry")

    @classmethod
    async def create(
        cls, ledger: LedgerView, store: MetadataStore, ledger_name: str, name: str, read_from: Position,
    ) -> ManagedCursor:
        """Create and persist a durable cursor whose first entry to read is `read_from`;
        AlreadyExistsError when the cursor exists."""
        cursor = cls(ledger, store, ledger_name, name, before(read_from))
        cursor.dirty = True
        try:
            await cursor.flush()
        except BadVersionError:
            raise AlreadyExistsError(f"subscription {name!r} already exists on {ledger_name}") from None
        return cursor

    @classmethod
    def non_durable(
        cls, ledger: LedgerView, store: MetadataStore, ledger_name: str, name: str, read_from: Position,
    ) -> ManagedCursor:
        """An in-memory cursor (a reader's) whose first entry to read is `read_from`."""
        return cls(ledger, store, ledger_name, name, before(read_from), durable=False)

    @classmethod
    async def load_all(cls, ledger: LedgerView, store: MetadataStore, ledger_name: str) -> list[ManagedCursor]:
        prefix = cursor_key(ledger_name, "")
        found = await store.list(prefix)
        return [cls._parse(ledger, store, ledger_name, key[len(prefix):], item.value, item.version)
                for key, item in found.items()]

    @classmethod
    def _parse(
        cls, ledger: LedgerView, store: MetadataStore, ledger_name: str, name: str, value: bytes, version: int,
    ) -> ManagedCursor:
        doc = json.loads(value)
        mark_delete = Position(*doc["mark_delete"])
        return cls(ledger, store, ledger_name, name, mark_delete, AckRanges.from_json(doc.get("acked", [])),
                   version)

    # ---- acknowledgements ----

    def ack(self, positions: Iterable[Position]) -> None:
        """Acknowledge entries one by one; unknown or already acknowledged ones are ignored."""
        mark_delete = self.mark_delete_position
        last = self._ledger.last_confirmed_position
        acked = self._acked
        changed = False
        for position in positions:
            if position <= mark_delete or position > last:
                continue
            if (not acked and position.ledger_id == mark_delete.ledger_id
                    and position.entry_id == mark_delete.entry_id + 1):
                mark_delete = position  # the in-order case: no ranges at all
                changed = True
            elif self._ledger.has_entry(position) and acked.add(position.ledger_id, position.entry_id):
                changed = True
        if changed:
            self.mark_delete_position = mark_delete
            self._moved()

    def ack_cumulative(self, position: Position) -> None:
        """Acknowledge everything up to and including position."""
        position = min(position, self._ledger.last_confirmed_position)
        if position <= self.mark_delete_position:
            return
        self.mark_delete_position = position
        self._acked.remove_up_to(position)
        self._moved()

    def _moved(self) -> None:
        # Ranges that now follow the mark-delete position with no entry between fold into it.
        acked = self._acked
        while acked:
            first = acked.first()
            assert first is not None
            start, end = first
            mark_delete = self.mark_delete_position
            if not (start.ledger_id == mark_delete.ledger_id and start.entry_id == mark_delete.entry_id + 1) \
                    and self._ledger.number_of_entries(mark_delete, Position(start.ledger_id, start.entry_id - 1)):
                break
            self.mark_delete_position = end
            acked.pop_first()
        mark_delete = self.mark_delete_position
        if self.read_position <= mark_delete:
            self.read_position = Position(mark_delete.ledger_id, mark_delete.entry_id + 1)
        self.dirty = True

    def is_acked(self, position: Position) -> bool:
        return position <= self.mark_delete_position or (
            bool(self._acked) and self._acked.contains(position.ledger_id, position.entry_id))

    @property
    def individually_acked(self) -> list[list[int]]:
        return self._acked.to_json()

    @property
    def backlog(self) -> int:
        """Entries not yet acknowledged."""
        last = self._ledger.last_confirmed_position
        return max(0, self._ledger.number_of_entries(self.mark_delete_position, last) - self._acked.count)

    def unacked_positions(self, limit: int) -> list[Position]:
        """The oldest `limit` entries not yet acknowledged, in order."""
        ledger = self._ledger
        last = ledger.last_confirmed_position
        found: list[Position] = []
        position = self.mark_delete_position
        while len(found) < limit:
            position = ledger.normalize(Position(position.ledger_id, position.entry_id + 1))
            if position > last:
                break
            if not self._acked or not self._acked.contains(position.ledger_id, position.entry_id):
                found.append(position)
        return found

    def skip(self, count: int | None) -> int:
        """Acknowledge the oldest `count` unacknowledged entries (None: all of them); returns how
        many were skipped."""
        if count is None:
            skipped = self.backlog
            self.ack_cumulative(self._ledger.last_confirmed_position)
            return skipped
        if count <= 0:
            return 0
        oldest = self.unacked_positions(count)
        if oldest:
            self.ack_cumulative(oldest[-1])
        return len(oldest)

    def reset(self, read_from: Position) -> None:
        """Move the cursor so that `read_from` is the next entry read and everything before it
        counts as acknowledged (seek / reset cursor): individual acks above it are forgotten."""
        self.mark_delete_position = before(read_from)
        self._acked = AckRanges()
        self.read_position = read_from
        self.dirty = True

    # ---- reading ----

    def rewind(self) -> None:
        """Read again from just after the mark-delete position."""
        mark_delete = self.mark_delete_position
        self.read_position = Position(mark_delete.ledger_id, mark_delete.entry_id + 1)

    def advance_read_position(self, position: Position) -> None:
        if position > self.read_position:
            self.read_position = position

    # ---- persistence ----

    def _payload(self) -> bytes:
        doc = {"mark_delete": list(self.mark_delete_position), "acked": self._acked.to_json()}
        return json.dumps(doc, separators=(",", ":")).encode()

    async def flush(self) -> None:
        """Persist the cursor if it changed since the last flush. A lost compare-and-set means
        another broker owns the topic now: the cursor stops writing and BadVersionError is raised."""
        async with self._flush_lock:
            if not self.dirty or self.fenced or not self.durable:
                return
            self.dirty = False
            op = CursorFlush(self._store, self.key, self._payload(), self._version)
            try:
                self._version = await op.run()
            except BadVersionError:
                self.fenced = True
                log.warning("cursor %s was changed by another broker: no longer persisting it", self.key)
                raise
            except BaseException:
                self.dirty = True
                raise

    async def close(self) -> None:
        try:
            await self.flush()
        except HeraldError as exc:
            log.warning("cursor %s: final flush failed: %s", self.key, exc)

    async def delete(self) -> None:
        async with self._flush_lock:
            self.fenced = True  # nothing may write it again
            if self.durable:
                await self._store.delete(self.key)
