"""Message TTL (Pulsar's message expiry): entries published longer ago than the topic's
`message_ttl_seconds` are acknowledged on every durable subscription, as if consumed, checked every
`message_expiry_check_interval` seconds.

A check reads each subscription's backlog from its oldest unacknowledged entry on and stops at the
first entry still young, so over time every entry is read at most once for expiry (the expired
ones are acknowledged and never read for it again). The cutoff is the producer's publish time.
Readers (non-durable subscriptions) never expire anything: they hold nothing back. Nor does the
compaction's "__compaction" cursor (as in Pulsar since 3.0.3): expiring it would let retention
delete messages no compaction has read yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from herald.broker.core.compaction.topic_compaction import COMPACTION_CURSOR
from herald.broker.core.ledger_list import Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.broker.core.scheduler import PeriodicJob
from herald.broker.core.subscription import Subscription
from herald.common.codec.entry import read_metadata
from herald.common.errors import HeraldError, InvalidArgumentError, NotFoundError

log = logging.getLogger(__name__)

READ_CHUNK = 100  # entries read per step of a check


class ExpiringTopic(Protocol):
    """What expiry acts on: a stored topic's ledger, subscriptions and TTL."""

    name: str
    ledger: ManagedLedger
    message_ttl_seconds: int
    closed: bool

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...


class MessageExpiry:
    """One topic's expiry checks: a task that runs them every `interval` seconds until stopped."""

    def __init__(self, topic: ExpiringTopic, interval: float, job: PeriodicJob[MessageExpiry] | None = None) -> None:
        self._topic = topic
        self._interval = interval
        # The broker's one expiry job runs every topic's checks (broker.core.scheduler).
        self._job = job if job is not None else PeriodicJob("message expiry", interval, MessageExpiry.expire)

    def start(self) -> None:
        if self._interval > 0:
            self._job.add(self)

    async def stop(self) -> None:
        # A check in progress finishes (it only acknowledges in memory and stops at a closed topic).
        await self._job.remove(self)

    async def expire(self, now_ms: int | None = None) -> int:
        """One check of every durable subscription; returns the messages expired."""
        ttl = self._topic.message_ttl_seconds
        if ttl <= 0 or self._topic.closed:
            return 0
        cutoff = (int(time.time() * 1000) if now_ms is None else now_ms) - ttl * 1000
        expired = 0
        for sub in list(self._topic.subscriptions.values()):
            if sub.durable and not sub.closed and sub.name != COMPACTION_CURSOR:
                expired += await self._expire_subscription(sub, cutoff)
        return expired

    async def expire_older_than(self, seconds: int, subscription: str | None, now_ms: int | None = None) -> int:
        """An admin's expiry (pulsar-admin expire-messages): acknowledge what was published more than
        `seconds` ago on `subscription` (None: every durable one), whatever the topic's TTL; returns
        the messages expired. NotFoundError for a subscription the topic does not have."""
        if seconds < 0:
            raise InvalidArgumentError(f"expire time {seconds}s is invalid: give 0 seconds or more")
        cutoff = (int(time.time() * 1000) if now_ms is None else now_ms) - seconds * 1000
        if subscription is not None:
            sub = self._topic.subscriptions.get(subscription)
            if sub is None or not sub.durable:
                raise NotFoundError(f"subscription {subscription!r} does not exist on {self._topic.name}")
            return await self._expire_subscription(sub, cutoff)
        expired = 0
        for sub in list(self._topic.subscriptions.values()):
            if sub.durable and not sub.closed and sub.name != COMPACTION_CURSOR:
                expired += await self._expire_subscription(sub, cutoff)
        return expired

    async def _expire_subscription(self, sub: Subscription, cutoff_ms: int) -> int:
        """Acknowledge, up to the first entry published after cutoff_ms, what is unacknowledged."""
        ledger = self._topic.ledger
        cursor = sub.cursor
        started_at = cursor.mark_delete_position
        candidates: list[tuple[Position, int]] = []  # (position, messages) of old unacked entries
        position = ledger.normalize(Position(started_at.ledger_id, started_at.entry_id + 1))
        young = False
        while not young and not self._topic.closed and ledger.has_entries_from(position):
            entries = await ledger.read_entries(position, READ_CHUNK)
            if not entries:
                break
            for entry_position, data in entries:
                try:
                    metadata = read_metadata(data, verify=False)
                    published, messages = metadata.publish_time, max(1, metadata.num_messages)
                except HeraldError:
                    published, messages = 0, 1  # unreadable: as old as can be
                if published > cutoff_ms:
                    young = True
                    break
                candidates.append((entry_position, messages))
            last = entries[-1][0]
            position = ledger.normalize(Position(last.ledger_id, last.entry_id + 1))
            await asyncio.sleep(0)  # cache hits never suspend: let the broker breathe
        # A reset moved the cursor back meanwhile: what was read no longer says what to expire.
        if not candidates or sub.closed or cursor.mark_delete_position < started_at:
            return 0
        messages = sum(count for entry_position, count in candidates if not cursor.is_acked(entry_position))
        cursor.ack_cumulative(candidates[-1][0])
        sub.msg_expired_counter += messages
        sub.cursor_moved()
        if messages:
            log.info("topic %s: subscription %s: %d messages expired (published before %d ms)", self._topic.name,
                     sub.name, messages, cutoff_ms)
        return messages
