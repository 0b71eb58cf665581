"""The nemesis's cluster: metadata, 3 storage nodes, lookup, 2 brokers and a proxy (E/Qw/Qa = 3/2/2),
every one of them behind its own fault proxy, so that every inter-service connection (broker ->
storage, broker -> metadata, broker -> lookup, lookup -> metadata, proxy -> lookup and brokers,
clients -> lookup and brokers) crosses a link the nemesis can drop, black-hole, delay or make
one-way, per (source, target) pair (faultproxy.py says why one listener serves every source).

Each process listens on a private port; the address the others are given is its fault proxy's:
brokers advertise theirs with --advertised-address, so lookup hands the proxy's address to
clients and to `herald proxy` alike."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from herald.common.errors import InvalidArgumentError, ServiceNotReadyError
from herald.local_etcd import LocalEtcd
from herald.local_process import ClusterProcess, free_port, herald_command

from tests.chaos.nemesis.faultproxy import FaultProxy, Mode, peer_process

CLIENT = "client"  # the test process: the workload's and the checker's clients
HEARTBEAT_INTERVAL = 1.0  # seconds; a broker expires after 3 silent heartbeats
LEASE_EXPIRY = 3 * HEARTBEAT_INTERVAL
# A storage node silent past its registration (3 s) and the grace (5 s) is re-replicated by
# autorecovery within the run, so re-replication itself meets the faults.
STORAGE_RECOVERY = ["--registration-ttl", "3", "--autorecovery-interval", "5", "--autorecovery-grace", "5"]


@dataclass
class Member:
    """A process fault proxies front: it listens on `port`, everyone else dials `public_port`;
    `more_ports` are further (listen port, public port) pairs it serves on (an etcd member's peer
    port beside its client port), each fronted by a fault proxy of its own."""

    process: ClusterProcess
    port: int
    public_port: int = field(default_factory=free_port)
    more_ports: list[tuple[int, int]] = field(default_factory=list)

    @property
    def public_address(self) -> str:
        return f"127.0.0.1:{self.public_port}"

    @property
    def fronted(self) -> list[tuple[int, int]]:
        return [(self.port, self.public_port), *self.more_ports]


class MetadataBackend(Protocol):
    """The metadata store's processes, each a Member, and the URL the services are given, which
    names the members' fault proxies. Register a backend in METADATA_BACKENDS."""

    members: list[Member]

    @property
    def url(self) -> str: ...

    def start(self) -> None:
        """Start every member (together, when they need each other to become ready)."""


class RedisMetadata:
    """One redis-server, append-only with fsync on every write: metadata writes must survive a crash."""

    def __init__(self, base: Path, logs: Path, env: dict[str, str]) -> None:
        redis = shutil.which("redis-server")
        if redis is None:
            raise ServiceNotReadyError("redis-server is not installed (apt-get install redis-server)")
        port = free_port()
        data = base / "redis"
        data.mkdir(parents=True, exist_ok=True)
        process = ClusterProcess(
            "redis", [redis, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--appendonly", "yes",
                      "--appendfsync", "always", "--save", "", "--protected-mode", "no"],
            logs, "Ready to accept connections", port, env,
        )
        self.members = [Member(process, port)]

    @property
    def url(self) -> str:
        return f"redis://{self.members[0].public_address}/0"

    def start(self) -> None:
        self.members[0].process.start()


class EtcdMetadata:
    """Three etcd members (the production backend), each fronted on its client port and its peer
    port: the members' own Raft traffic crosses fault proxies too, so a partition can cut the
    leader off from its followers. A majority must be up for any member to become ready, so
    they start together."""

    MEMBERS = 3

    def __init__(self, base: Path, logs: Path, env: dict[str, str]) -> None:
        public_clients = [free_port() for _ in range(self.MEMBERS)]
        public_peers = [free_port() for _ in range(self.MEMBERS)]
        self.etcd = LocalEtcd(base / "etcd", logs, self.MEMBERS, env,
                              advertise_client=[f"127.0.0.1:{port}" for port in public_clients],
                              advertise_peer=[f"127.0.0.1:{port}" for port in public_peers])
        self.members = [
            Member(process, _port(self.etcd.client_addresses[i]), public_clients[i],
                   [(_port(self.etcd.peer_addresses[i]), public_peers[i])])
            for i, process in enumerate(self.etcd.processes)
        ]

    @property
    def url(self) -> str:
        return self.etcd.url

    def start(self) -> None:
        with ThreadPoolExecutor(len(self.members)) as pool:
            for future in [pool.submit(member.process.start) for member in self.members]:
                future.result()


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


METADATA_BACKENDS: dict[str, type[RedisMetadata] | type[EtcdMetadata]] = {"redis": RedisMetadata, "etcd": EtcdMetadata}


@dataclass(frozen=True)
class TopologySettings:
    base_dir: Path
    metadata: str = "redis"  # a key of METADATA_BACKENDS
    storage_nodes: int = 3
    brokers: int = 2
    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2


class Topology:
    """The processes, their fault proxies, and process-level faults on them by name."""

    def __init__(self, settings: TopologySettings) -> None:
        if settings.metadata not in METADATA_BACKENDS:
            raise InvalidArgumentError(f"no metadata backend {settings.metadata!r}: one of {sorted(METADATA_BACKENDS)}")
        self.settings = settings
        self.base = settings.base_dir.resolve()
        self.logs = self.base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        herald = herald_command()
        self.metadata: MetadataBackend = METADATA_BACKENDS[settings.metadata](self.base, self.logs, env)
        self.storage = [self._storage(i, herald, env) for i in range(settings.storage_nodes)]
        lookup_port = free_port()
        self.lookup = Member(ClusterProcess(
            "lookup", [*herald, "lookup", "--metadata-url", self.metadata.url, "--port", str(lookup_port),
                       "--heartbeat-interval", str(HEARTBEAT_INTERVAL), "--metrics-port", "-1"],
            self.logs, "lookup listening on", lookup_port, env,
        ), lookup_port)
        quorums = ["--ensemble-size", str(settings.ensemble_size), "--write-quorum", str(settings.write_quorum),
                   "--ack-quorum", str(settings.ack_quorum)]
        nodes = ",".join(member.public_address for member in self.storage)
        self.brokers = []
        for i in range(settings.brokers):
            port, public_port = free_port(), free_port()
            self.brokers.append(Member(ClusterProcess(
                f"broker-{i}", [*herald, "broker", "--metadata-url", self.metadata.url, "--lookup-address",
                                self.lookup.public_address, "--storage-nodes", nodes, "--port", str(port),
                                "--advertised-address", f"127.0.0.1:{public_port}", "--broker-id", f"broker-{i}",
                                "--metrics-port", "-1", *quorums],
                self.logs, "broker listening on", port, env,
            ), port, public_port))
        proxy_port = free_port()
        self.proxy = Member(ClusterProcess(
            "proxy-0", [*herald, "proxy", "--lookup-address", self.lookup.public_address, "--port", str(proxy_port),
                        "--metrics-port", "-1"],
            self.logs, "proxy listening on", proxy_port, env,
        ), proxy_port)
        self.members = [*self.metadata.members, *self.storage, self.lookup, *self.brokers, self.proxy]
        # process name -> the fault proxies in front of it (one per port it serves on)
        self.fault_proxies: dict[str, list[FaultProxy]] = {
            member.process.name: [FaultProxy(f"{member.process.name}:{port}", "127.0.0.1", port, public_port,
                                             classify=self._classify) for port, public_port in member.fronted]
            for member in self.members
        }

    def _storage(self, i: int, herald: list[str], env: dict[str, str]) -> Member:
        """A storage node registered in the metadata store under its fault proxy's address, with
        autorecovery quick enough to re-replicate a node faulted longer than a few seconds."""
        port, public_port = free_port(), free_port()
        return Member(ClusterProcess(
            f"storage-{i}", [*herald, "storage", "--data-dir", str(self.base / f"storage-{i}"), "--port", str(port),
                             "--metrics-port", "-1", "--metadata-url", self.metadata.url,
                             "--advertised-address", f"127.0.0.1:{public_port}", *STORAGE_RECOVERY],
            self.logs, "storage listening on", port, env,
        ), port, public_port)

    # ---- addresses ----

    @property
    def service_url(self) -> str:
        """Clients reach lookup through its fault proxy."""
        return f"herald://{self.lookup.public_address}"

    @property
    def proxy_url(self) -> str:
        return f"herald://{self.proxy.public_address}"

    @property
    def names(self) -> list[str]:
        return [member.process.name for member in self.members]

    def process(self, name: str) -> ClusterProcess:
        for member in self.members:
            if member.process.name == name:
                return member.process
        raise InvalidArgumentError(f"no process named {name!r} in this topology")

    def _classify(self, peer_port: int, listen_port: int) -> str:
        pids = {os.getpid(): CLIENT}
        for member in self.members:
            proc = member.process.proc
            if proc is not None and proc.poll() is None:
                pids[proc.pid] = member.process.name
        return peer_process(peer_port, listen_port, pids)

    # ---- lifecycle ----

    def start(self) -> None:
        try:
            for fault_proxy in self._all_fault_proxies():
                fault_proxy.start()
            self.start_processes()
        except BaseException:
            self.stop()
            raise

    def start_processes(self) -> None:
        """Every process, the metadata store's first (its members together)."""
        self.metadata.start()
        for member in self.members:
            if member not in self.metadata.members:
                member.process.start()

    def stop(self) -> None:
        for member in reversed(self.members):
            member.process.stop()
        for fault_proxy in self._all_fault_proxies():
            fault_proxy.stop()

    # ---- network faults ----

    def cut(self, source: str, target: str, mode: Mode, delay_ms: int = 0) -> None:
        """One direction of a pair: what `source` dials at `target` gets `mode`."""
        for fault_proxy in self.fault_proxies.get(target, []):
            fault_proxy.set_mode(mode, source, delay_ms)

    def partition(self, a: str, b: str, mode: Mode = Mode.BLACKHOLE, delay_ms: int = 0) -> None:
        """Both directions of the pair a-b get `mode` (PASS heals them)."""
        self.cut(a, b, mode, delay_ms)
        self.cut(b, a, mode, delay_ms)

    def one_way(self, a: str, b: str) -> None:
        """What a sends reaches b; nothing b sends reaches a, on connections either side opened."""
        self.cut(a, b, Mode.CLIENT_TO_SERVER)
        self.cut(b, a, Mode.SERVER_TO_CLIENT)

    def peers(self, name: str) -> list[str]:
        """Everything `name` could talk to, the test's clients included."""
        return [other for other in [*self.names, CLIENT] if other != name]

    def isolate(self, name: str, mode: Mode = Mode.BLACKHOLE) -> None:
        """`name` cannot reach anything and nothing (the test's clients included) can reach it."""
        for other in self.peers(name):
            self.partition(name, other, mode)

    def heal(self) -> None:
        for fault_proxy in self._all_fault_proxies():
            fault_proxy.heal()

    def _all_fault_proxies(self) -> list[FaultProxy]:
        return [fault_proxy for proxies in self.fault_proxies.values() for fault_proxy in proxies]
