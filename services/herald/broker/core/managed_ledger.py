"""The managed ledger: a topic's log, kept as a list of storage ledgers of which exactly one is open
for writes (Pulsar's ManagedLedgerImpl, BookKeeper's OpAddEntry).

Its list of ledgers lives in the metadata store at `/managed-ledgers/<name>` as JSON, changed only
by compare-and-set: losing a CAS means another broker took the topic over, and the ledger becomes
Fenced. Adds are pipelined to the open ledger and complete in order; while a full ledger is being
closed and its successor created they wait in a queue. Reads cross ledger boundaries and are
served from the entry cache when they can be. Consumed ledgers past retention are trimmed from the
head of the list (broker.core.retention decides which; trim_ledgers() deletes them). The list and its
position arithmetic live in broker.ledger_list.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

from herald.broker.core import ledger_list
from herald.broker.core.entry_cache import EntryCache, ReadAheadBudget
from herald.broker.core.ledger_list import BEFORE_FIRST, LedgerInfo, LedgerList, Position
from herald.broker.core.ledger_reader import LedgerHandle, LedgerReader, LedgerStorage
from herald.broker.core.pending_add import PendingAdd
from herald.broker.settings import BrokerSettings
from herald.common import tracing
from herald.common.errors import (
    BadVersionError,
    FencedError,
    HeraldError,
    PersistenceError,
    ServiceNotReadyError,
    TopicTerminatedError,
)
from herald.metadata.store import NOT_EXISTS, MetadataStore

__all__ = ["BEFORE_FIRST", "LedgerInfo", "LedgerStorage", "ManagedLedger", "PendingAdd", "Position", "State"]

log = logging.getLogger(__name__)

# A failed add is retried on a fresh ledger this many times before it (and all after it) fail.
MAX_ADD_ATTEMPTS = 3
# Seconds close() lets ledger deletions still running finish.
BACKGROUND_DELETE_GRACE = 2.0


class State(enum.Enum):
    NONE = "None"
    LEDGER_OPENED = "LedgerOpened"
    CLOSING_LEDGER = "ClosingLedger"
    CLOSED_LEDGER = "ClosedLedger"
    CREATING_LEDGER = "CreatingLedger"
    CLOSED = "Closed"
    FENCED = "Fenced"
    TERMINATED = "Terminated"


class ManagedLedger:
    def __init__(
        self,
        name: str,
        store: MetadataStore,
        storage: LedgerStorage,
        settings: BrokerSettings,
        cache: EntryCache,
        on_fenced: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.key = ledger_list.managed_ledger_key(name)
        self._store = store
        self._storage = storage
        self._settings = settings
        self._cache = cache
        self.on_fenced = on_fenced
        self.state = State.NONE
        self._version = NOT_EXISTS
        self._terminated = False
        self._list = LedgerList()
        self._current: LedgerHandle | None = None
        self._issued = 0  # entries issued to the open ledger (confirmed or in flight)
        self._issued_bytes = 0
        self._waiting: deque[PendingAdd] = deque()  # not yet issued
        self._in_flight: deque[PendingAdd] = deque()  # issued, completing in order
        # Adds issued to storage whose callback has not come yet; close() waits for them to settle.
        self._unsettled = 0
        self._settled: asyncio.Future[None] | None = None
        self._roll_task: asyncio.Task[None] | None = None
        self._last_create_failure = -float("inf")
        self._reader = LedgerReader(name, self._list, storage, cache, lambda: self._current)
        self._unlisted: list[int] = []  # left out of the list; deleted once the list is written
        self._background: set[asyncio.Task[None]] = set()
        # Metadata writes (rollover, trimming, close) one at a time, each from the list as it is
        # then: two compare-and-sets on one version would make the second look like fencing.
        self._metadata_lock = asyncio.Lock()
        # Called after a rollover closed a ledger (retention may trim it once it is consumed).
        self.on_ledger_closed: Callable[[], None] | None = None
        # Storage quorums (E, Qw, Qa) of the ledgers created from now on; policies may change them.
        self.persistence: tuple[int, int, int] = (settings.ensemble_size, settings.write_quorum, settings.ack_quorum)

    # ---- lifecycle ----

    async def open(self) -> None:
        """Load the ledger list, recover the last ledger (a dead writer may have left it open) and
        create a fresh ledger for writes."""
        got = await self._store.get(self.key)
        if got is not None:
            ledgers, self._terminated = ledger_list.decode_record(got.value)
            self._version = got.version
            for info in ledgers:
                self._list.append(info)
        if self._list:
            last = self._list[-1]
            # Fences the ledger on its storage nodes, so a previous owner still writing fails,
            # and closes it at its last durable entry.
            handle = await self._storage.open_ledger(last.ledger_id, recover=True)
            last.entries = handle.last_add_confirmed + 1
            last.closed_at = last.closed_at or time.time()
            if last.entries:
                self._reader.keep_handle(last.ledger_id, handle)
            self._drop_empty_last_ledger()
        if self._terminated:
            if self._unlisted:
                await self._write_metadata()
                self._delete_unlisted()
            self.state = State.TERMINATED
        else:
            self.state = State.CREATING_LEDGER
            try:
                handle = await self._storage.create_ledger(*self.persistence, {"managed-ledger": self.name})
            except HeraldError as exc:
                self.state = State.NONE
                raise PersistenceError(f"could not create a ledger for {self.name}: {exc}") from exc
            self._list.append(LedgerInfo(handle.ledger_id, created_at=time.time()))
            try:
                await self._write_metadata()
            except BaseException:
                self.state = State.NONE
                await self._delete_quietly(handle.ledger_id)
                raise
            self._delete_unlisted()
            self._set_current(handle)
            self.state = State.LEDGER_OPENED
        log.info("managed ledger %s opened: %d ledgers, %d entries, state %s",
                 self.name, len(self._list), self.number_of_entries_total, self.state.value)

    async def close(self, *, owned: bool = True) -> None:
        """Stop accepting adds, let those in flight finish, close the open ledger and record it.
        owned=False: another broker may own the topic now, so nothing is written (as when fenced).
        Idempotent."""
        if self.state in (State.CLOSED, State.NONE):
            self.state = State.CLOSED
            return
        previous = self.state if owned else State.FENCED
        self.state = State.CLOSED
        self._fail_waiting(PersistenceError(f"topic {self.name} is closing: reconnect and retry"))
        await self._stop_roll_task()
        await self._settle_in_flight()
        self._fail_in_flight(PersistenceError(f"topic {self.name} closed before the write completed"))
        if previous is not State.FENCED:
            await self._close_current()
            self._drop_empty_last_ledger()
            try:
                await self._write_metadata()
                self._delete_unlisted()
            except HeraldError as exc:
                log.warning("managed ledger %s: could not record its close: %s", self.name, exc)
        # Deleting ledgers (empty, or trimmed) can wait for a storage timeout: they get a moment,
        # then are cut off. Left undone they are only garbage in storage, listed nowhere.
        if self._background:
            await asyncio.wait(list(self._background), timeout=BACKGROUND_DELETE_GRACE)
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background))
        self._current = None
        self._reader.clear()

    async def terminate(self) -> Position:
        """Refuse all further adds, for good; returns the last entry's position."""
        if self.state is State.TERMINATED:
            return self.last_confirmed_position
        if self.state in (State.CLOSED, State.FENCED, State.NONE):
            raise PersistenceError(f"managed ledger {self.name} is {self.state.value}")
        self.state = State.TERMINATED
        self._fail_waiting(TopicTerminatedError(f"topic {self.name} was terminated"))
        await self._stop_roll_task()
        await self._settle_in_flight()
        self._fail_in_flight(TopicTerminatedError(f"topic {self.name} was terminated"))
        await self._close_current()
        self._drop_empty_last_ledger()
        self._terminated = True
        await self._write_metadata()
        self._delete_unlisted()
        return self.last_confirmed_position

    # ---- adds ----

    def add_entry_nowait(self, data: bytes, callback: Callable[[PendingAdd], None] | None = None) -> PendingAdd:
        """Queue an add; adds complete in the order of these calls. Never raises: a refused add
        completes at once with its error."""
        op = PendingAdd(data, callback)
        state = self.state
        if state is State.LEDGER_OPENED and not self._waiting:
            if self._current_is_full():
                self.state = State.CLOSING_LEDGER
                self._waiting.append(op)
                self._start_roll()
            else:
                self._issue(op)
        elif state in (State.CLOSING_LEDGER, State.CREATING_LEDGER, State.LEDGER_OPENED):
            self._waiting.append(op)
        elif state is State.CLOSED_LEDGER:
            wait = self._last_create_failure + self._settings.ledger_creation_retry_seconds - time.monotonic()
            if wait > 0:
                op.fail(PersistenceError(
                    f"topic {self.name} has no ledger to write to: creating one failed; retry in {wait:.1f}s"))
            else:
                self._waiting.append(op)
                self._start_roll()
        else:
            op.fail(self._refusal())
        return op

    async def add_entry(self, data: bytes) -> Position:
        """Add one entry and wait for its position (or error)."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()

        def complete(op: PendingAdd) -> None:
            if future.done():
                return
            if op.error is not None:
                future.set_exception(op.error)
            else:
                assert op.position is not None
                future.set_result(op.position)

        self.add_entry_nowait(data, complete)
        return await future

    def _refusal(self) -> HeraldError:
        if self.state is State.FENCED:
            return FencedError(f"topic {self.name} was taken over by another broker: look it up again")
        if self.state is State.TERMINATED:
            return TopicTerminatedError(f"topic {self.name} was terminated: no more messages are accepted")
        if self.state is State.NONE:
            return ServiceNotReadyError(f"managed ledger {self.name} is not open yet")
        return PersistenceError(f"topic {self.name} is closed: reconnect and retry")

    def _current_is_full(self) -> bool:
        info = self._list[-1]
        age = time.time() - info.created_at
        if age < self._settings.min_ledger_rollover_seconds:
            return False
        return (self._issued >= self._settings.max_entries_per_ledger
                or self._issued_bytes >= self._settings.max_size_per_ledger
                or age >= self._settings.max_ledger_age_seconds)

    def _issue(self, op: PendingAdd) -> None:
        handle = self._current
        assert handle is not None
        op.done = False
        op.error = None
        self._issued += 1
        self._issued_bytes += len(op.data)
        self._in_flight.append(op)
        self._unsettled += 1
        written = functools.partial(self._written, op, handle)
        # Within the add's own trace context: the storage add span is the publish span's child.
        token = tracing.attach(op.trace) if op.trace is not None else None
        try:
            handle.add_entry_nowait(op.data, written)
        except HeraldError as exc:  # the ledger takes no adds now: fail it in turn, never from in here
            asyncio.get_running_loop().call_soon(written, -1, exc)
        finally:
            if token is not None:
                tracing.detach(token)

    def _written(self, op: PendingAdd, handle: LedgerHandle, entry_id: int, error: HeraldError | None) -> None:
        """The storage client's callback: adds complete in entry order (its one completion point)."""
        self._unsettled -= 1
        if error is None:
            op.position = Position(handle.ledger_id, entry_id)
        else:
            op.error = error
        op.done = True
        self._complete_in_order()
        if self._unsettled == 0 and self._settled is not None and not self._settled.done():
            self._settled.set_result(None)

    def _complete_in_order(self) -> None:
        flight = self._in_flight
        info = self._list[-1] if self._list else None
        while flight and flight[0].done:
            op = flight[0]
            if op.error is not None:
                self._head_failed(op.error)
                return
            flight.popleft()
            position = op.position
            assert position is not None and info is not None
            info.entries = position.entry_id + 1
            info.size += len(op.data)
            self._cache.insert(position.ledger_id, position.entry_id, op.data)
            op.succeed(position)

    def _head_failed(self, error: BaseException) -> None:
        if isinstance(error, FencedError):
            self._fence(error)
        elif self.state is State.LEDGER_OPENED:
            # Like Pulsar: close the broken ledger and re-send the unconfirmed adds to a new one.
            log.warning("managed ledger %s: write to ledger %s failed (%s): rolling over",
                        self.name, self.current_ledger_id, error)
            self.state = State.CLOSING_LEDGER
            self._start_roll()

    def _fence(self, error: BaseException) -> None:
        if self.state is State.FENCED:
            return
        log.warning("managed ledger %s fenced: %s", self.name, error)
        self.state = State.FENCED
        fenced = FencedError(f"topic {self.name} was taken over by another broker: look it up again")
        self._fail_in_flight(fenced)
        self._fail_waiting(fenced)
        if self.on_fenced is not None:
            self.on_fenced()

    def _fail_waiting(self, error: HeraldError) -> None:
        while self._waiting:
            self._waiting.popleft().fail(error)

    def _fail_in_flight(self, error: HeraldError) -> None:
        while self._in_flight:
            op = self._in_flight.popleft()
            op.fail(op.error if isinstance(op.error, HeraldError) and op.done else error)

    async def _settle_in_flight(self) -> None:
        # Every add's callback, those of adds already failed by fencing too: none may come after close().
        while self._unsettled:
            if self._settled is None or self._settled.done():
                self._settled = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._settled)

    # ---- rollover ----

    def _start_roll(self) -> None:
        if self._roll_task is None or self._roll_task.done():
            self._roll_task = asyncio.get_running_loop().create_task(self._roll())

    async def _stop_roll_task(self) -> None:
        task, self._roll_task = self._roll_task, None
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _roll(self) -> None:
        """Close the open ledger (after its adds settle), create the next, issue the queued adds;
        again while the new ledger fills up during that."""
        try:
            while True:
                if self.state is State.CLOSING_LEDGER:
                    await self._settle_in_flight()
                    if self.state is not State.CLOSING_LEDGER:
                        return
                    gave_up = self._requeue_unconfirmed()
                    await self._close_current()
                    if self.state is not State.CLOSING_LEDGER:
                        return
                    self._drop_empty_last_ledger()
                    self.state = State.CLOSED_LEDGER
                    if gave_up:
                        # Storage keeps failing: stop making ledgers, fail fast for a while, as
                        # after a failed creation; the next add after that tries again.
                        self._last_create_failure = time.monotonic()
                        return
                if self.state is not State.CLOSED_LEDGER or not await self._create_ledger():
                    return
                if self.on_ledger_closed is not None and len(self._list) > 1:
                    self.on_ledger_closed()
                if not self._issue_waiting():
                    return
        except Exception as exc:  # never leave adds waiting on a dead task
            log.exception("managed ledger %s: rollover failed", self.name)
            if self.state in (State.CLOSING_LEDGER, State.CREATING_LEDGER, State.CLOSED_LEDGER):
                self.state = State.CLOSED_LEDGER
                self._last_create_failure = time.monotonic()
                self._fail_waiting(PersistenceError(f"topic {self.name}: rollover failed: {exc}"))

    def _requeue_unconfirmed(self) -> bool:
        """What is left in flight starts with a failed add: it and all after it go to the next
        ledger, unless it failed too often: then they all fail (True)."""
        leftovers = list(self._in_flight)
        self._in_flight.clear()
        for op in reversed(leftovers):
            op.attempts += 1
            self._waiting.appendleft(op)
        if leftovers and leftovers[0].attempts >= MAX_ADD_ATTEMPTS:
            error = leftovers[0].error
            self._fail_waiting(error if isinstance(error, HeraldError)
                               else PersistenceError(f"write to {self.name} failed"))
            return True
        return False

    def _drop_empty_last_ledger(self) -> None:
        # A ledger closed without entries (its first write failed) holds nothing to read: leave it
        # out of the list so failures do not grow it; storage drops it once the list is written.
        if self._list and self._list[-1].entries == 0:
            self._unlisted.append(self._list.pop_last().ledger_id)

    def _delete_unlisted(self) -> None:
        """Delete from storage the ledgers the list (as just written) no longer names."""
        doomed, self._unlisted = self._unlisted, []
        for ledger_id in doomed:
            task = asyncio.get_running_loop().create_task(self._delete_quietly(ledger_id))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _close_current(self) -> None:
        handle, self._current = self._current, None
        if handle is None:
            return
        info = self._list.find(handle.ledger_id)
        if info is not None:
            info.closed_at = time.time()
        try:
            await handle.close()
        except HeraldError as exc:
            # Its last entry is then settled by recovery when the ledger is next opened.
            log.warning("managed ledger %s: closing ledger %s failed: %s", self.name, handle.ledger_id, exc)

    async def _create_ledger(self) -> bool:
        self.state = State.CREATING_LEDGER
        try:
            handle = await self._storage.create_ledger(*self.persistence, {"managed-ledger": self.name})
        except HeraldError as exc:
            self._creation_failed(exc)
            return False
        info = LedgerInfo(handle.ledger_id, created_at=time.time())
        try:
            await self._write_metadata(extra=info)
        except BadVersionError as exc:
            await self._delete_quietly(handle.ledger_id)
            self._fence(exc)
            return False
        except HeraldError as exc:
            await self._delete_quietly(handle.ledger_id)
            self._creation_failed(exc)
            return False
        self._delete_unlisted()
        if self.state is not State.CREATING_LEDGER:  # closed or fenced meanwhile
            return False
        self._list.append(info)
        self._set_current(handle)
        self.state = State.LEDGER_OPENED
        return True

    def _creation_failed(self, exc: HeraldError) -> None:
        log.warning("managed ledger %s: creating a ledger failed: %s", self.name, exc)
        if self.state is not State.CREATING_LEDGER:
            return
        self.state = State.CLOSED_LEDGER
        self._last_create_failure = time.monotonic()
        self._fail_waiting(PersistenceError(f"topic {self.name}: could not create a ledger: {exc}"))

    def _issue_waiting(self) -> bool:
        """Issue queued adds to the new ledger; True when it filled up and must roll over again."""
        while self._waiting and self.state is State.LEDGER_OPENED:
            if self._current_is_full():
                self.state = State.CLOSING_LEDGER
                return True
            self._issue(self._waiting.popleft())
        return False

    def _set_current(self, handle: LedgerHandle) -> None:
        self._current = handle
        self._issued = 0
        self._issued_bytes = 0

    async def _write_metadata(self, extra: LedgerInfo | None = None) -> None:
        """Record the list (plus `extra`, a ledger being added) by compare-and-set."""
        async with self._metadata_lock:
            record = ledger_list.encode_record(self._list.to_json(extra), self._terminated)
            self._version = await self._store.put(self.key, record, expected_version=self._version)

    async def _delete_quietly(self, ledger_id: int) -> None:
        try:
            await self._storage.delete_ledger(ledger_id)
        except HeraldError as exc:
            log.warning("managed ledger %s: could not delete ledger %s: %s", self.name, ledger_id, exc)

    # ---- retention ----

    async def trim_ledgers(self, ledger_ids: Sequence[int]) -> list[int]:
        """Delete ledgers from the head of the list (never the last one): first from the list, by
        compare-and-set, then from storage in the background. Returns the ids deleted; none when
        the list no longer starts with them or the ledger is closed or fenced."""
        ids = list(ledger_ids)
        async with self._metadata_lock:
            count = len(ids)
            if (not ids or self.state in (State.NONE, State.CLOSED, State.FENCED)
                    or count >= len(self._list) or self._list.ids[:count] != ids):
                return []
            record = ledger_list.encode_record(self._list.to_json()[count:], self._terminated)
            try:
                self._version = await self._store.put(self.key, record, expected_version=self._version)
            except BadVersionError as exc:
                self._fence(exc)
                return []
            self._list.remove_first(count)
        for ledger_id in ids:
            self._reader.forget(ledger_id)
        self._unlisted.extend(ids)
        self._delete_unlisted()
        log.info("managed ledger %s: deleted ledgers %s (no subscription needs them; retention keeps them no "
                 "longer)", self.name, ids)
        return ids

    # ---- positions ----

    @property
    def terminated(self) -> bool:
        """Terminated: no add is accepted again, across reloads too."""
        return self._terminated or self.state is State.TERMINATED

    @property
    def current_ledger_id(self) -> int:
        return self._list[-1].ledger_id if self._list else -1

    @property
    def last_confirmed_position(self) -> Position:
        """The last durable entry; (ledger, -1) when there is none yet."""
        return self._list.last_confirmed_position

    @property
    def first_position(self) -> Position:
        """Where the first entry is (or will be)."""
        return self._list.first_position

    @staticmethod
    def next_position(position: Position) -> Position:
        """The position after `position`; normalize() maps it past a ledger's end."""
        return Position(position.ledger_id, position.entry_id + 1)

    def normalize(self, position: Position) -> Position:
        """The first entry at or after `position` (see LedgerList.normalize)."""
        return self._list.normalize(position)

    def has_entry(self, position: Position) -> bool:
        return self._list.has_entry(position)

    def has_entries_from(self, position: Position) -> bool:
        return self.normalize(position) <= self.last_confirmed_position

    def number_of_entries(self, after: Position, up_to: Position) -> int:
        """How many entries p there are with after < p <= up_to."""
        return self._list.number_of_entries(after, up_to)

    @property
    def number_of_entries_total(self) -> int:
        return self._list.number_of_entries_total

    @property
    def storage_size(self) -> int:
        return self._list.size_total

    def size_after(self, position: Position) -> int:
        """Bytes stored after `position` (a backlog's size): exact for whole ledgers, estimated
        from the average entry size within the position's own ledger."""
        return self._list.size_after(position)

    @property
    def storage(self) -> LedgerStorage:
        """Where its ledgers live (a compaction writes its compacted ledgers there too)."""
        return self._storage

    @property
    def ledgers(self) -> list[LedgerInfo]:
        return list(self._list)

    # ---- reads ----

    async def read_entries(self, start: Position, max_entries: int, *, cache: bool = True,
                           ) -> list[tuple[Position, bytes]]:
        """Up to max_entries durable entries from `start` on, across ledgers; cache=False: entries
        read from storage are not cached (a backlog read)."""
        return await self._reader.read_entries(start, max_entries, cache=cache)

    def is_cached(self, position: Position) -> bool:
        """Whether the entry at `position` (normalized) is in the entry cache."""
        return self._cache.contains(position.ledger_id, position.entry_id)

    def average_entry_size(self, ledger_id: int) -> int:
        """The mean size of a listed ledger's entries (0 when unknown)."""
        info = self._list.find(ledger_id)
        return info.size // info.entries if info is not None and info.entries and info.size else 0

    @property
    def read_ahead_budget(self) -> ReadAheadBudget:
        """The broker's bound on backlog reads buffered ahead (broker.core.read_ahead)."""
        return self._cache.read_ahead_budget
