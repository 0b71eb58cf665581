"""`herald standalone`: lookup, broker, storage, proxy and dlq-worker in one process and one event
loop, on loopback ports, with the embedded metadata store: a whole Herald with no other server
installed. Their metrics share one registry, served with /healthz and /readyz at one HTTP endpoint:
ready once all of them started, while every one of them is ready."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from herald.broker.server import BrokerServer
from herald.broker.settings import BrokerSettings
from herald.common.config import load_settings
from herald.common.errors import InvalidArgumentError
from herald.common.http.endpoint import HttpEndpoint
from herald.common.security.settings import MetricsEndpointSettings
from herald.common.security.tokens import create_token, read_key_file, unverified_subject
from herald.common.transport.health import ServiceHealth
from herald.dlq.settings import DlqWorkerSettings
from herald.dlq.worker import DlqWorker
from herald.lookup.server import LookupServer
from herald.lookup.settings import LookupSettings
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.proxy.server import ProxyServer
from herald.proxy.settings import ProxySettings
from herald.storage.client.local_node import serve_locally, stop_serving_locally
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings

log = logging.getLogger(__name__)


@dataclass
class StandaloneSettings(MetricsEndpointSettings):
    data_dir: str = "data"
    host: str = "127.0.0.1"
    # Herald's gRPC ports are 666x so that Pulsar's own ports stay free for Pulsar's clients and tools:
    # an application written against Apache Pulsar's standalone runs unchanged (docs/pulsar.md).
    port: int = 6660  # the service URL Herald's clients use (lookup)
    broker_port: int = 6661
    proxy_port: int = 6662  # -1: no proxy
    proxy_pulsar_port: int = -1  # Pulsar's binary protocol on the proxy too; -1: not served
    storage_port: int = 3181
    # Pulsar's binary protocol on the broker (pulsar://, pulsar+ssl:// with the TLS certificate), for the
    # official Pulsar clients, on Pulsar's standalone ports; -1: not served.
    pulsar_port: int = 6650
    pulsar_tls_port: int = -1
    # /metrics, /healthz and /readyz of every service in the process; -1: none. A bearer token and
    # TLS on it: MetricsEndpointSettings. metrics_topic_level false: the broker's metrics carry no
    # topic or subscription labels (as HERALD_BROKER_METRICS_TOPIC_LEVEL=false does).
    metrics_port: int = 9180
    metrics_topic_level: bool = True
    # Pulsar's admin REST API and HTTP lookup (the broker's web_port), on Pulsar's standalone port;
    # -1: none.
    web_port: int = 8080
    dlq_worker: bool = True  # move dead letters to their dead-letter topics
    entry_cache_max_bytes: int = 64 * 1024 * 1024
    # The broker hands its adds to (and reads from) the storage node of this process directly rather
    # than through gRPC to itself (storage/client/local_node.py); false: through gRPC, as in a cluster.
    local_storage: bool = True
    # Security for every service at once (docs/security.md): TLS on every port with this certificate
    # (the services trust tls_ca_file between themselves), token authentication with the secret or
    # public key, authorization with super-user roles. The services call each other with the token
    # in internal_token_file; with a secret key and none given, one is made for role "standalone"
    # (<data_dir>/internal.token).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_ca_file: str = ""
    tls_require_client_cert: bool = False
    tls_client_auth: bool = False
    authentication_enabled: bool = False
    token_secret_key_file: str = ""
    token_public_key_file: str = ""
    internal_token_file: str = ""
    authorization_enabled: bool = False
    superuser_roles: list[str] = field(default_factory=list)


class Standalone:
    def __init__(self, settings: StandaloneSettings) -> None:
        self.settings = settings
        data = Path(settings.data_dir)
        data.mkdir(parents=True, exist_ok=True)
        self.registry = CollectorRegistry()
        self.http = HttpEndpoint(self.registry, settings.host, settings.metrics_port, access=settings) \
            if settings.metrics_port >= 0 else None
        # Not ready until every service started (the broker, proxy and worker are made in start()).
        self.health = ServiceHealth("standalone")
        self.store = EmbeddedMetadataStore(str(data / "metadata.db"))
        self.security = standalone_security(settings)
        # Every service's metrics go to the one registry this process serves (metrics_port=-1: none of its own).
        # HERALD_STORAGE_* and HERALD_LOOKUP_* variables tune them (limits, intervals).
        self.storage = StorageServer(
            load_settings(StorageSettings, "storage", overrides=dict(
                data_dir=str(data / "storage"), host=settings.host, port=settings.storage_port, metrics_port=-1,
                **self.security)),
            registry=self.registry,
        )
        self.lookup = LookupServer(
            load_settings(LookupSettings, "lookup", overrides=dict(
                metadata_url="embedded", host=settings.host, port=settings.port, cluster="standalone",
                metrics_port=-1, **self.security)),
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
    def scheme(self) -> str:
        return "herald+ssl" if self.settings.tls_cert_file else "herald"

    @property
    def service_url(self) -> str:
        return f"{self.scheme}://{self.lookup.address}"

    async def start(self) -> None:
        if self.http is not None:
            self.http.start()
        await self.store.start()
        await self.storage.start()
        if self.settings.local_storage:
            serve_locally(self.storage.address, self.storage.local_access())
        await self.lookup.start()
        # HERALD_BROKER_* (and _PROXY_, _DLQ_WORKER_) variables tune the rest (check intervals, limits).
        broker_settings = load_settings(BrokerSettings, "broker", overrides=dict(
            host=self.settings.host, port=self.settings.broker_port, cluster="standalone",
            broker_id="standalone", lookup_address=self.lookup.address,
            pulsar_port=self.settings.pulsar_port, pulsar_tls_port=self.settings.pulsar_tls_port,
            storage_nodes=[self.storage.address], entry_cache_max_bytes=self.settings.entry_cache_max_bytes,
            # One storage node: every ledger is 1/1/1 (a cluster's brokers default to 3/2/2).
            ensemble_size=1, write_quorum=1, ack_quorum=1, metrics_port=-1, web_port=self.settings.web_port,
            **self.security,
            # Only ever turned off here: on, the broker's own setting (its HERALD_BROKER_ variable) decides.
            metrics_topic_level=None if self.settings.metrics_topic_level else False,
        ))
        self.broker = BrokerServer(broker_settings, self.store, registry=self.registry)
        self._watch(self.broker.health)
        await self.broker.start()
        if self.settings.proxy_port >= 0:
            proxy_settings = load_settings(ProxySettings, "proxy", overrides=dict(
                host=self.settings.host, port=self.settings.proxy_port, lookup_address=self.lookup.address,
                pulsar_port=self.settings.proxy_pulsar_port, metrics_port=-1, **self.security))
            self.proxy = ProxyServer(proxy_settings, registry=self.registry)
            self._watch(self.proxy.health)
            await self.proxy.start()
        if self.settings.dlq_worker:
            # The worker is a client of the others: it trusts their CA and, as the services do when
            # they dial each other, presents the standalone's certificate (which
            # tls_require_client_cert asks of every client).
            mutual = bool(self.settings.tls_cert_file and self.settings.tls_ca_file)
            dlq_settings = load_settings(DlqWorkerSettings, "dlq-worker", overrides=dict(
                service_url=self.service_url, metrics_port=-1, worker_name="standalone",
                auth_token_file=self.security.get("auth_token_file", ""),
                tls_trust_certs_file=self.settings.tls_ca_file,
                tls_cert_file=self.settings.tls_cert_file if mutual else None,
                tls_key_file=self.settings.tls_key_file if mutual else None))
            self.dlq = DlqWorker(dlq_settings, registry=self.registry)
            self._watch(self.dlq.health)
            await self.dlq.start()
        await self.health.start()

    def endpoints(self) -> dict[str, str]:
        return {
            "service URL": self.service_url,
            "lookup": self.lookup.address,
            "broker": self.broker.address if self.broker else "-",
            "pulsar": ", ".join(url for url in (self.broker.urls.pulsar, self.broker.urls.pulsar_tls) if url) or "-"
            if self.broker else "-",
            "proxy": f"{self.scheme}://{self.proxy.address}" if self.proxy else "-",
            "proxy pulsar": self.proxy.pulsar.url if self.proxy and self.proxy.pulsar else "-",
            "storage": self.storage.address,
            "dlq-worker": "running" if self.dlq else "-",
            "metrics": f"{self.http.url}/metrics" if self.http else "-",
            "web (REST)": self.broker.web_url if self.broker and self.broker.web else "-",
            "health": f"{self.http.url}/healthz, /readyz" if self.http else "-",
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
        stop_serving_locally(self.storage.address)
        await self.storage.stop()
        await self.store.close()
        if self.http is not None:
            self.http.stop()


INTERNAL_ROLE = "standalone"


def standalone_security(settings: StandaloneSettings) -> dict[str, Any]:
    """The security settings every service of the standalone gets (none when all is off)."""
    given = {name: getattr(settings, name) for name in (
        "tls_cert_file", "tls_key_file", "tls_ca_file", "tls_require_client_cert", "tls_client_auth",
        "authentication_enabled", "token_secret_key_file", "token_public_key_file", "authorization_enabled",
        "superuser_roles") if getattr(settings, name)}
    if not settings.authentication_enabled:
        if settings.authorization_enabled:
            raise InvalidArgumentError("authorization needs authentication: add --authentication and a token key")
        return given
    token_file = settings.internal_token_file
    if token_file:
        role = unverified_subject(read_key_file(token_file, "internal_token_file").decode())
    elif settings.token_secret_key_file:
        role = INTERNAL_ROLE
        token = create_token(role, secret_key=read_key_file(settings.token_secret_key_file, "token_secret_key_file"))
        path = Path(settings.data_dir) / "internal.token"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token + "\n")
        token_file = str(path)
    else:
        raise InvalidArgumentError(
            "standalone with authentication needs a token for its services to call each other: give "
            "--token-secret-key-file (one is made), or --internal-token-file with --token-public-key-file")
    # The services' own role: they register with lookup, use storage, forward for clients, move dead letters.
    return {**given, "auth_token_file": token_file, "broker_roles": [role], "proxy_roles": [role],
            "dlq_worker_roles": [role]}
