"""`herald storage`'s process: the storage node, and autorecovery beside it when the node registers
in a metadata store (herald.autorecovery: one storage process at a time is the elected auditor)."""

from __future__ import annotations

from herald.autorecovery.auditor import AutoRecovery
from herald.common.http.endpoint import HttpEndpoint
from herald.metadata.backends import open_store
from herald.storage.client.storage_client import StorageClient
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings


class StorageProcess:
    def __init__(self, settings: StorageSettings) -> None:
        self.settings = settings
        self.server = StorageServer(settings)
        self.autorecovery: AutoRecovery | None = None

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def http_endpoint(self) -> HttpEndpoint | None:
        return self.server.http_endpoint

    async def start(self) -> None:
        await self.server.start()
        settings = self.settings
        if not settings.metadata_url or settings.autorecovery_interval == 0:
            return
        store = open_store(settings.metadata_url)
        try:
            await store.start()
            self.autorecovery = AutoRecovery(
                StorageClient(store, [], dialer=self.server.security.dialer), interval=settings.autorecovery_interval,
                grace_seconds=settings.autorecovery_grace, lease_ttl=settings.registration_ttl,
                name=settings.advertised_address or self.server.address)
            await self.autorecovery.start()
        except BaseException:
            self.autorecovery = None
            await store.close()
            await self.server.stop()
            raise

    async def stop(self) -> None:
        autorecovery, self.autorecovery = self.autorecovery, None
        try:
            if autorecovery is not None:
                try:
                    await autorecovery.stop()
                finally:
                    await autorecovery.store.close()
        finally:
            await self.server.stop()
