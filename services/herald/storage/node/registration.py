"""A storage node's registration in the metadata store (storage.membership): /storage/nodes/<address>
on a lease of registration_ttl seconds, renewed every third of it with the data disk's free bytes
and the drain mark, so that brokers add it to their ensembles without a restart and forget it when
it stops renewing. A lease that expired anyway (a metadata outage longer than the ttl) is replaced
by a new registration at the next renewal.
"""

from __future__ import annotations

import asyncio
import logging
import shutil

from herald.common.errors import BadVersionError, HeraldError
from herald.common.tasks import cancel_and_wait, wait_event
from herald.metadata.store import LeaseExpiredError, MetadataStore
from herald.storage.membership import StorageNodeRecord, draining_key, node_key

log = logging.getLogger(__name__)


class NodeRegistration:
    """Keeps /storage/nodes/<address> alive while the node runs; `stop` removes it at once."""

    def __init__(self, store: MetadataStore, address: str, data_dir: str, ttl: float) -> None:
        self.store = store
        self.address = address
        self.data_dir = data_dir
        self.ttl = ttl
        self.lease_id = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Register now (a failure raises: the node must not claim to serve unregistered), then renew."""
        self._stop.clear()
        await self._register()
        self._task = asyncio.create_task(self._renew_forever(), name="storage-registration")

    async def stop(self) -> None:
        """Stop renewing and revoke the lease (the record goes now, not after the ttl). Idempotent."""
        self._stop.set()
        await cancel_and_wait(self._task)
        self._task = None
        if self.lease_id:
            lease_id, self.lease_id = self.lease_id, 0
            try:
                await self.store.revoke_lease(lease_id)
            except HeraldError as exc:  # the record expires with the lease anyway
                log.warning("storage node %s: revoking its registration failed: %s", self.address, exc)

    async def _record(self) -> StorageNodeRecord:
        free = (await asyncio.to_thread(shutil.disk_usage, self.data_dir)).free
        draining = await self.store.get(draining_key(self.address)) is not None
        return StorageNodeRecord(self.address, free, "draining" if draining else "available")

    async def _register(self) -> None:
        self.lease_id = await self.store.grant_lease(self.ttl)
        record = await self._record()
        await self.store.put(node_key(self.address), record.to_bytes(), lease_id=self.lease_id)
        log.info("storage node %s registered (%s, %d bytes free)", self.address, record.state, record.free_bytes)

    async def _renew_forever(self) -> None:
        while not await wait_event(self._stop, self.ttl / 3):
            try:
                await self._renew()
            except HeraldError as exc:
                log.warning("storage node %s: renewing its registration failed (retrying): %s", self.address, exc)

    async def _renew(self) -> None:
        if not self.lease_id or not await self.store.keepalive(self.lease_id):
            log.warning("storage node %s: its registration lease expired; registering again", self.address)
            await self._register()
            return
        record = await self._record()
        current = await self.store.get(node_key(self.address))
        try:
            await self.store.put(node_key(self.address), record.to_bytes(), lease_id=self.lease_id,
                                 expected_version=current.version if current is not None else 0)
        except BadVersionError:
            pass  # a drain changed it meanwhile: the next renewal writes the new state
        except LeaseExpiredError:
            await self._register()
