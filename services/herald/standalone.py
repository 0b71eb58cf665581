"""`herald standalone`: lookup, broker, storage, proxy and dlq-worker in one process and one event
loop, on loopback ports, with the embedded metadata store: a whole Herald with no other server
installed. Their metrics share one registry, served with /healthz and /readyz at one HTTP endpoint:
ready once all of them started, while every one of them is ready."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from herald.broker.server import BrokerServer
from herald.broker.settings import BrokerSettings
from herald.common.config import load_settings
from herald.common.health import ServiceHealth
from herald.common.http_endpoint import HttpEndpoint
from herald.dlq.settings import DlqWorkerSettings
from herald.dlq.worker import DlqWorker
from herald.lookup.server import LookupServer
from herald.lookup.settings import LookupSettings
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.proxy.server import ProxyServer
from herald.proxy.settings import ProxySettings
from herald.storage.server import StorageServer
from herald.storage.settings import StorageSettings

log = logging.getLogger(__name__)


@dataclass
class StandaloneSettings:
    data_dir: str = "data"
    host: str = "127.0.0.1"
    port: int = 6650  # the service URL clients use (lookup)
    broker_port: int = 6651
    proxy_port: int = 6652  # -1: no proxy
    storage_port: int = 3181
    metrics_port: int = 9180  # /metrics, /healthz and /readyz of every service in the process; -1: none
    dlq_worker: bool = True  # move dead letters to their dead-letter topics
    entry_cache_max_bytes: int = 64 * 1024 * 1024


class Standalone:
    def __init__(self, settings: StandaloneSettings) -> None:
        self.settings = settings
        data = Path(settings.data_dir)
        data.mkdir(parents=True, exist_ok=True)
        self.registry = CollectorRegistry()
        self.http = HttpEndpoint(self.registry, settings.host, settings.metrics_port) \
            if settings.metrics_port >= 0 else None
        # Not ready until every service started (the broker, proxy and worker are made in start()).
        self.health = ServiceHealth("standalone")
        self.store = EmbeddedMetadataStore(str(data / "metadata.db"))
        # Every service's metrics go to the one registry this process serves (metrics_port=-1: none of its own).
        self.storage = StorageServer(
            StorageSettings(data_dir=str(data / "storage"), host=settings.host, port=settings.storage_port,
                            metrics_port=-1),
            registry=self.registry,
        )
        self.lookup = LookupServer(
            LookupSettings(metadata_url="embedded", host=settings.host, port=settings.port, cluster="standalone",
                           metrics_port=-1),
            self.store, registry=self.registry,
        )
        self.broker: BrokerServer | None = None
        self.proxy: ProxyServer | None = None
        self.dlq: DlqWorker | None = None
        self._watch(self.health, self.storage.health, self.lookup.health)

    def _watch(self, *health: ServiceHealth) -> None:
        for service in health:
            if self.http is not None:
                self.http.watch(service)

    @property
    def service_url(self) -> str:
        return f"herald://{self.lookup.address}"

    async def start(self) -> None:
        if self.http is not None:
            self.http.start()
        await self.store.start()
        await self.storage.start()
        await self.lookup.start()
        # HERALD_BROKER_* (and _PROXY_, _DLQ_WORKER_) variables tune the rest (check intervals, limits).
        broker_settings = load_settings(BrokerSettings, "broker", overrides=dict(
            host=self.settings.host, port=self.settings.broker_port, cluster="standalone",
            broker_id="standalone", lookup_address=self.lookup.address,
            storage_nodes=[self.storage.address], entry_cache_max_bytes=self.settings.entry_cache_max_bytes,
            # One storage node: every ledger is 1/1/1 (a cluster's brokers default to 3/2/2).
            ensemble_size=1, write_quorum=1, ack_quorum=1, metrics_port=-1,
        ))
        self.broker = BrokerServer(broker_settings, self.store, registry=self.registry)
        self._watch(self.broker.health)
        await self.broker.start()
        if self.settings.proxy_port >= 0:
            proxy_settings = load_settings(ProxySettings, "proxy", overrides=dict(
                host=self.settings.host, port=self.settings.proxy_port, lookup_address=self.lookup.address,
                metrics_port=-1))
            self.proxy = ProxyServer(proxy_settings, registry=self.registry)
            self._watch(self.proxy.health)
            await self.proxy.start()
        if self.settings.dlq_worker:
            dlq_settings = load_settings(DlqWorkerSettings, "dlq-worker", overrides=dict(
                service_url=self.service_url, metrics_port=-1, worker_name="standalone"))
            self.dlq = DlqWorker(dlq_settings, registry=self.registry)
            self._watch(self.dlq.health)
            await self.dlq.start()
        await self.health.start()

    def endpoints(self) -> dict[str, str]:
        return {
            "service URL": self.service_url,
            "lookup": self.lookup.address,
            "broker": self.broker.address if self.broker else "-",
            "proxy": f"herald://{self.proxy.address}" if self.proxy else "-",
            "storage": self.storage.address,
            "dlq-worker": "running" if self.dlq else "-",
            "metrics": f"http://{self.http.address}/metrics" if self.http else "-",
            "health": f"http://{self.http.address}/healthz, /readyz" if self.http else "-",
            "metadata": f"sqlite://{Path(self.settings.data_dir).resolve() / 'metadata.db'}",
        }

    async def stop(self) -> None:
        await self.health.stop()
        # Clients of the proxy and the worker's moves go first, while the broker still answers.
        if self.dlq is not None:
            await self.dlq.stop()
            self.dlq = None
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None
        await self.lookup.stop()
        await self.storage.stop()
        await self.store.close()
        if self.http is not None:
            self.http.stop()
