"""Ledger garbage collection on a storage node (BookKeeper's GarbageCollectorThread): ledgers held
here whose metadata (/ledgers/<id>) is gone are deleted locally. A ledger's delete is sent to its
nodes before its metadata goes, but a node that was down or unreachable then never got it, and
nothing else would ever free that space.

Guard against deleting a ledger being created: its metadata is written before any of its entries
reach a node, and each round lists the local ledgers before the metadata, so a ledger created
meanwhile is in the metadata listing. On top of that a ledger is deleted only when absent from two
listings in a row at least gc_grace seconds apart. A node pointed at the wrong metadata store must
not empty itself: a store without the ledger-id counter is not collected against, and ledgers with
ids above the counter are never collected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from herald.common.errors import HeraldError
from herald.common.tasks import cancel_and_wait, wait_event
from herald.metadata.store import MetadataStore
from herald.storage.node.ledger_store import LedgerStore

log = logging.getLogger(__name__)
LEDGERS_PREFIX = "/ledgers/"
LEDGER_ID_COUNTER = "/counters/ledger-id"  # the storage client allocates ledger ids from it


class LedgerGarbageCollector:
    """Every `interval` seconds, deletes the local ledgers absent from the metadata store for `grace`."""

    def __init__(self, ledgers: LedgerStore, metadata: MetadataStore, *, interval: float, grace: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ledgers = ledgers
        self._metadata = metadata
        self.interval = interval
        self.grace = grace
        self._clock = clock
        self._absent_since: dict[int, float] = {}  # ledger id -> first listing it was absent from
        self.collected = 0  # ledgers deleted so far
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._stop.clear()
        self._task = asyncio.create_task(self._run(), name="storage-ledger-gc")

    async def stop(self) -> None:
        self._stop.set()
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while not await wait_event(self._stop, self.interval):
            try:
                await self.collect()
            except HeraldError as exc:
                log.warning("ledger garbage collection failed (retrying in %.0f s): %s", self.interval, exc)

    async def collect(self) -> list[int]:
        """One round; the ledgers deleted."""
        local = set(self._ledgers.ledger_ids())  # before the metadata: see the module docstring
        counter = await self._metadata.get(LEDGER_ID_COUNTER)
        if counter is None:
            if local:
                log.warning("ledger garbage collection skipped: the metadata store has no %s, so it is not the "
                            "store these ledgers were made in; check the node's metadata_url", LEDGER_ID_COUNTER)
            return []
        # A ledger id above the counter was not allocated by this store: never this store's to collect.
        local = {ledger_id for ledger_id in local if ledger_id <= int(counter.value)}
        known = set()
        for key in await self._metadata.list(LEDGERS_PREFIX):
            try:
                known.add(int(key.removeprefix(LEDGERS_PREFIX)))
            except ValueError:
                continue
        now = self._clock()
        absent = local - known
        for ledger_id in [lid for lid in self._absent_since if lid not in absent]:
            del self._absent_since[ledger_id]
        deleted = []
        for ledger_id in sorted(absent):
            since = self._absent_since.setdefault(ledger_id, now)
            if since == now or now - since < self.grace:
                continue  # first seen absent now, or not for long enough
            await self._ledgers.delete_ledger(ledger_id)
            del self._absent_since[ledger_id]
            deleted.append(ledger_id)
        if deleted:
            self.collected += len(deleted)
            log.info("ledger garbage collection deleted %d ledgers whose metadata is gone: %s", len(deleted),
                     deleted[:20])
        return deleted
