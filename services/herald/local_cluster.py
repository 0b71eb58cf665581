"""`herald local-cluster`: a real multi-process Herald on loopback — redis-server, lookup, brokers,
storage nodes and optional proxies, each its own process with its log in one folder. The chaos tests drive the same
code (kill, pause, resume, restart any process)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from herald.common.errors import InvalidArgumentError, ServiceNotReadyError

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def ephemeral_low() -> int:
    """Where the kernel's ephemeral port range (outgoing connections, bind(0)) starts."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback port free now, for a server started next. Chosen below the kernel's ephemeral
    range: a port from bind(0) comes from that range, which every outgoing connection also draws
    from, so between choosing it and the server binding it a client socket could take it (seen in
    CI as a broker failing to bind). Never the same port twice in one process."""
    top = min(ephemeral_low(), 65536) - 1
    bottom = 10000 if top > 20000 else 1024
    for _ in range(200):
        port = random.randint(bottom, top)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as sock:  # a crowded range: let the kernel choose
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _herald_command() -> list[str]:
    """The `herald` of this interpreter's environment (works from a venv without activating it)."""
    beside = Path(sys.executable).parent / "herald"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "herald.cli"]


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
    extra_env: dict[str, str] = field(default_factory=dict)


class ClusterProcess:
    """One process of the cluster: started, stopped, killed, paused and resumed by name."""

    def __init__(self, name: str, args: list[str], log_dir: Path, ready_text: str, port: int,
                 env: dict[str, str], metrics_port: int | None = None, pulsar_port: int | None = None,
                 web_port: int | None = None) -> None:
        self.name = name
        self.metrics_port = metrics_port  # where it serves /metrics, when it does
        self.pulsar_port = pulsar_port  # where it serves Pulsar's binary protocol, when it does
        self.web_port = web_port  # where it serves Pulsar's admin REST API, when it does
        self.args = args
        self.log_path = log_dir / f"{name}.log"
        self.ready_text = ready_text
        self.port = port
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pulsar_url(self) -> str:
        if self.pulsar_port is None:
            raise InvalidArgumentError(f"{self.name} serves no Pulsar protocol")
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    @property
    def web_url(self) -> str:
        if self.web_port is None:
            raise InvalidArgumentError(f"{self.name} serves no REST API")
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        marker = f"==== {self.name} start {self.starts} ====\n"
        with open(self.log_path, "ab") as log:
            log.write(marker.encode())
            log.flush()
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if self.ready_text in text[text.rfind(marker):]:
                return
            if self.proc.poll() is not None:
                raise ServiceNotReadyError(
                    f"{self.name} exited with {self.proc.returncode} while starting; see {self.log_path}"
                )
            time.sleep(0.05)
        raise ServiceNotReadyError(f"{self.name} did not start within {timeout}s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to flush or close anything."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.resume()  # a paused process cannot handle SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets open but answers nothing."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()


class LocalCluster:
    def __init__(self, settings: ClusterSettings) -> None:
        if settings.storage_nodes < settings.write_quorum:
            raise InvalidArgumentError(
                f"{settings.storage_nodes} storage nodes cannot hold ledgers with write quorum "
                f"{settings.write_quorum}"
            )
        redis = shutil.which("redis-server")
        if redis is None:
            raise ServiceNotReadyError("redis-server is not installed (apt-get install redis-server)")
        self.settings = settings
        self.base = Path(settings.base_dir).resolve()
        self.logs = self.base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **settings.extra_env}
        herald = _herald_command()
        redis_port = free_port()
        (self.base / "redis").mkdir(exist_ok=True)
        self.metadata_url = f"redis://127.0.0.1:{redis_port}/0"
        # Metadata writes are few and must survive a crash: append-only file, fsync on every write.
        self.redis = ClusterProcess(
            "redis", [redis, "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", str(self.base / "redis"),
                      "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"],
            self.logs, "Ready to accept connections", redis_port, env,
        )
        self._env, self._herald = env, herald
        self.storage = [self._storage_process(i) for i in range(settings.storage_nodes)]
        lookup_port, metrics_port = free_port(), free_port()
        self.lookup = ClusterProcess(
            "lookup", [*herald, "lookup", "--metadata-url", self.metadata_url, "--port", str(lookup_port),
                       "--heartbeat-interval", str(settings.heartbeat_interval), "--metrics-port", str(metrics_port)],
            self.logs, "lookup listening on", lookup_port, env, metrics_port=metrics_port,
        )
        broker_env = {
            **env,
            "HERALD_BROKER_ENSEMBLE_SIZE": str(settings.ensemble_size),
            "HERALD_BROKER_WRITE_QUORUM": str(settings.write_quorum),
            "HERALD_BROKER_ACK_QUORUM": str(settings.ack_quorum),
        }
        nodes = ",".join(node.address for node in self.storage)
        self.brokers = []
        for i in range(settings.brokers):
            port, metrics_port, pulsar_port, web_port = free_port(), free_port(), free_port(), free_port()
            self.brokers.append(ClusterProcess(
                f"broker-{i}", [*herald, "broker", "--metadata-url", self.metadata_url, "--lookup-address",
                                self.lookup.address, "--storage-nodes", nodes, "--port", str(port),
                                "--broker-id", f"broker-{i}", "--metrics-port", str(metrics_port),
                                "--pulsar-port", str(pulsar_port), "--web-port", str(web_port)],
                self.logs, "broker listening on", port, broker_env, metrics_port=metrics_port,
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
        return [self.redis, *self.storage, self.lookup, *self.brokers, *self.proxies]

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
            for process in self.processes:
                process.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def describe(self) -> list[tuple[str, str]]:
        rows = [("service URL", self.service_url)]
        if self.proxies:
            rows.append(("proxy URL", self.proxy_url))
        rows.append(("metadata", self.metadata_url))
        rows += [(p.name, p.address) for p in self.processes if p is not self.redis]
        rows += [(f"{p.name} pulsar", p.pulsar_url) for p in self.processes if p.pulsar_port is not None]
        rows += [(f"{p.name} web", p.web_url) for p in self.processes if p.web_port is not None]
        rows += [(f"{p.name} metrics", f"http://127.0.0.1:{p.metrics_port}/metrics")
                 for p in self.processes if p.metrics_port is not None]
        rows.append(("logs", str(self.logs)))
        return rows
