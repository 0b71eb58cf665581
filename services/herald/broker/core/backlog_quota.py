"""Backlog quota (Pulsar's BacklogQuotaManager): a limit on what a topic's slowest durable
subscription has not acknowledged, by size (bytes stored after its mark-delete position) and by age
(how long ago its oldest unacknowledged entry was published).

Size is checked on publish, cheaply: the last measure plus what was published since is an upper
bound of the backlog, so the exact (per-ledger) measure is taken again only when that bound is over
the limit. Age needs a read, so it is checked every `backlog_quota_check_interval` seconds, together
with a fresh size measure. Over quota, the policy says what happens: producer_exception fails sends
with BacklogQuotaExceededError; producer_request_hold keeps sends waiting, in order, until the
backlog is back under quota (the client's send timeout bounds the wait); consumer_backlog_eviction
acknowledges the slowest subscriptions' oldest entries until the topic is under quota. Readers
(non-durable subscriptions) neither count nor are moved.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from herald.broker.core.ledger_list import Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.broker.core.scheduler import PeriodicJob
from herald.broker.core.subscription import Subscription
from herald.common.codec.entry import read_metadata
from herald.common.errors import BacklogQuotaExceededError, HeraldError, PersistenceError
from herald.metadata.policies import BacklogQuota, BacklogQuotaPolicy

log = logging.getLogger(__name__)

# While sends are held, the backlog is checked at least this often (seconds), so that they go
# soon after consumers catch up even when the check interval is long.
HOLD_RECHECK_SECONDS = 1.0
READ_CHUNK = 100  # entries read per step when evicting by age


class QuotaTopic(Protocol):
    """What the guard watches: a stored topic's ledger and subscriptions."""

    name: str
    ledger: ManagedLedger

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...


@dataclass(frozen=True, slots=True)
class HeldSend:
    size: int
    release: Callable[[], None]
    fail: Callable[[HeraldError], None]


class BacklogQuotaGuard:
    """One persistent topic's backlog quota: admits, refuses or holds its sends, and evicts."""

    def __init__(self, topic: QuotaTopic, interval: float, clock: Callable[[], float] = time.time,
                 job: PeriodicJob[BacklogQuotaGuard] | None = None) -> None:
        self._topic = topic
        self._interval = interval
        self._clock = clock
        self.quota = BacklogQuota()  # no limit until policies are applied
        self._estimate = 0  # bytes: the last measure plus what was admitted since (>= the backlog)
        self._size_exceeded = False
        self._age_exceeded = False
        self._oldest: tuple[Position, int] | None = None  # (position, publish time ms) last read
        self._held: deque[HeldSend] = deque()
        # The broker's one backlog quota job runs every topic's checks (broker.core.scheduler);
        # while sends are held, a timer asks for a check every HOLD_RECHECK_SECONDS too.
        self._job = job if job is not None else PeriodicJob("backlog quota", interval, BacklogQuotaGuard.run_check)
        self._recheck: asyncio.TimerHandle | None = None
        self.evicted_entries = 0

    # ---- life cycle ----

    def start(self) -> None:
        self._job.add(self)

    async def stop(self) -> None:
        """Stop checking; held sends fail (their clients resend after reconnecting)."""
        await self._job.remove(self)
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        held, self._held = self._held, deque()
        error = PersistenceError(f"topic {self._topic.name} is closing: reconnect and retry")
        for send in held:
            send.fail(error)

    def update(self, quota: BacklogQuota) -> None:
        """New effective quota (policies changed): re-measured now, and checked soon."""
        self.quota = quota
        self._estimate = self.measure()
        self._size_exceeded = quota.limits_size and self._estimate > quota.limit_bytes
        if not quota.limits_age:
            self._age_exceeded = False
        self._job.request(self)

    @property
    def exceeded(self) -> bool:
        quota = self.quota
        return (quota.limits_size and self._size_exceeded) or (quota.limits_age and self._age_exceeded)

    def check_new_producer(self) -> None:
        """Under producer_exception a topic over quota takes no new producer, as in Pulsar (its
        sends would only fail); the size is measured afresh, consumers may have caught up."""
        quota = self.quota
        if quota.policy is not BacklogQuotaPolicy.PRODUCER_EXCEPTION:
            return
        if quota.limits_size:
            self._estimate = self.measure()
            self._size_exceeded = self._estimate > quota.limit_bytes
        if self.exceeded:
            raise BacklogQuotaExceededError(
                f"Cannot create a producer on {self._topic.name}: its backlog is over quota ({self.describe()}); "
                "consumers must catch up, or the quota be raised")

    @property
    def held(self) -> int:
        """Sends waiting for the backlog to shrink."""
        return len(self._held)

    # ---- the publish path ----

    def admit(self, size: int) -> bool:
        """Whether a send of `size` bytes may be stored now. False: hold it (hold() it, then it is
        stored on release); BacklogQuotaExceededError under producer_exception."""
        if self._held:
            return False  # nothing overtakes sends already waiting
        quota = self.quota
        if not quota.limits_size and not quota.limits_age:
            return True
        if quota.limits_size:
            if self._estimate > quota.limit_bytes:
                self._estimate = self.measure()
            self._size_exceeded = self._estimate > quota.limit_bytes
        if self.exceeded:
            if quota.policy is BacklogQuotaPolicy.PRODUCER_EXCEPTION:
                raise BacklogQuotaExceededError(
                    f"Cannot send to {self._topic.name}: its backlog is over quota ({self.describe()}); "
                    "consumers must catch up, or the quota be raised")
            if quota.policy is BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD:
                return False
            self._job.request(self)  # consumer_backlog_eviction: make room now, keep accepting
        self._estimate += size
        return True

    def hold(self, size: int, release: Callable[[], None], fail: Callable[[HeraldError], None]) -> None:
        """Keep a send until the backlog is under quota again: then `release` stores it; `fail`
        is called instead when the topic closes first."""
        self._held.append(HeldSend(size, release, fail))
        self._job.request(self)

    def describe(self) -> str:
        quota = self.quota
        parts = []
        if quota.limits_size and self._size_exceeded:
            parts.append(f"{self._estimate} bytes unacknowledged, limit {quota.limit_bytes} bytes")
        if quota.limits_age and self._age_exceeded and self._oldest is not None:
            age = self._clock() - self._oldest[1] / 1000
            parts.append(f"oldest unacknowledged message {age:.0f}s old, limit {quota.limit_seconds}s")
        return "; ".join(parts) or "over quota"

    # ---- measuring ----

    def _slowest(self) -> list[Subscription]:
        return [sub for sub in self._topic.subscriptions.values() if sub.durable and not sub.closed]

    def measure(self) -> int:
        """Bytes after the slowest durable subscription's mark-delete position (0 without any)."""
        subs = self._slowest()
        if not subs:
            return 0
        slowest = min(sub.cursor.mark_delete_position for sub in subs)
        return self._topic.ledger.size_after(slowest)

    async def oldest_age(self) -> float:
        """Seconds since the slowest durable subscription's oldest unacknowledged entry was
        published (0 without backlog)."""
        subs = self._slowest()
        if not subs:
            return 0.0
        ledger = self._topic.ledger
        mark_delete = min(sub.cursor.mark_delete_position for sub in subs)
        position = ledger.normalize(Position(mark_delete.ledger_id, mark_delete.entry_id + 1))
        if not ledger.has_entries_from(position):
            return 0.0
        if self._oldest is None or self._oldest[0] != position:
            entries = await ledger.read_entries(position, 1)
            if not entries:
                return 0.0
            self._oldest = (entries[0][0], _publish_time(entries[0][1]))
        return max(0.0, self._clock() - self._oldest[1] / 1000)

    # ---- checking ----

    async def run_check(self) -> None:
        """The job's check; while sends stay held, another one in HOLD_RECHECK_SECONDS."""
        try:
            await self.check()
        finally:
            if self._held and self._recheck is None:
                self._recheck = asyncio.get_running_loop().call_later(HOLD_RECHECK_SECONDS, self._recheck_held)

    def _recheck_held(self) -> None:
        self._recheck = None
        self._job.request(self)

    async def check(self) -> None:
        """Measure size and age, evict under consumer_backlog_eviction, release held sends once
        the backlog is under quota (or holding is no longer the policy)."""
        quota = self.quota
        self._estimate = self.measure()
        self._size_exceeded = quota.limits_size and self._estimate > quota.limit_bytes
        self._age_exceeded = quota.limits_age and await self.oldest_age() > quota.limit_seconds
        if self.exceeded and quota.policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
            await self.evict()
            self._estimate = self.measure()
            self._size_exceeded = quota.limits_size and self._estimate > quota.limit_bytes
            self._age_exceeded = quota.limits_age and await self.oldest_age() > quota.limit_seconds
        self._release()

    def _release(self) -> None:
        quota = self.quota
        holding = quota.policy is BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD
        while self._held:
            if holding and quota.limits_size and self._estimate > quota.limit_bytes:
                self._estimate = self.measure()
                self._size_exceeded = self._estimate > quota.limit_bytes
            if holding and self.exceeded:
                return
            send = self._held.popleft()
            self._estimate += send.size
            send.release()

    # ---- eviction ----

    async def evict(self) -> int:
        """Acknowledge the oldest entries of the subscriptions over quota; returns entries evicted."""
        quota = self.quota
        evicted = 0
        if quota.limits_size:
            target = self._position_keeping(quota.limit_bytes)
            if target is not None:
                for sub in self._slowest():
                    evicted += self._move(sub, target)
        if quota.limits_age:
            cutoff_ms = int((self._clock() - quota.limit_seconds) * 1000)
            for sub in self._slowest():
                target = await self._last_published_by(sub, cutoff_ms)
                if target is not None:
                    evicted += self._move(sub, target)
        self.evicted_entries += evicted
        return evicted

    def _move(self, sub: Subscription, target: Position) -> int:
        cursor = sub.cursor
        if target <= cursor.mark_delete_position:
            return 0
        before = cursor.backlog
        cursor.ack_cumulative(target)
        sub.cursor_moved()
        moved = before - cursor.backlog
        log.info("topic %s: backlog quota evicted %d entries of subscription %s (up to %s)",
                 self._topic.name, moved, sub.name, target)
        return moved

    def _position_keeping(self, limit_bytes: int) -> Position | None:
        """The earliest position P such that what is stored after P fits in limit_bytes (the last
        entry to acknowledge); None when everything fits."""
        kept = 0
        for info in reversed(self._topic.ledger.ledgers):
            if info.entries <= 0:
                continue
            if kept + info.size <= limit_bytes:
                kept += info.size
                continue
            average = info.size / info.entries
            keep_entries = int((limit_bytes - kept) // average) if average > 0 else info.entries
            return Position(info.ledger_id, info.entries - keep_entries - 1)
        return None

    async def _last_published_by(self, sub: Subscription, cutoff_ms: int) -> Position | None:
        """The last entry, from the subscription's oldest unacknowledged on, published at or
        before cutoff_ms (stops at the first younger one)."""
        ledger = self._topic.ledger
        mark_delete = sub.cursor.mark_delete_position
        position = ledger.normalize(Position(mark_delete.ledger_id, mark_delete.entry_id + 1))
        found: Position | None = None
        while ledger.has_entries_from(position):
            entries = await ledger.read_entries(position, READ_CHUNK)
            if not entries:
                break
            for entry_position, data in entries:
                if _publish_time(data) > cutoff_ms:
                    return found
                found = entry_position
            last = entries[-1][0]
            position = ledger.normalize(Position(last.ledger_id, last.entry_id + 1))
            await asyncio.sleep(0)  # cache hits never suspend: let the broker breathe
        return found


def _publish_time(data: bytes) -> int:
    """An entry's publish time (ms); 0 (as old as can be) when its metadata cannot be read."""
    try:
        return int(read_metadata(data, verify=False).publish_time)
    except HeraldError:
        return 0
