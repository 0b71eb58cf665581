"""The storage nodes registered in the metadata store (storage.membership), as the storage client
sees them: listed once at start, then followed by a watch on /storage/nodes/, so a node started
later is in the next ensemble chosen and a draining or gone one is in none. A watch that fails (the
store restarted, the watch fell behind) is replaced by a new listing and watch after a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from herald.common.errors import HeraldError
from herald.common.tasks import cancel_and_wait
from herald.metadata.store import MetadataStore, WatchEvent
from herald.storage.client.ledger_metadata import LedgerMetadata
from herald.storage.membership import STORAGE_NODES_PREFIX, StorageNodeRecord, registered_nodes

log = logging.getLogger(__name__)
_RETRY_SECONDS = 1.0


class NodeRegistry:
    """The registered nodes (`records`), kept current; `on_change` is called after every change."""

    def __init__(self, store: MetadataStore, on_change: Callable[[NodeRegistry], None]) -> None:
        self.store = store
        self.records: dict[str, StorageNodeRecord] = {}
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None

    def available(self) -> list[str]:
        """Registered nodes not draining, in address order."""
        return sorted(address for address, record in self.records.items() if record.state == "available")

    async def start(self) -> None:
        """List the registered nodes now (a failure raises), then follow changes in the background."""
        watch = self.store.watch(STORAGE_NODES_PREFIX)  # before the listing: no change falls between
        try:
            await self._relist()
        except BaseException:
            await _close(watch)
            raise
        self._task = asyncio.create_task(self._follow(watch), name="storage-node-registry")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _relist(self) -> None:
        self.records = await registered_nodes(self.store)
        self._on_change(self)

    async def _follow(self, watch: AsyncIterator[WatchEvent]) -> None:
        while True:
            try:
                async for event in watch:
                    self._apply(event)
            except HeraldError as exc:
                log.warning("watch of the registered storage nodes failed (listing again): %s", exc)
            finally:
                await _close(watch)
            await asyncio.sleep(_RETRY_SECONDS)
            try:
                watch = self.store.watch(STORAGE_NODES_PREFIX)
                await self._relist()
            except HeraldError as exc:
                log.warning("listing the registered storage nodes failed (retrying): %s", exc)

    def _apply(self, event: WatchEvent) -> None:
        address = event.key.removeprefix(STORAGE_NODES_PREFIX)
        before = self.records.get(address)
        if event.kind == "delete" or event.value is None:
            if self.records.pop(address, None) is not None:
                log.info("storage node %s is no longer registered", address)
        else:
            record = StorageNodeRecord.from_bytes(event.value)
            self.records[address] = record
            if before is None or before.state != record.state:
                log.info("storage node %s registered as %s", address, record.state)
        self._on_change(self)


async def _close(watch: AsyncIterator[WatchEvent]) -> None:
    aclose = getattr(watch, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


@dataclass
class StorageNodeUsage:
    """A storage node as an operator sees it: registered or not, and the ledgers it must keep."""

    address: str
    # "available", "draining", "gone" (named by ledgers, not registered while others are), or
    # "unregistered" (no node registers: the brokers' static list)
    state: str
    free_bytes: int
    ledgers: int
    registered: bool


async def storage_node_usage(store: MetadataStore) -> list[StorageNodeUsage]:
    """Every registered node and every node a ledger's ensemble history names, by address."""
    records = await registered_nodes(store)
    counts: dict[str, int] = {}
    for item in (await store.list("/ledgers/")).values():
        for address in LedgerMetadata.from_bytes(item.value).all_nodes():
            counts[address] = counts.get(address, 0) + 1
    usage = []
    for address in sorted(set(records) | set(counts)):
        record = records.get(address)
        absent = "gone" if records else "unregistered"
        usage.append(StorageNodeUsage(address, record.state if record else absent,
                                      record.free_bytes if record else 0, counts.get(address, 0), record is not None))
    return usage
