"""One persistent topic's compaction on its owning broker: the published view, runs (one at a time,
by admin trigger or past the compaction threshold), their status, and recovery on load.

A run: horizon = the topic's last confirmed position; state RUNNING (CAS); the compactor writes a
new ledger, recorded as pending before its first entry; success CASes the state to the new ledger
and horizon, swaps `view`, moves the "__compaction" cursor's mark-delete to the horizon (so
retention never trims what is not compacted yet) and deletes the old compacted ledger. On load
(restart, failover) the view is opened; a pending ledger left by a run that died is deleted, and
a run that was RUNNING is started again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from herald.broker.core.compaction.compacted_ledger import CompactedView
from herald.broker.core.compaction.compactor import CompactionResult, TwoPhaseCompactor
from herald.broker.core.compaction.state import NO_LEDGER, CompactionStatus, StateRecord
from herald.broker.core.cursor import InitialPosition
from herald.broker.core.ledger_list import Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.broker.core.ports import BrokerObserver
from herald.broker.settings import BrokerSettings
from herald.common.codec.herald_entry import ENTRY_FRAMING_ALLOWANCE
from herald.common.errors import AlreadyExistsError, CompactionInProgressError, HeraldError, ServiceNotReadyError
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)

# The durable cursor a compaction holds on its topic (Pulsar's name).
COMPACTION_CURSOR = "__compaction"


class CompactionCursor(Protocol):
    @property
    def mark_delete_position(self) -> Position: ...
    def ack_cumulative(self, position: Position) -> None: ...
    async def flush(self) -> None: ...


class CompactionSubscription(Protocol):
    @property
    def cursor(self) -> CompactionCursor: ...
    def cursor_moved(self) -> None: ...


class CompactionHost(Protocol):
    """What a compaction needs of its topic (PersistentTopic): its subscriptions, to hold the
    __compaction cursor."""

    @property
    def subscriptions(self) -> Mapping[str, CompactionSubscription]: ...
    @property
    def max_message_size(self) -> int: ...
    async def create_subscription(self, subscription: str, start: Position | InitialPosition = ...) -> None: ...


@dataclass(frozen=True, slots=True)
class CompactionInfo:
    """What the admin API answers about a topic's compaction."""

    status: CompactionStatus
    error: str
    ledger_id: int
    horizon: Position
    entries: int
    started_at: float
    finished_at: float
    pending_ledger_id: int


class TopicCompaction:
    def __init__(
        self, host: CompactionHost, ledger: ManagedLedger, store: MetadataStore, settings: BrokerSettings,
        observer: BrokerObserver | None = None,
    ) -> None:
        self._host = host
        self._ledger = ledger
        self._settings = settings
        self._observer = observer
        self._record = StateRecord(store, ledger.name)
        self.view: CompactedView | None = None  # swapped atomically after each successful run
        self.threshold = 0  # bytes of __compaction backlog past which the broker compacts; 0: never
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def info(self) -> CompactionInfo:
        state = self._record.state
        status = CompactionStatus.RUNNING if self.running else state.status
        return CompactionInfo(status, state.error, state.ledger_id, state.horizon, state.entries, state.started_at,
                              state.finished_at, state.pending_ledger_id)

    async def load(self) -> None:
        """Open the published view; clean up after a run that died, restarting it if it was running."""
        state = await self._record.load()
        if state.ledger_id != NO_LEDGER:
            try:
                self.view = await CompactedView.open(self._ledger.storage, state.ledger_id, state.horizon,
                                                     state.entries)
            except HeraldError as exc:  # the next run opens it again (and fails while it cannot)
                log.warning("topic %s: compacted ledger %s did not open: %s", self._ledger.name, state.ledger_id, exc)
        if state.status is not CompactionStatus.RUNNING and state.pending_ledger_id == NO_LEDGER:
            return
        if state.pending_ledger_id != NO_LEDGER:
            log.info("topic %s: deleting compacted ledger %s left by a compaction that did not finish",
                     self._ledger.name, state.pending_ledger_id)
            await self._delete_quietly(state.pending_ledger_id)
            await self._record.write(state.but(pending_ledger_id=NO_LEDGER))
        if state.status is CompactionStatus.RUNNING:
            log.info("topic %s: a compaction was running when the topic was last served: starting it again",
                     self._ledger.name)
            self.trigger()

    def trigger(self) -> None:
        """Start a run; CompactionInProgressError while one runs."""
        if self._closed:
            raise ServiceNotReadyError(f"topic {self._ledger.name} is closing: look it up again and retry")
        if self.running:
            raise CompactionInProgressError(
                f"a compaction of {self._ledger.name} is already running: wait for it to finish "
                "(compaction-status) before asking again")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"compaction {self._ledger.name}")

    def backlog_bytes(self) -> int:
        """Bytes of the topic after the __compaction cursor (all of it when there is no cursor yet)."""
        sub = self._host.subscriptions.get(COMPACTION_CURSOR)
        if sub is None:
            return self._ledger.storage_size
        return self._ledger.size_after(sub.cursor.mark_delete_position)

    def check_threshold(self) -> bool:
        """Start a run when the backlog is past the threshold (policy compaction_threshold);
        True when one was started."""
        if self.threshold <= 0 or self.running or self._closed or self._ledger.last_confirmed_position.entry_id < 0:
            return False
        if self.backlog_bytes() <= self.threshold:
            return False
        log.info("topic %s: compaction backlog past the threshold of %d bytes: compacting", self._ledger.name,
                 self.threshold)
        self.trigger()
        return True

    async def wait(self) -> None:
        """Until the running compaction (if any) ends."""
        task = self._task
        if task is not None:
            await asyncio.wait([task])

    async def close(self) -> None:
        """Stop a run (the state keeps it RUNNING with its pending ledger: the next owner cleans up
        and runs it again). Idempotent."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    # ---- a run ----

    async def _run(self) -> None:
        started = time.time()
        clock = time.perf_counter()
        ledger = self._ledger
        horizon = ledger.last_confirmed_position
        try:
            state = self._record.state.but(status=CompactionStatus.RUNNING, error="", started_at=started)
            await self._record.write(state)
            if self.view is None and state.ledger_id != NO_LEDGER:
                # Its view did not open when the topic loaded: never compact without it (what it
                # holds before its horizon may be gone from the topic already).
                self.view = await CompactedView.open(ledger.storage, state.ledger_id, state.horizon, state.entries)
            await self._ensure_cursor()
            if horizon.entry_id < 0 or (self.view is not None and horizon <= self.view.horizon):
                result = None  # nothing new since the last run
            else:
                # Entries as large as the topic's policies let producers send (a batch's payload
                # decompresses within it, as the consumers' does).
                limit = max(self._settings.max_message_size, self._host.max_message_size) + ENTRY_FRAMING_ALLOWANCE
                compactor = TwoPhaseCompactor(ledger, ledger.storage, limit)
                result = await compactor.compact(self.view, horizon, self._pending)
                await self._publish(result)
            await self._record.write(self._record.state.but(
                status=CompactionStatus.SUCCESS, finished_at=time.time()))
            await self._move_cursor(horizon)
            log.info("topic %s compacted up to %s: %s", ledger.name, horizon, result)
            self._observe("success", time.perf_counter() - clock, result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = str(exc) if isinstance(exc, HeraldError) else repr(exc)
            log.warning("topic %s: compaction failed: %s", ledger.name, reason)
            self._observe("error", time.perf_counter() - clock, None)
            await self._failed(reason)

    async def _pending(self, ledger_id: int) -> None:
        await self._record.write(self._record.state.but(pending_ledger_id=ledger_id))

    async def _publish(self, result: CompactionResult) -> None:
        old = self.view
        view = await CompactedView.open(self._ledger.storage, result.ledger_id, result.horizon,
                                        result.entries_written)
        await self._record.write(self._record.state.but(
            ledger_id=result.ledger_id, horizon=result.horizon, entries=result.entries_written,
            pending_ledger_id=NO_LEDGER))
        self.view = view
        if old is not None:
            await self._delete_quietly(old.ledger_id)

    async def _failed(self, reason: str) -> None:
        state = self._record.state
        if state.pending_ledger_id != NO_LEDGER:  # the compactor deleted it already
            state = state.but(pending_ledger_id=NO_LEDGER)
        try:
            await self._record.write(state.but(status=CompactionStatus.ERROR, error=reason, finished_at=time.time()))
        except HeraldError as exc:
            log.warning("topic %s: recording the compaction's failure failed: %s", self._ledger.name, exc)

    async def _ensure_cursor(self) -> None:
        if COMPACTION_CURSOR in self._host.subscriptions:
            return
        try:
            await self._host.create_subscription(COMPACTION_CURSOR, InitialPosition.EARLIEST)
        except AlreadyExistsError:
            pass

    async def _move_cursor(self, horizon: Position) -> None:
        sub = self._host.subscriptions.get(COMPACTION_CURSOR)
        if sub is None or horizon.entry_id < 0:
            return
        sub.cursor.ack_cumulative(horizon)
        sub.cursor_moved()
        await sub.cursor.flush()

    def _observe(self, result: str, seconds: float, run: CompactionResult | None) -> None:
        if self._observer is None:
            return
        if run is None:
            self._observer.compaction_finished(result, seconds, 0, 0, 0, 0, 0)
        else:
            self._observer.compaction_finished(result, seconds, run.messages_read, run.keys_kept, run.keys_removed,
                                               run.entries_written, run.bytes_written)

    async def _delete_quietly(self, ledger_id: int) -> None:
        try:
            await self._ledger.storage.delete_ledger(ledger_id)
        except HeraldError as exc:
            log.warning("topic %s: could not delete compacted ledger %s: %s", self._ledger.name, ledger_id, exc)
