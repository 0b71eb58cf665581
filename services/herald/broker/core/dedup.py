"""Message deduplication per topic (Pulsar's MessageDeduplication).

For each producer name the topic remembers the highest sequence id pushed (accepted for writing)
and the highest persisted (confirmed by storage). A message at or below the pushed mark is a
duplicate when it is also at or below the persisted mark, and unknown otherwise (the earlier copy
is still being written: the producer retries). The persisted marks survive failover: a snapshot
{position, producers} is written to `/dedup/<managed ledger>` every N entries, on close, and before
retention deletes ledgers after its position; a broker loading the topic replays the entries
written after the snapshot's position.

As Pulsar does, a producer name not connected for a while (dedup_producer_inactivity_seconds) is
forgotten, so names used once (a dlq-worker gives each dead letter its own) do not pile up.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from typing import Protocol

from herald.broker.core.ledger_list import BEFORE_FIRST, Position
from herald.common.codec.entry import is_leading_pulsar_chunk, read_metadata
from herald.common.errors import BadVersionError, HeraldError
from herald.metadata.store import NOT_EXISTS, MetadataStore

log = logging.getLogger(__name__)
_REPLAY_CHUNK = 500


class DedupStatus(enum.Enum):
    NEW = "new"
    DUP = "dup"
    UNKNOWN = "unknown"


class EntrySource(Protocol):
    """What recovery reads: the managed ledger."""

    @property
    def last_confirmed_position(self) -> Position: ...
    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]: ...


def dedup_key(ledger_name: str) -> str:
    return f"/dedup/{ledger_name}"


class MessageDeduplication:
    def __init__(self, ledger_name: str, store: MetadataStore, enabled: bool, snapshot_interval: int) -> None:
        self.key = dedup_key(ledger_name)
        self._store = store
        self.enabled = enabled
        self._interval = max(1, snapshot_interval)
        self._pushed: dict[str, int] = {}
        self._persisted: dict[str, int] = {}
        self._last_position = BEFORE_FIRST  # the last entry reflected in _persisted
        self._snapshot_position = BEFORE_FIRST
        self._since_snapshot = 0
        self._version = NOT_EXISTS
        self._snapshot_task: asyncio.Task[None] | None = None
        self._snapshot_lock = asyncio.Lock()  # one compare-and-set at a time
        self._closed = False
        self._fenced = False
        self._switching = False  # being turned on: replaying what was written while it was off
        # Producer names with no producer connected -> since when (time.monotonic()).
        self._inactive_since: dict[str, float] = {}
        self.duplicates = 0  # sends answered as duplicates (DUP), for metrics

    # ---- the publish path ----

    def check(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> DedupStatus:
        """Classify a message before it is written; a NEW one raises the pushed mark."""
        if not self.enabled:
            return DedupStatus.NEW
        pushed = self._pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            persisted = self._persisted.get(producer_name)
            if persisted is not None and sequence_id <= persisted:
                self.duplicates += 1
                return DedupStatus.DUP
            return DedupStatus.UNKNOWN
        self._pushed[producer_name] = max(sequence_id, highest_sequence_id)
        return DedupStatus.NEW

    def persisted(self, producer_name: str, highest_sequence_id: int, position: Position) -> None:
        """A message was confirmed by storage (called in add order)."""
        if not self.enabled:
            return
        if highest_sequence_id > self._persisted.get(producer_name, -1):
            self._persisted[producer_name] = highest_sequence_id
        self._last_position = position
        self._since_snapshot += 1
        if self._since_snapshot >= self._interval and (self._snapshot_task is None or self._snapshot_task.done()):
            self._since_snapshot = 0
            self._snapshot_task = asyncio.get_running_loop().create_task(self._take_snapshot())

    def write_failed(self, producer_name: str) -> None:
        """A write failed: what was pushed but not persisted may be sent again and must be accepted."""
        if producer_name in self._persisted:
            self._pushed[producer_name] = self._persisted[producer_name]
        else:
            self._pushed.pop(producer_name, None)

    def last_sequence_id(self, producer_name: str) -> int:
        """The highest persisted sequence id of a producer (-1 if none), for its registration."""
        if not self.enabled:
            return -1
        return self._persisted.get(producer_name, -1)

    @property
    def producers(self) -> dict[str, int]:
        return dict(self._persisted)

    # ---- forgetting producers gone for long ----

    def producer_connected(self, producer_name: str) -> None:
        self._inactive_since.pop(producer_name, None)

    def producer_disconnected(self, producer_name: str, now: float) -> None:
        if producer_name in self._pushed or producer_name in self._persisted:
            self._inactive_since[producer_name] = now

    def next_purge_at(self, inactivity: float) -> float | None:
        """When purge_inactive will next forget a producer (monotonic seconds); None: none left."""
        return min(self._inactive_since.values()) + inactivity if self._inactive_since else None

    def purge_inactive(self, now: float, inactivity: float) -> int:
        """Forget the producers disconnected for `inactivity` seconds or more; returns how many.
        A resend from one after that is taken as new (Pulsar's trade-off too)."""
        gone = [name for name, since in self._inactive_since.items() if now - since >= inactivity]
        for name in gone:
            del self._inactive_since[name]
            self._pushed.pop(name, None)
            self._persisted.pop(name, None)
        if gone:
            log.info("dedup %s forgot %d producers inactive for %gs", self.key, len(gone), inactivity)
        return len(gone)

    # ---- recovery and snapshots ----

    async def set_enabled(self, enabled: bool, ledger: EntrySource) -> None:
        """Turn deduplication on or off at runtime (a policy changed). Turning it on first catches
        up with what was written while it was off, as at recovery; meanwhile sends are accepted
        without the check, as they were while it was off."""
        if enabled == self.enabled or self._switching:
            return
        if not enabled:
            self.enabled = False
            return
        self._switching = True
        try:
            await self._replay(ledger)
            self.enabled = True
        finally:
            self._switching = False

    async def recover(self, ledger: EntrySource) -> int:
        """Load the snapshot and replay what was written after it; returns entries replayed."""
        if not self.enabled:
            return 0
        return await self._replay(ledger)

    async def _replay(self, ledger: EntrySource) -> int:
        got = await self._store.get(self.key)
        if got is not None:
            doc = json.loads(got.value)
            self._version = got.version
            self._snapshot_position = self._last_position = Position(*doc["position"])
            self._persisted = {name: int(seq) for name, seq in doc["producers"].items()}
        replayed = 0
        start = Position(self._last_position.ledger_id, self._last_position.entry_id + 1)
        while True:
            entries = await ledger.read_entries(start, _REPLAY_CHUNK)
            if not entries:
                break
            for position, data in entries:
                try:
                    metadata = read_metadata(data, verify=False)
                except HeraldError as exc:
                    log.warning("dedup %s: entry %s has unreadable metadata (%s): skipped", self.key, position, exc)
                    continue
                if is_leading_pulsar_chunk(data, metadata):
                    continue  # its message is persisted with its last chunk
                highest = max(metadata.sequence_id, metadata.highest_sequence_id)
                if highest > self._persisted.get(metadata.producer_name, -1):
                    self._persisted[metadata.producer_name] = highest
            replayed += len(entries)
            self._last_position = entries[-1][0]
            start = Position(self._last_position.ledger_id, self._last_position.entry_id + 1)
        self._pushed = dict(self._persisted)
        now = time.monotonic()  # none is connected yet: each is inactive from now until it is
        self._inactive_since = dict.fromkeys(self._persisted, now)
        self._since_snapshot = replayed
        log.info("dedup %s recovered %d producers, replayed %d entries", self.key, len(self._persisted), replayed)
        return replayed

    @property
    def snapshot_position(self) -> Position:
        """The position of the last snapshot written (or loaded): recovery replays from after it."""
        return self._snapshot_position

    async def snapshot(self) -> Position:
        """Write a snapshot of everything persisted so far (unless one is current); returns the
        snapshot's position. Retention calls it before deleting ledgers recovery would replay."""
        if self.enabled and not self._closed:
            await self._take_snapshot()
        return self._snapshot_position

    async def _take_snapshot(self) -> None:
        async with self._snapshot_lock:
            position = self._last_position
            if position == self._snapshot_position or self._fenced:
                return
            doc = {"position": list(position), "producers": self._persisted}
            payload = json.dumps(doc, separators=(",", ":")).encode()  # taken before any await: consistent
            try:
                self._version = await self._store.put(self.key, payload, expected_version=self._version)
                self._snapshot_position = position
            except BadVersionError:
                # Another broker owns the topic now; its snapshots win.
                log.warning("dedup snapshot %s was changed by another broker: no longer writing it", self.key)
                self._fenced = True
            except HeraldError as exc:
                log.warning("dedup snapshot %s failed: %s", self.key, exc)

    async def close(self) -> None:
        """Wait for a snapshot in progress and take a final one. Idempotent."""
        if self._closed:
            return
        self._closed = True
        task, self._snapshot_task = self._snapshot_task, None
        if task is not None:
            await task
        if self.enabled:
            await self._take_snapshot()
