"""The service commands: `herald standalone`, `lookup`, `broker`, `storage`, `proxy`, `dlq-worker`,
`operator` and `local-cluster`: each one's flags, and how it runs (settings from defaults < --config
file < HERALD_* variables < flags, then serve until SIGINT or SIGTERM)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from herald.broker.settings import BrokerSettings
from herald.cli import vocabulary
from herald.cli.client_options import CLIENT_SECURITY_FLAGS, client_security_flags
from herald.cli.service_flags import (
    METRICS_ENDPOINT_FLAGS,
    STANDALONE_SECURITY_FLAGS,
    metrics_endpoint_flags,
    metrics_flags,
    service_security_flags,
    settings_flags,
    settings_overrides,
    standalone_security_flags,
)
from herald.common.config import describe, load_settings
from herald.dlq.settings import DlqWorkerSettings
from herald.lookup.settings import LookupSettings
from herald.proxy.settings import ProxySettings
from herald.storage.node.settings import StorageSettings

if TYPE_CHECKING:  # imported when a service starts: `herald --help` and shell completion stay quick
    from herald.metadata import MetadataStore

log = logging.getLogger("herald")


class Service(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


async def _serve(make: Callable[[], Awaitable[Service]], announce: Callable[[Any], None]) -> None:
    """Start a service, announce it, and stop it cleanly on SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    service = await make()
    await service.start()
    try:
        announce(service)
        await stop.wait()
        print("stopping…", flush=True)
    finally:
        await service.stop()


def _flags(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def cmd_standalone(args: argparse.Namespace) -> None:
    from herald.standalone import Standalone, StandaloneSettings

    settings = load_settings(
        StandaloneSettings, "standalone", config_file=args.config,
        overrides=_flags(args, "data_dir", "host", "port", "broker_port", "storage_port", "proxy_port",
                         "proxy_pulsar_port", "pulsar_port", "pulsar_tls_port", "metrics_port", "metrics_topic_level",
                         "dlq_worker", "web_port", *STANDALONE_SECURITY_FLAGS,
                         *METRICS_ENDPOINT_FLAGS),
    )

    async def make() -> Standalone:
        return Standalone(settings)

    def announce(service: Standalone) -> None:
        print("herald standalone is running", flush=True)
        for name, endpoint in service.endpoints().items():
            print(f"  {name:12} {endpoint}", flush=True)
        print("press Ctrl-C to stop", flush=True)

    asyncio.run(_serve(make, announce))


class _OnMetadataStore:
    """A service that runs on a metadata store this process opens for it (lookup, broker)."""

    def __init__(self, metadata_url: str, build: Callable[[MetadataStore], Service]) -> None:
        self.metadata_url = metadata_url
        self.build = build
        self.server: Any = None

    async def start(self) -> None:
        from herald.metadata import open_store

        self.store = open_store(self.metadata_url)
        await self.store.start()
        self.server = self.build(self.store)
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        await self.store.close()


def _announce_metrics(service: str, endpoint: Any) -> None:
    if endpoint is not None:
        print(f"{service} metrics on {endpoint.url}/metrics", flush=True)


def cmd_lookup(args: argparse.Namespace) -> None:
    from herald.lookup.server import LookupServer

    settings = load_settings(LookupSettings, "lookup", config_file=args.config,
                             overrides=settings_overrides(args, LookupSettings))
    log.info("lookup settings:\n%s", describe(settings))

    async def make() -> _OnMetadataStore:
        return _OnMetadataStore(settings.metadata_url, lambda store: LookupServer(settings, store))

    def announce(service: _OnMetadataStore) -> None:
        print(f"lookup listening on {service.server.address}", flush=True)
        _announce_metrics("lookup", service.server.http_endpoint)

    asyncio.run(_serve(make, announce))


def cmd_broker(args: argparse.Namespace) -> None:
    from herald.broker.server import BrokerServer

    settings = load_settings(
        BrokerSettings, "broker", config_file=args.config,
        overrides=settings_overrides(args, BrokerSettings),
    )
    log.info("broker settings:\n%s", describe(settings))

    async def make() -> _OnMetadataStore:
        return _OnMetadataStore(settings.metadata_url, lambda store: BrokerServer(settings, store))

    def announce(service: _OnMetadataStore) -> None:
        print(f"broker listening on {service.server.address}", flush=True)
        _announce_metrics("broker", service.server.http_endpoint)

    asyncio.run(_serve(make, announce))


def cmd_storage(args: argparse.Namespace) -> None:
    from herald.cli.storage_process import StorageProcess

    settings = load_settings(StorageSettings, "storage", config_file=args.config,
                             overrides=settings_overrides(args, StorageSettings))
    log.info("storage settings:\n%s", describe(settings))

    async def make() -> StorageProcess:
        return StorageProcess(settings)

    def announce(server: StorageProcess) -> None:
        print(f"storage listening on {server.address}", flush=True)
        _announce_metrics("storage", server.http_endpoint)

    asyncio.run(_serve(make, announce))


def cmd_proxy(args: argparse.Namespace) -> None:
    from herald.proxy.server import ProxyServer

    settings = load_settings(
        ProxySettings, "proxy", config_file=args.config,
        overrides=settings_overrides(args, ProxySettings),
    )
    log.info("proxy settings:\n%s", describe(settings))

    async def make() -> ProxyServer:
        return ProxyServer(settings)

    def announce(proxy: ProxyServer) -> None:
        if proxy.http_endpoint is not None:
            print(f"proxy metrics on {proxy.http_endpoint.url}/metrics (health: /healthz, /readyz)",
                  flush=True)
        if proxy.pulsar is not None:
            print(f"proxy serves the Pulsar protocol on {proxy.pulsar.url}", flush=True)
        print(f"proxy listening on {proxy.address} (lookup {settings.lookup_address})", flush=True)

    asyncio.run(_serve(make, announce))


def cmd_dlq_worker(args: argparse.Namespace) -> None:
    from herald.dlq.settings import load_settings as load_dlq_settings
    from herald.dlq.worker import DlqWorker

    settings = load_dlq_settings(args.config, settings_overrides(args, DlqWorkerSettings, *CLIENT_SECURITY_FLAGS))
    log.info("dlq-worker settings:\n%s", describe(settings))

    async def make() -> DlqWorker:
        return DlqWorker(settings)

    def announce(worker: DlqWorker) -> None:
        print(f"dlq-worker {settings.worker_name} is running against {settings.service_url}", flush=True)
        if worker.metrics_url is not None:
            print(f"  metrics on {worker.metrics_url}/metrics", flush=True)

    asyncio.run(_serve(make, announce))


def operator_settings(args: argparse.Namespace) -> Any:
    """The operator's settings (herald_operator.settings.OperatorSettings) with `args`' flags over them."""
    try:  # the operator's extra: pip install 'herald[operator]'
        from herald_operator.settings import load_settings as load_operator_settings
    except ImportError as exc:
        raise SystemExit(f"error: the operator needs kopf and herald_operator ({exc}): "
                         "pip install 'herald[operator]'") from None

    overrides = _flags(args, "admin_url", "resync_interval", "retry_delay", "admin_timeout", "health_host",
                       "health_port", "metrics_host", "metrics_port", "peering_name", *CLIENT_SECURITY_FLAGS)
    if args.namespace:
        overrides["namespaces"] = args.namespace
    return load_operator_settings(args.config, overrides)


def cmd_operator(args: argparse.Namespace) -> None:
    settings = operator_settings(args)
    from herald_operator.runner import run

    asyncio.run(run(settings, standalone=args.standalone))


def cmd_local_cluster(args: argparse.Namespace) -> None:
    from herald.local_cluster import ClusterSettings, LocalCluster

    settings = load_settings(
        ClusterSettings, "local-cluster", config_file=args.config,
        overrides=_flags(args, "base_dir", "brokers", "storage_nodes", "ensemble_size", "write_quorum",
                         "ack_quorum", "heartbeat_interval", "proxies", "metadata", "etcd_members",
                         "max_restarts_per_minute", "cluster_name", "dlq_worker"),
    )
    cluster = LocalCluster(settings)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    cluster.start()
    try:
        print("herald local cluster is running", flush=True)
        for name, where in cluster.describe():
            print(f"  {name:12} {where}", flush=True)
        print("press Ctrl-C to stop", flush=True)
        cluster.supervise(stop)  # restarts a child that dies; raises past max_restarts_per_minute
        print("stopping…", flush=True)
    finally:
        cluster.stop()


def add_service_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the service commands to the `herald` command's subparsers."""

    def pulsar_flags(sub: argparse.ArgumentParser, default: str) -> None:
        sub.add_argument("--pulsar-port", type=int,
                         help=f"port of Pulsar's binary protocol, for the official Pulsar clients "
                              f"(pulsar://; {default}; 0 = any free port)")
        sub.add_argument("--pulsar-tls-port", type=int,
                         help="port of Pulsar's protocol over TLS (pulsar+ssl://; needs the TLS certificate; -1: none)")

    def service(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--config", help=f"TOML file with a [{name}] table of settings")
        sub.add_argument("--host", help="address to bind (default 127.0.0.1)")
        sub.add_argument("--port", type=int, help="port to listen on (0 = any free port)")
        return sub

    sub = service("standalone", "run lookup, broker, storage, proxy and dlq-worker in one process with an "
                                "embedded metadata store")
    sub.add_argument("--data-dir", help="where to keep data (default ./data)")
    sub.add_argument("--broker-port", type=int, help="broker port (default 6661)")
    sub.add_argument("--storage-port", type=int, help="storage port (default 3181)")
    sub.add_argument("--proxy-port", type=int, help="proxy port (default 6662; -1: no proxy)")
    sub.add_argument("--proxy-pulsar-port", type=int, help="the proxy's pulsar:// port (-1: none, the default; "
                                                           "0 = any free port)")
    pulsar_flags(sub, "default 6650, Pulsar's; -1: not served")
    sub.add_argument("--metrics-port", type=int, help="/metrics port of every service (default 9180; -1: none)")
    sub.add_argument("--web-port", type=int,
                     help="Pulsar admin REST API and HTTP lookup port (default 8080, Pulsar's; -1: none; "
                          "0 = any free port)")
    metrics_endpoint_flags(sub, "standalone")
    sub.add_argument("--no-metrics-topic-level", dest="metrics_topic_level", action="store_const", const=False,
                     default=None, help="no topic or subscription labels on the broker's metrics: broker-wide sums")
    sub.add_argument("--no-dlq-worker", dest="dlq_worker", action="store_const", const=False, default=None,
                     help="do not move dead letters to their dead-letter topics")
    standalone_security_flags(sub)
    sub.set_defaults(func=cmd_standalone)

    sub = service("lookup", "run the lookup (discovery) service")
    sub.add_argument("--metadata-url", help="etcd://host:port[,host:port...] (production), redis://host:port/db "
                     "(development) or sqlite:///path (env HERALD_LOOKUP_METADATA_URL)")
    sub.add_argument("--heartbeat-interval", type=float, help="seconds between broker heartbeats")
    metrics_flags(sub, 9101, "lookup")
    service_security_flags(sub, "lookup")
    settings_flags(sub, LookupSettings, "lookup")
    sub.set_defaults(func=cmd_lookup)

    sub = service("broker", "run a broker")
    sub.add_argument("--metadata-url", help="etcd://host:port[,host:port...] (production) or redis://host:port/db "
                     "(development) (env HERALD_BROKER_METADATA_URL)")
    sub.add_argument("--broker-id", help="stable broker name (default: host:port)")
    sub.add_argument("--advertised-address", help="host:port clients use to reach this broker")
    sub.add_argument("--lookup-address", help="host:port of the lookup service")
    sub.add_argument("--storage-nodes", help="comma-separated host:port of storage nodes")
    pulsar_flags(sub, "-1: not served")
    sub.add_argument("--pulsar-advertised-host", help="host the pulsar:// URLs name (default: the advertised "
                                                      "address's host, else --host)")
    metrics_flags(sub, 9102, "broker")
    sub.add_argument("--web-port", type=int,
                     help="Pulsar admin REST API and HTTP lookup port (default -1: none; 0 = any free port)")
    sub.add_argument("--no-metrics-topic-level", dest="metrics_topic_level", action="store_const", const=False,
                     default=None, help="no topic or subscription labels on metrics: broker-wide sums only")
    service_security_flags(sub, "broker")
    settings_flags(sub, BrokerSettings, "broker")
    sub.set_defaults(func=cmd_broker)

    sub = service("storage", "run a storage node")
    sub.add_argument("--data-dir", help="journal and ledger directory")
    sub.add_argument("--max-data-bytes", type=int,
                     help="refuse adds once the data directory holds this many bytes (default 0: no cap)")
    sub.add_argument("--min-free-bytes", type=int,
                     help="refuse adds while the file system has less free (default 64 MiB)")
    sub.add_argument("--fault-fsync-delay-ms", type=int,
                     help="fault injection for tests: sleep this long before each journal fsync (default 0)")
    sub.add_argument("--metadata-url", help="metadata store URL to register in, so brokers find this node "
                                            "(default: none, brokers use their --storage-nodes)")
    sub.add_argument("--advertised-address", help="host:port brokers dial (default: host:port as bound)")
    sub.add_argument("--registration-ttl", type=float, help="seconds a registration outlives the node's last "
                                                            "renewal (default 10)")
    sub.add_argument("--autorecovery-interval", type=float, help="seconds between autorecovery audits (default "
                                                                 "30; 0: off)")
    sub.add_argument("--autorecovery-grace", type=float, help="seconds a node stays unregistered before its "
                                                              "entries are re-replicated (default 60)")
    sub.add_argument("--gc-interval", type=float, help="seconds between ledger garbage collections (default 300; "
                                                       "0: off)")
    sub.add_argument("--gc-grace", type=float, help="seconds a ledger's metadata stays gone before the node deletes "
                                                    "it (default 600)")
    metrics_flags(sub, 9103, "storage")
    service_security_flags(sub, "storage")
    settings_flags(sub, StorageSettings, "storage")
    sub.set_defaults(func=cmd_storage)

    sub = service("proxy", "run a proxy: the one address clients need, forwarding to the brokers that own topics")
    sub.add_argument("--lookup-address", help="host:port of the lookup service (env HERALD_PROXY_LOOKUP_ADDRESS)")
    sub.add_argument("--advertised-address", help="host:port clients are told to dial (default: host:port)")
    sub.add_argument("--max-connections", type=int, help="client connections allowed (default 0 = no limit)")
    sub.add_argument("--pulsar-port", type=int, help="port of Pulsar's binary protocol, for the official Pulsar "
                                                     "clients (pulsar://; -1: not served, the default; 0: any free)")
    sub.add_argument("--drain-timeout", type=float, help="seconds streams get to finish on SIGTERM (default 20)")
    sub.add_argument("--metrics-host", help="address /metrics binds (default 127.0.0.1)")
    sub.add_argument("--metrics-port", type=int, help="/metrics port (default 9104; 0 = any free port, -1 = none)")
    metrics_endpoint_flags(sub, "proxy")
    service_security_flags(sub, "proxy")
    settings_flags(sub, ProxySettings, "proxy")
    sub.set_defaults(func=cmd_proxy)

    help_text = "run a dlq-worker: move dead letters of every broker to their dead-letter topics"
    sub = commands.add_parser("dlq-worker", help=help_text, description=help_text)
    sub.add_argument("--config", help="TOML file with a [dlq-worker] table of settings")
    url = sub.add_argument("--url", dest="service_url",
                           help="herald://host:port of lookup (env HERALD_DLQ_WORKER_SERVICE_URL)")
    vocabulary.deprecated_alias(sub, "--service-url", url)
    sub.add_argument("--worker-name", help="the name in logs (default: host name and process id)")
    sub.add_argument("--metrics-host", help="address /metrics binds (default 127.0.0.1)")
    sub.add_argument("--metrics-port", type=int, help="/metrics port (default 9105; 0 = any free port, -1 = none)")
    metrics_endpoint_flags(sub, "dlq-worker")
    sub.add_argument("--flow-permits", type=int, help="letters in flight per broker (default 100)")
    sub.add_argument("--broker-refresh-interval", type=float, help="seconds between broker list refreshes")
    client_security_flags(sub, defaults="settings", env_prefix="HERALD_DLQ_WORKER_")
    settings_flags(sub, DlqWorkerSettings, "dlq-worker")
    sub.set_defaults(func=cmd_dlq_worker)

    help_text = "run the Kubernetes operator: reconcile Topic and Subscription resources (herald.io/v1alpha1)"
    sub = commands.add_parser("operator", help=help_text, description=help_text)
    sub.add_argument("--config", help="TOML file with an [operator] table of settings")
    url = sub.add_argument("--url", dest="admin_url",
                           help="the admin API: herald://lookup:port or a broker's host:port "
                                "(env HERALD_ADMIN_URL or HERALD_OPERATOR_ADMIN_URL)")
    vocabulary.deprecated_alias(sub, "--admin-url", url)
    sub.add_argument("-n", "--namespace", action="append", default=[],
                     help="a Kubernetes namespace to watch (repeat for more; default: all namespaces)")
    sub.add_argument("--resync-interval", type=float, help="seconds between reconciliations of each resource "
                                                           "(default 30): drift is reverted then")
    sub.add_argument("--retry-delay", type=float, help="seconds before retrying after a temporary error (default 10)")
    sub.add_argument("--admin-timeout", type=float, help="deadline of each admin call (default 10)")
    client_security_flags(sub, defaults="settings", env_prefix="HERALD_OPERATOR_")
    sub.add_argument("--standalone", action="store_true",
                     help="no peering: do not coordinate with other operator replicas")
    sub.add_argument("--peering-name", help="the kopf peering object replicas share to elect the active one "
                                            "(default: kopf's detection of one named 'default')")
    sub.add_argument("--health-host", help="address of kopf's liveness endpoint /healthz (default 127.0.0.1)")
    sub.add_argument("--health-port", type=int, help="port of /healthz (default 8080; -1 = none)")
    sub.add_argument("--metrics-host", help="address /metrics binds (default 127.0.0.1)")
    sub.add_argument("--metrics-port", type=int, help="/metrics port (default 9108; 0 = any free port, -1 = none)")
    sub.set_defaults(func=cmd_operator)

    sub = commands.add_parser(
        "local-cluster", help="run redis, lookup, brokers and storage nodes as separate local processes",
        description="run redis, lookup, brokers and storage nodes as separate processes on loopback",
    )
    sub.add_argument("--config", help="TOML file with a [local-cluster] table of settings")
    sub.add_argument("--base-dir", help="where data and logs go (default ./local-cluster)")
    sub.add_argument("--brokers", type=int, help="number of brokers (default 2)")
    sub.add_argument("--storage-nodes", type=int, help="number of storage nodes (default 3)")
    sub.add_argument("--ensemble-size", type=int, help="E (default 3)")
    sub.add_argument("--write-quorum", type=int, help="Qw (default 2)")
    sub.add_argument("--ack-quorum", type=int, help="Qa (default 2)")
    sub.add_argument("--heartbeat-interval", type=float, help="broker heartbeat seconds (default 1)")
    sub.add_argument("--proxies", type=int, help="proxies in front of the brokers (default 0)")
    sub.add_argument("--metadata", choices=("redis", "etcd"),
                     help="metadata store: one redis-server (default) or an etcd cluster")
    sub.add_argument("--etcd-members", type=int, help="etcd members with --metadata etcd (default 3)")
    sub.add_argument("--max-restarts-per-minute", type=int,
                     help="a child that dies is restarted; past this many restarts in a minute the cluster stops "
                          "and the command exits non-zero (default 5)")
    sub.add_argument("--cluster-name", help="the cluster's name, given to every broker (default local)")
    sub.add_argument("--no-dlq-worker", dest="dlq_worker", action="store_const", const=False, default=None,
                     help="run no dlq-worker (by default one moves dead letters to their dead-letter topics)")
    sub.set_defaults(func=cmd_local_cluster)
