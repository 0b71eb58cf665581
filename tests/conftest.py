"""Fixtures and process helpers shared by several test folders: free ports, a real redis-server,
`herald standalone` (`StandaloneProcess`, `running_standalone`, the `standalone` fixture) and the
local cluster. A fixture used by one folder only lives in that folder's conftest.py (e2e's
`shared_standalone`, `client`, `admin`, `wire`; security's PKI and tokens...); waiting with a
deadline and unique names are in tests/helpers.py."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
from herald.local_cluster import ClusterSettings, LocalCluster, free_port

from tests.helpers import eventually_sync

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll until something accepts connections on 127.0.0.1:port (never a bare sleep); fail at
    once when `proc` exits first."""
    def answers() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    eventually_sync(answers, f"something answering on port {port}", timeout=timeout)


@pytest.fixture(scope="session", autouse=True)
def grpc_aio_kept_up() -> Iterator[None]:
    """grpc.aio starts one poller thread per process and, when its last channel or server closes,
    shuts it down and joins it, on whichever event loop closed that last one. That join was seen
    to hang for good at the end of a run (a client closing on its loop thread, joined by the test's
    thread: tests/fuzz's checking traffic), so the session never ended. A channel made here and
    never closed keeps grpc.aio up until the process exits; nothing is dialed through it."""
    loop = asyncio.new_event_loop()

    async def make() -> grpc.aio.Channel:
        return grpc.aio.insecure_channel("127.0.0.1:9")  # the discard port: never connected

    channel = loop.run_until_complete(make())
    yield
    del channel  # left open on purpose (see above); the loop goes with the process


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server on a free port, for the whole session."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: run `make test`, which installs it")
    port = free_port()
    data = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
         "--save", "", "--appendonly", "no", "--protected-mode", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)



@pytest.fixture(scope="session")
def etcd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real one-member etcd on free loopback ports, for the whole session; tests keep apart by key
    prefix (EtcdMetadataStore's namespace)."""
    from herald.local_etcd import LocalEtcd

    base = tmp_path_factory.mktemp("etcd")
    etcd = LocalEtcd(base, base / "logs", members=1)
    etcd.start()
    try:
        yield etcd.url
    finally:
        etcd.stop()


_redis_dbs = itertools.cycle(range(1, 16))


@pytest.fixture
def redis_db_url(redis_url: str) -> str:
    """A database of the session's redis-server, emptied for this test: for services that take a
    metadata URL rather than a key prefix (database 0 holds the stores with a namespace of their own)."""
    url = redis_url.rsplit("/", 1)[0] + f"/{next(_redis_dbs)}"
    subprocess.run(["redis-cli", "-u", url, "flushdb"], check=True, capture_output=True)
    return url


@pytest.fixture
def herald_env() -> dict[str, str]:
    return service_env()


def service_env() -> dict[str, str]:
    """Environment for service subprocesses: the venv first on PATH, no proxies."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("http_proxy", None)
    env.pop("https_proxy", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class StandaloneProcess:
    """`herald standalone` as a real subprocess on free ports, restartable on the same data dir."""

    def __init__(self, data_dir: Path, env: dict[str, str], dlq_worker: bool = False) -> None:
        self.data_dir = data_dir
        self.env = env
        # Off unless asked for: tests of the dead-letter contract take the letters themselves.
        self.dlq_worker = dlq_worker
        self.port = free_port()
        self.broker_port = free_port()
        self.storage_port = free_port()
        self.proxy_port = free_port()
        self.metrics_port = free_port()
        self.pulsar_port = free_port()  # Pulsar's binary protocol on the broker, for the official clients
        self.web_port = free_port()  # Pulsar's admin REST API (never the defaults 6650 / 8080: others may hold them)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-standalone.log"
        self.starts = 0
        # Flags added to the command (security: TLS and authentication), and the URL scheme they call for.
        self.extra_args: list[str] = []
        self.scheme = "herald"

    @property
    def service_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def proxy_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.proxy_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child process owns it
        log.write(f"==== start {self.starts} ====\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "herald"), "standalone", "--data-dir", str(self.data_dir),
             "--port", str(self.port), "--broker-port", str(self.broker_port),
             "--storage-port", str(self.storage_port), "--proxy-port", str(self.proxy_port),
             "--metrics-port", str(self.metrics_port), "--pulsar-port", str(self.pulsar_port),
             "--web-port", str(self.web_port),
             *([] if self.dlq_worker else ["--no-dlq-worker"]),
             *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=self.env,
        )
        log.close()
        marker = f"==== start {self.starts} ===="
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if "press Ctrl-C to stop" in text[text.rfind(marker):]:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"standalone exited with {self.proc.returncode}:\n{text[-4000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"standalone did not start within {timeout}s:\n{self.log_path.read_text()[-4000:]}")

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def running_standalone(
    data_dir: Path, dlq_worker: bool = False, extra_env: dict[str, str] | None = None, **broker_settings: object,
) -> Iterator[StandaloneProcess]:
    """`herald standalone` on `data_dir`, its broker settings given as HERALD_BROKER_<NAME>
    variables (a module's fixture shortens check intervals this way), other services' as
    `extra_env` (HERALD_LOOKUP_..., HERALD_PROXY_...); stopped on exit."""
    env = service_env()
    env.update(extra_env or {})
    env.update({f"HERALD_BROKER_{name.upper()}": str(value) for name, value in broker_settings.items()})
    server = StandaloneProcess(data_dir, env, dlq_worker=dlq_worker)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    """A running `herald standalone` with its own data dir; stopped after the test."""
    with running_standalone(tmp_path / "data") as server:
        yield server


@pytest.fixture
def make_local_cluster(tmp_path: Path, herald_env: dict[str, str]) -> Iterator[Callable[..., LocalCluster]]:
    """Start `herald local-cluster`'s processes with the given ClusterSettings fields; all are
    stopped after the test. Heartbeats are short so that expiry takes a second or two."""
    started: list[LocalCluster] = []

    def make(**overrides: Any) -> LocalCluster:
        settings = ClusterSettings(base_dir=str(tmp_path / f"cluster-{len(started)}"), heartbeat_interval=0.5,
                                   extra_env=herald_env)
        for name, value in overrides.items():
            setattr(settings, name, value)
        cluster = LocalCluster(settings)
        started.append(cluster)
        cluster.start()
        return cluster

    try:
        yield make
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture
def local_cluster(make_local_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    """redis, lookup, 2 brokers and 3 storage nodes as processes; ledgers 3/2/2."""
    return make_local_cluster()
