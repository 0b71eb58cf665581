"""Retention: deleting a topic's ledgers once every subscription has consumed them and the retention
policy no longer keeps them (Pulsar's ManagedLedgerImpl.trimConsumedLedgersInBackground).

A ledger is deleted when (1) it is not the last ledger of the list (the open one), (2) it is wholly
consumed: every durable subscription's mark-delete position is at or past its last entry (a topic
with no subscription keeps data only by retention), and (3) retention does not keep it: it closed
at least retention_time_seconds ago and the ledgers after it hold at least retention_size_bytes
(-1 on either keeps everything). Deletion runs from the head of the list, so what is kept is
always its tail. Deduplication recovery replays from its snapshot, so before ledgers go the
snapshot must be at or past their last entry: a fresh one is taken when it is not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from herald.broker.core.dedup import MessageDeduplication
from herald.broker.core.ledger_list import LedgerInfo, Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.broker.core.scheduler import PeriodicJob
from herald.common.errors import HeraldError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    time_seconds: float = 0.0  # -1: for ever
    size_bytes: int = 0  # -1: unlimited

    def keeps(self, age_seconds: float, newer_bytes: int) -> bool:
        """Whether a consumed ledger closed age_seconds ago, with newer_bytes in the ledgers after
        it, is still retained: as in Pulsar, while it is within BOTH limits (-1: no limit; a limit
        of 0 keeps nothing)."""
        within_time = self.time_seconds < 0 or age_seconds < self.time_seconds
        within_size = self.size_bytes < 0 or newer_bytes < self.size_bytes
        return within_time and within_size


def trimmable(
    ledgers: Sequence[LedgerInfo], first_unconsumed_ledger: int, policy: RetentionPolicy, now: float,
) -> list[LedgerInfo]:
    """The ledgers to delete: the longest head of `ledgers` (never its last) whose ledgers all lie
    before first_unconsumed_ledger and are not kept by the policy."""
    newer_bytes = sum(info.size for info in ledgers)
    doomed: list[LedgerInfo] = []
    for info in ledgers[:-1]:
        newer_bytes -= info.size
        if info.ledger_id >= first_unconsumed_ledger:
            break
        if policy.keeps(now - (info.closed_at or info.created_at), newer_bytes):
            break
        doomed.append(info)
    return doomed


class RetentionTrimmer:
    """One topic's trimming: runs every `interval` seconds and when asked (after a rollover), one
    pass at a time, until stopped. A pass in progress finishes: its compare-and-set is never cut
    off halfway."""

    def __init__(
        self,
        ledger: ManagedLedger,
        mark_deletes: Callable[[], list[Position]],
        dedup: MessageDeduplication,
        policy: RetentionPolicy,
        interval: float,
        clock: Callable[[], float] = time.time,
        job: PeriodicJob[RetentionTrimmer] | None = None,
    ) -> None:
        self._ledger = ledger
        self._mark_deletes = mark_deletes
        self._dedup = dedup
        self.policy = policy
        self._interval = interval
        self.clock = clock
        self._lock = asyncio.Lock()
        self._stopping = False
        self._requested_early = False  # request() came before start()
        # The broker's one retention job runs every topic's passes (broker.core.scheduler).
        self._job = job if job is not None else PeriodicJob("retention", interval, RetentionTrimmer.run_pass)
        # Called after each periodic pass: the topic's compaction checks its threshold here.
        self.after_pass: Callable[[], object] | None = None

    def start(self) -> None:
        if not self._stopping:
            self._job.add(self)
            if self._requested_early:
                self._job.request(self)

    def request(self) -> None:
        """Check soon (a ledger just closed); before start(), as soon as started."""
        self._requested_early = True
        self._job.request(self)

    async def stop(self) -> None:
        self._stopping = True
        await self._job.remove(self)

    async def run_pass(self) -> None:
        """One periodic (or requested) pass: trim, then the after-pass check."""
        if self._stopping:
            return
        try:
            await self.trim()
        except HeraldError as exc:
            log.warning("managed ledger %s: trimming consumed ledgers failed: %s", self._ledger.name, exc)
        except Exception:
            log.exception("managed ledger %s: trimming consumed ledgers failed", self._ledger.name)
        if self.after_pass is not None:
            try:
                self.after_pass()
            except HeraldError as exc:
                log.warning("managed ledger %s: periodic check failed: %s", self._ledger.name, exc)

    async def trim(self) -> list[int]:
        """One pass: delete what retention lets go; returns the ledger ids deleted."""
        async with self._lock:
            ledger = self._ledger
            positions = self._mark_deletes()
            if positions:
                first_unconsumed = ledger.normalize(ledger.next_position(min(positions))).ledger_id
            else:
                first_unconsumed = ledger.current_ledger_id
            doomed = trimmable(ledger.ledgers, first_unconsumed, self.policy, self.clock())
            if doomed and self._dedup.enabled and self._dedup.snapshot_position < doomed[-1].last_position:
                reached = await self._dedup.snapshot()
                doomed = [info for info in doomed if info.last_position <= reached]
            if not doomed:
                return []
            return await ledger.trim_ledgers([info.ledger_id for info in doomed])
