"""`herald standalone`: lookup, broker and storage in one process and one event loop, on loopback
ports, with the embedded metadata store: a whole Herald with no other server installed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from herald.broker.server import BrokerServer
from herald.broker.settings import BrokerSettings
from herald.common.config import load_settings
from herald.lookup.server import LookupServer
from herald.lookup.settings import LookupSettings
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.storage.server import StorageServer
from herald.storage.settings import StorageSettings

log = logging.getLogger(__name__)


@dataclass
class StandaloneSettings:
    data_dir: str = "data"
    host: str = "127.0.0.1"
    port: int = 6650  # the service URL clients use (lookup)
    broker_port: int = 6651
    storage_port: int = 3181
    entry_cache_max_bytes: int = 64 * 1024 * 1024


class Standalone:
    def __init__(self, settings: StandaloneSettings) -> None:
        self.settings = settings
        data = Path(settings.data_dir)
        data.mkdir(parents=True, exist_ok=True)
        self.store = EmbeddedMetadataStore(str(data / "metadata.db"))
        self.storage = StorageServer(
            StorageSettings(data_dir=str(data / "storage"), host=settings.host, port=settings.storage_port)
        )
        self.lookup = LookupServer(
            LookupSettings(metadata_url="embedded", host=settings.host, port=settings.port, cluster="standalone"),
            self.store,
        )
        self.broker: BrokerServer | None = None

    @property
    def service_url(self) -> str:
        return f"herald://{self.lookup.address}"

    async def start(self) -> None:
        await self.store.start()
        await self.storage.start()
        await self.lookup.start()
        # HERALD_BROKER_* variables tune the rest of the broker (check intervals, limits).
        broker_settings = load_settings(BrokerSettings, "broker", overrides=dict(
            host=self.settings.host, port=self.settings.broker_port, cluster="standalone",
            broker_id="standalone", lookup_address=self.lookup.address,
            storage_nodes=[self.storage.address], entry_cache_max_bytes=self.settings.entry_cache_max_bytes,
            # One storage node: every ledger is 1/1/1 (a cluster's brokers default to 3/2/2).
            ensemble_size=1, write_quorum=1, ack_quorum=1,
        ))
        self.broker = BrokerServer(broker_settings, self.store)
        await self.broker.start()

    def endpoints(self) -> dict[str, str]:
        return {
            "service URL": self.service_url,
            "lookup": self.lookup.address,
            "broker": self.broker.address if self.broker else "-",
            "storage": self.storage.address,
            "metadata": f"sqlite://{Path(self.settings.data_dir).resolve() / 'metadata.db'}",
        }

    async def stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None
        await self.lookup.stop()
        await self.storage.stop()
        await self.store.close()
