"""`herald local-cluster`: a real multi-process Herald on loopback — redis-server (or etcd members), lookup,
brokers, storage nodes, a dlq-worker and optional proxies, each its own process with its log in one folder.
The chaos tests drive the same code (kill, pause, resume, restart any process)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from herald.common.errors import InvalidArgumentError, ServiceNotReadyError

# Re-exported: tests and tools build their own processes and ports from these.
from herald.local_etcd import LocalEtcd
from herald.local_process import ClusterProcess, ephemeral_low, free_port, herald_command

__all__ = ["ClusterProcess", "ClusterSettings", "LocalCluster", "ephemeral_low", "free_port", "herald_command"]

@dataclass
class ClusterSettings:
    base_dir: str = "local-cluster"
    brokers: int = 2
    storage_nodes: int = 3
    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    heartbeat_interval: float = 1.0  # seconds; a broker expires after 3 silent heartbeats
    proxies: int = 0  # `herald proxy` processes in front of the brokers (see proxy_url)
    metadata: str = "redis"  # "redis" (one redis-server) or "etcd" (a LocalEtcd of etcd_members)
    etcd_members: int = 3
    # `herald local-cluster` restarts a child that died (LocalCluster.supervise); past this many
    # restarts within a minute it stops the cluster and exits non-zero instead (a crash loop).
    max_restarts_per_minute: int = 5
    # The cluster's name: every broker registers under it (`herald admin brokers list` shows it).
    cluster_name: str = "local"
    # A `herald dlq-worker` moves dead letters to their dead-letter topics, as in a real deployment.
    dlq_worker: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)


_CLUSTER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class LocalCluster:
    def __init__(self, settings: ClusterSettings) -> None:
        if settings.storage_nodes < settings.write_quorum:
            raise InvalidArgumentError(
                f"{settings.storage_nodes} storage nodes cannot hold ledgers with write quorum "
                f"{settings.write_quorum}"
            )
        if settings.metadata not in ("redis", "etcd"):
            raise InvalidArgumentError(f"metadata backend {settings.metadata!r} is unknown: use redis or etcd")
        if settings.max_restarts_per_minute < 0:
            raise InvalidArgumentError(
                f"max_restarts_per_minute must be 0 (never restart) or more, got {settings.max_restarts_per_minute}")
        if not _CLUSTER_NAME.fullmatch(settings.cluster_name):
            raise InvalidArgumentError(
                f"cluster name {settings.cluster_name!r} is invalid: use 1 to 64 of a-z, A-Z, 0-9, '-', '_', '.'")
        self.settings = settings
        self.base = Path(settings.base_dir).resolve()
        self.logs = self.base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **settings.extra_env}
        herald = herald_command()
        self.metadata_processes: list[ClusterProcess] = []
        if settings.metadata == "etcd":
            self.etcd = LocalEtcd(self.base, self.logs, settings.etcd_members, env)
            self.metadata_url = self.etcd.url
            self.metadata_processes = self.etcd.processes
        else:
            self.redis = self._redis(env)
            self.metadata_processes = [self.redis]
        self._env, self._herald = env, herald
        self.storage = [self._storage_process(i) for i in range(settings.storage_nodes)]
        lookup_port, metrics_port = free_port(), free_port()
        # The `cluster` setting of lookup and brokers (no flag of its own), through their environment; one
        # already there (extra_env, the shell) is their own setting and wins, as an environment variable does.
        named = {"HERALD_LOOKUP_CLUSTER": settings.cluster_name, "HERALD_BROKER_CLUSTER": settings.cluster_name}
        self.lookup = ClusterProcess(
            "lookup", [*herald, "lookup", "--metadata-url", self.metadata_url, "--port", str(lookup_port),
                       "--heartbeat-interval", str(settings.heartbeat_interval), "--metrics-port", str(metrics_port)],
            self.logs, "lookup listening on", lookup_port, {**named, **env}, metrics_port=metrics_port,
        )
        quorums = ["--ensemble-size", str(settings.ensemble_size), "--write-quorum", str(settings.write_quorum),
                   "--ack-quorum", str(settings.ack_quorum)]
        nodes = ",".join(node.address for node in self.storage)
        self.brokers = []
        for i in range(settings.brokers):
            port, metrics_port, pulsar_port, web_port = free_port(), free_port(), free_port(), free_port()
            self.brokers.append(ClusterProcess(
                f"broker-{i}", [*herald, "broker", "--metadata-url", self.metadata_url, "--lookup-address",
                                self.lookup.address, "--storage-nodes", nodes, "--port", str(port),
                                "--broker-id", f"broker-{i}", "--metrics-port", str(metrics_port),
                                "--pulsar-port", str(pulsar_port), "--web-port", str(web_port), *quorums],
                self.logs, "broker listening on", port, {**named, **env}, metrics_port=metrics_port,
                pulsar_port=pulsar_port, web_port=web_port,
            ))
        self.proxies = []
        for i in range(settings.proxies):
            port, metrics_port, pulsar_port = free_port(), free_port(), free_port()
            self.proxies.append(ClusterProcess(
                f"proxy-{i}", [*herald, "proxy", "--lookup-address", self.lookup.address, "--port", str(port),
                               "--metrics-port", str(metrics_port), "--pulsar-port", str(pulsar_port)],
                self.logs, "proxy listening on", port, env, metrics_port=metrics_port, pulsar_port=pulsar_port,
            ))
        self.dlq_workers: list[ClusterProcess] = []
        if settings.dlq_worker:
            metrics_port = free_port()  # the worker listens on nothing else: its port is its /metrics
            self.dlq_workers.append(ClusterProcess(
                "dlq-worker", [*herald, "dlq-worker", "--url", self.service_url, "--worker-name", "dlq-worker",
                               "--metrics-port", str(metrics_port)],
                self.logs, "is running against", metrics_port, env, metrics_port=metrics_port,
            ))

    def _redis(self, env: dict[str, str]) -> ClusterProcess:
        redis = shutil.which("redis-server")
        if redis is None:
            raise ServiceNotReadyError("redis-server is not installed (apt-get install redis-server)")
        redis_port = free_port()
        (self.base / "redis").mkdir(exist_ok=True)
        self.metadata_url = f"redis://127.0.0.1:{redis_port}/0"
        # Metadata writes are few and must survive a crash: append-only file, fsync on every write.
        return ClusterProcess(
            "redis", [redis, "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", str(self.base / "redis"),
                      "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"],
            self.logs, "Ready to accept connections", redis_port, env,
        )

    def _storage_process(self, i: int) -> ClusterProcess:
        """Storage node i; it registers in the metadata store (brokers find it there)."""
        port, metrics_port = free_port(), free_port()
        data_dir = str(self.base / f"storage-{i}")
        return ClusterProcess(
            f"storage-{i}", [*self._herald, "storage", "--data-dir", data_dir, "--port", str(port),
                             "--metrics-port", str(metrics_port), "--metadata-url", self.metadata_url],
            self.logs, "storage listening on", port, self._env, metrics_port=metrics_port,
        )

    def add_storage_node(self) -> ClusterProcess:
        """Start one more storage node; brokers use it for new ledgers without a restart."""
        process = self._storage_process(len(self.storage))
        self.storage.append(process)
        process.start()
        return process

    @property
    def service_url(self) -> str:
        return f"herald://{self.lookup.address}"

    @property
    def proxy_url(self) -> str:
        """The service URL of the first proxy: a client given only this never dials a broker."""
        if not self.proxies:
            raise InvalidArgumentError("this cluster runs no proxy: start it with proxies >= 1")
        return f"herald://{self.proxies[0].address}"

    @property
    def proxy_pulsar_url(self) -> str:
        """The first proxy's pulsar:// URL: an official Pulsar client given only this reaches every broker."""
        if not self.proxies:
            raise InvalidArgumentError("this cluster runs no proxy: start it with proxies >= 1")
        return self.proxies[0].pulsar_url

    @property
    def processes(self) -> list[ClusterProcess]:
        return [*self.metadata_processes, *self.storage, self.lookup, *self.brokers, *self.proxies,
                *self.dlq_workers]

    def process(self, name: str) -> ClusterProcess:
        for candidate in self.processes:
            if candidate.name == name:
                return candidate
        raise InvalidArgumentError(f"no process named {name!r} in this cluster")

    def broker_at(self, address: str) -> ClusterProcess:
        for broker in self.brokers:
            if broker.address == address:
                return broker
        raise InvalidArgumentError(f"no broker listens on {address}")

    def start(self) -> None:
        try:
            if self.settings.metadata == "etcd":
                self.etcd.start()  # its members start together: each waits for a quorum
            for process in self.processes:
                if process not in self.metadata_processes or self.settings.metadata != "etcd":
                    process.start()
            # For scripts: `herald produce t --url "$(cat local-cluster/service-url)"`.
            (self.base / "service-url").write_text(self.service_url + "\n")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def supervise(self, stop: threading.Event, report: Callable[[str], None] | None = None) -> None:
        """Until `stop` is set, watch every child: one that exited is reaped (no zombie), reported
        (its exit status and log) and started again. Past settings.max_restarts_per_minute restarts
        within a minute, ServiceNotReadyError: the caller stops the cluster rather than loop on a crash."""
        say = report if report is not None else (lambda text: print(text, file=sys.stderr, flush=True))
        restarts: deque[float] = deque()
        limit = self.settings.max_restarts_per_minute
        while not stop.wait(0.2):
            for process in self.processes:
                if process.proc is None or process.proc.poll() is None:  # poll() reaps an exited child
                    continue
                code = process.proc.returncode
                status = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                say(f"herald local-cluster: {process.name} (pid {process.proc.pid}) {status}; see {process.log_path}")
                now = time.monotonic()
                while restarts and now - restarts[0] > 60:
                    restarts.popleft()
                if len(restarts) >= limit:
                    raise ServiceNotReadyError(
                        f"{process.name} died after {len(restarts)} restarts within a minute (max_restarts_per_minute="
                        f"{limit}): stopping the cluster; see {process.log_path}")
                restarts.append(now)
                process.start()
                assert process.proc is not None
                say(f"herald local-cluster: {process.name} restarted, pid {process.proc.pid}")

    def describe(self) -> list[tuple[str, str]]:
        rows = [("service URL", self.service_url)]
        if self.proxies:
            rows.append(("proxy URL", self.proxy_url))
        rows.append(("cluster", self.settings.cluster_name))
        rows.append(("metadata", self.metadata_url))
        rows += [(p.name, p.address) for p in self.processes
                 if p not in self.metadata_processes and p not in self.dlq_workers]
        rows += [(f"{p.name} pulsar", p.pulsar_url) for p in self.processes if p.pulsar_port is not None]
        rows += [(f"{p.name} web", p.web_url) for p in self.processes if p.web_port is not None]
        rows += [(f"{p.name} metrics", f"http://127.0.0.1:{p.metrics_port}/metrics")
                 for p in self.processes if p.metrics_port is not None]
        rows += [(f"{p.name} pid", str(p.proc.pid)) for p in self.processes if p.proc is not None]
        rows.append(("logs", str(self.logs)))
        return rows
