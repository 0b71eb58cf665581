"""The periodic jobs every persistent topic of one broker shares (broker.core.scheduler): cursor
flushes of the topics whose cursors changed, retention, message expiry and backlog quota checks.
One task each, whatever the number of topics; their intervals are the broker's settings."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from herald.broker.core.backlog_quota import BacklogQuotaGuard
from herald.broker.core.dedup import MessageDeduplication
from herald.broker.core.expiry import MessageExpiry
from herald.broker.core.retention import RetentionTrimmer
from herald.broker.core.scheduler import PeriodicJob
from herald.broker.core.subscription import Subscription
from herald.broker.settings import BrokerSettings
from herald.common.errors import BadVersionError, HeraldError

log = logging.getLogger(__name__)


class CursorFlush:
    """One topic's part in the cursor flush job: marked when one of its cursors becomes dirty (or
    a producer leaves), its pass persists the dirty cursors and lets dedup forget the producers
    inactive long enough (a timer marks it again when the next one is due, not every pass)."""

    def __init__(self, topic: str, job: PeriodicJob[CursorFlush], subscriptions: Callable[[], Iterable[Subscription]],
                 dedup: MessageDeduplication, inactivity: float, fenced: Callable[[], None]) -> None:
        self._topic = topic
        self._job = job
        self._subscriptions = subscriptions
        self._dedup = dedup
        self._inactivity = inactivity
        self._fenced = fenced
        self._active = False
        self._purge_timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._active = True
        self._job.add(self)
        self.mark()  # what was dirty before loading

    def mark(self) -> None:
        self._job.mark(self)

    async def stop(self) -> None:
        self._active = False
        await self._job.remove(self)
        if self._purge_timer is not None:
            self._purge_timer.cancel()

    def _purge_due(self) -> None:
        self._purge_timer = None
        self.mark()

    async def run(self) -> None:
        if not self._active:
            return
        now = time.monotonic()
        self._dedup.purge_inactive(now, self._inactivity)
        due = self._dedup.next_purge_at(self._inactivity)
        if due is not None and self._purge_timer is None:
            self._purge_timer = asyncio.get_running_loop().call_later(max(0.0, due - now), self._purge_due)
        for sub in list(self._subscriptions()):
            if sub.cursor.dirty and not sub.cursor.fenced:
                try:
                    await sub.cursor.flush()
                except BadVersionError:
                    # Someone else wrote the cursor: ownership is in doubt. Unloading lets the
                    # rightful owner (maybe us, after ownership is checked again) reload it.
                    self._active = False
                    self._fenced()
                    return
                except HeraldError as exc:  # still dirty (marked again): the next pass retries
                    log.warning("topic %s: persisting cursor %s failed: %s", self._topic, sub.name, exc)

    def __repr__(self) -> str:
        return f"cursors of {self._topic}"


@dataclass
class TopicJobs:
    cursor_flush: PeriodicJob[CursorFlush]
    retention: PeriodicJob[RetentionTrimmer]
    expiry: PeriodicJob[MessageExpiry]
    backlog_quota: PeriodicJob[BacklogQuotaGuard]

    @classmethod
    def for_settings(cls, settings: BrokerSettings) -> TopicJobs:
        return cls(
            # Only the topics marked (a cursor became dirty, a producer left) are flushed.
            cursor_flush=PeriodicJob("cursor flush", settings.cursor_flush_interval, CursorFlush.run,
                                     every_member=False),
            retention=PeriodicJob("retention", settings.retention_check_interval, RetentionTrimmer.run_pass),
            expiry=PeriodicJob("message expiry", settings.message_expiry_check_interval, MessageExpiry.expire),
            backlog_quota=PeriodicJob("backlog quota", settings.backlog_quota_check_interval,
                                      BacklogQuotaGuard.run_check),
        )

    @property
    def tasks(self) -> int:
        """The tasks the jobs hold: at most one each, whatever the number of topics."""
        return sum(job.running for job in (self.cursor_flush, self.retention, self.expiry, self.backlog_quota))
