"""Health as probes see it, on real processes: grpc.health.v1 on every gRPC server, /healthz and
/readyz beside /metrics. A standalone answers SERVING and ready with every check named; a broker
whose lookup is down, a lookup whose Redis is stopped and a proxy that drains are not ready, and say
which check failed."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import VENV_BIN, StandaloneProcess, free_port, service_env, wait_for_port
from tests.helpers import eventually_sync

DEADLINE = 60.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def http_get(url: str) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of a GET; (0, {}) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def grpc_status(port: int, service: str = "") -> int | str:
    """The Check answer of grpc.health.v1 on 127.0.0.1:port for `service`, or the error's code name."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            return int(health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=5).status)
        except grpc.RpcError as error:
            return str(error.code().name)  # type: ignore[attr-defined]


def health_becomes(status: int, what: str, port: int, service: str = "") -> None:
    """Poll grpc.health.v1 Check on 127.0.0.1:port until it answers `status`."""
    eventually_sync(lambda: grpc_status(port, service), what, until=lambda answer: answer == status, timeout=DEADLINE)


def first_watched_status(port: int, service: str = "") -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        replies = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=service),
                                                              timeout=10)
        status = int(next(replies).status)
        replies.cancel()
        return status


# ---- standalone --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone with every service, the dlq-worker included."""
    server = StandaloneProcess(tmp_path_factory.mktemp("health") / "data", service_env(), dlq_worker=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_standalone_answers_serving_on_each_grpc_port_for_the_server_and_each_service(
    whole: StandaloneProcess,
) -> None:
    ports = {
        whole.port: ["herald.v1.LookupService"],
        whole.broker_port: ["herald.v1.BrokerService", "herald.v1.AdminService", "herald.v1.DeadLetterService"],
        whole.storage_port: ["herald.v1.StorageService"],
        whole.proxy_port: ["herald.v1.LookupService", "herald.v1.BrokerService", "herald.v1.AdminService"],
    }
    for port, services in ports.items():
        health_becomes(SERVING, f"health of port {port}", port)
        for service in services:
            assert grpc_status(port, service) == SERVING, (port, service)
            assert first_watched_status(port, service) == SERVING, (port, service)
        assert first_watched_status(port) == SERVING
        assert grpc_status(port, "herald.v1.NoSuchService") == "NOT_FOUND"


def test_standalone_is_alive_and_ready_with_every_check_of_every_service_named(whole: StandaloneProcess) -> None:
    base = f"http://127.0.0.1:{whole.metrics_port}"
    assert http_get(f"{base}/healthz") == (200, {"alive": True})
    _, body = eventually_sync(lambda: http_get(f"{base}/readyz"), "standalone /readyz",
                              until=lambda answer: answer[0] == 200, timeout=DEADLINE)
    assert body["ready"] is True
    assert set(body["checks"]) == {
        "standalone/serving",
        "lookup/serving", "lookup/metadata-store",
        "storage/serving", "storage/journal",
        "broker/serving", "broker/lookup-registration", "broker/metadata-store",
        "proxy/serving", "proxy/lookup",
        "dlq-worker/serving", "dlq-worker/lookup",
    }
    assert all(check == {"ok": True} for check in body["checks"].values())
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as reply:
        assert b"herald_" in reply.read()  # /metrics is still there, on the same port


# ---- each service as its own process -----------------------------------------------------------

class ServiceProcess:
    """One `herald <command>` process with a gRPC port (None: it has none) and an HTTP endpoint,
    logging JSON lines to its own stderr file; restartable on the same ports."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path, port: int | None,
                 metrics_port: int) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.port = port
        self.metrics_port = metrics_port
        self.stderr_path = log_dir / f"{name}.stderr"
        self.stdout_path = log_dir / f"{name}.stdout"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen([str(VENV_BIN / "herald"), *self.args], env=self.env, stdout=out, stderr=err)
        for port in (self.port, self.metrics_port):
            if port is not None:
                wait_for_port(port, timeout=DEADLINE, proc=self.proc)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=DEADLINE)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=DEADLINE)

    def readyz(self) -> tuple[int, dict[str, Any]]:
        return http_get(f"http://127.0.0.1:{self.metrics_port}/readyz")

    def wait_ready(self) -> dict[str, Any]:
        _, body = eventually_sync(self.readyz, f"{self.name} /readyz", until=lambda answer: answer[0] == 200,
                                  timeout=DEADLINE)
        return body  # type: ignore[no-any-return]

    def wait_not_ready(self, check: str) -> str:
        """Poll /readyz until it answers 503 with `check` failing; that check's reason."""
        _, body = eventually_sync(
            self.readyz, f"{self.name} /readyz failing {check}", timeout=DEADLINE,
            until=lambda answer: answer[0] == 503 and not answer[1]["checks"].get(check, {"ok": True})["ok"])
        return str(body["checks"][check]["reason"])


class Services:
    """Makes service processes on free ports against one metadata URL; stops them all at the end."""

    def __init__(self, metadata_url: str, log_dir: Path) -> None:
        self.metadata_url = metadata_url
        self.log_dir = log_dir
        self.started: list[ServiceProcess] = []

    def make(self, name: str, command: str, *args: str, grpc: bool = True, env: dict[str, str] | None = None) -> (
            ServiceProcess):
        port = free_port() if grpc else None
        metrics_port = free_port()
        setting = command.upper().replace("-", "_")
        environment = {
            **service_env(), "HERALD_LOG_FORMAT": "json", "HERALD_LOOKUP_HEARTBEAT_INTERVAL": "0.5",
            f"HERALD_{setting}_METRICS_PORT": str(metrics_port),
            # One storage node: ledgers of one copy (the broker's cluster default is 3/2/2).
            "HERALD_BROKER_ENSEMBLE_SIZE": "1", "HERALD_BROKER_WRITE_QUORUM": "1", "HERALD_BROKER_ACK_QUORUM": "1",
            **(env or {}),
        }
        port_args = ["--port", str(port)] if port is not None else []
        service = ServiceProcess(name, [command, *args, *port_args], environment, self.log_dir, port, metrics_port)
        self.started.append(service)
        service.start()
        return service

    def storage(self) -> ServiceProcess:
        return self.make("storage", "storage", "--data-dir", str(self.log_dir / "storage"))

    def lookup(self, metadata_url: str | None = None) -> ServiceProcess:
        return self.make("lookup", "lookup", "--metadata-url", metadata_url or self.metadata_url)

    def broker(self, lookup: ServiceProcess, storage: ServiceProcess) -> ServiceProcess:
        return self.make("broker", "broker", "--metadata-url", self.metadata_url,
                         "--lookup-address", f"127.0.0.1:{lookup.port}",
                         "--storage-nodes", f"127.0.0.1:{storage.port}", "--broker-id", "broker-0")

    def proxy(self, lookup: ServiceProcess) -> ServiceProcess:
        return self.make("proxy", "proxy", "--lookup-address", f"127.0.0.1:{lookup.port}",
                         env={"HERALD_PROXY_DRAIN_TIMEOUT": "30"})

    def dlq_worker(self, lookup: ServiceProcess) -> ServiceProcess:
        return self.make("dlq-worker", "dlq-worker", "--url", f"herald://127.0.0.1:{lookup.port}",
                         grpc=False)

    def stop_all(self) -> None:
        for service in reversed(self.started):
            try:
                service.stop()
            finally:
                service.kill()


@pytest.fixture
def services(redis_db_url: str, tmp_path: Path) -> Iterator[Services]:
    made = Services(redis_db_url, tmp_path)
    try:
        yield made
    finally:
        made.stop_all()


def test_a_broker_and_a_dlq_worker_whose_lookup_is_down_are_not_ready_until_lookup_returns(
    services: Services,
) -> None:
    storage = services.storage()
    lookup = services.lookup()
    broker = services.broker(lookup, storage)
    worker = services.dlq_worker(lookup)
    body = broker.wait_ready()
    assert set(body["checks"]) == {"broker/serving", "broker/lookup-registration", "broker/metadata-store"}
    assert set(worker.wait_ready()["checks"]) == {"dlq-worker/serving", "dlq-worker/lookup"}
    assert set(storage.wait_ready()["checks"]) == {"storage/serving", "storage/journal"}
    health_becomes(SERVING, "broker health", port_of(broker))

    assert lookup.stop() == 0
    reason = broker.wait_not_ready("broker/lookup-registration")
    assert f"lookup at 127.0.0.1:{lookup.port}" in reason
    assert "lookup" in worker.wait_not_ready("dlq-worker/lookup")
    health_becomes(NOT_SERVING, "broker health without lookup", port_of(broker))
    assert broker.readyz()[1]["checks"]["broker/metadata-store"] == {"ok": True}  # only lookup is missing

    lookup.start()
    broker.wait_ready()
    worker.wait_ready()
    health_becomes(SERVING, "broker health with lookup back", port_of(broker))


def test_a_lookup_whose_redis_is_stopped_is_not_ready_until_redis_returns(
    services: Services, tmp_path: Path,
) -> None:
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    try:
        lookup = services.lookup(f"redis://127.0.0.1:{redis.port}/0")
        assert set(lookup.wait_ready()["checks"]) == {"lookup/serving", "lookup/metadata-store"}
        health_becomes(SERVING, "lookup health", port_of(lookup), "herald.v1.LookupService")

        redis.stop()
        reason = lookup.wait_not_ready("lookup/metadata-store")
        assert f"127.0.0.1:{redis.port}" in reason
        health_becomes(NOT_SERVING, "lookup health without redis", port_of(lookup), "herald.v1.LookupService")

        redis.start()
        lookup.wait_ready()
        health_becomes(SERVING, "lookup health with redis back", port_of(lookup))
    finally:
        redis.stop()


def test_a_draining_proxy_answers_not_serving_and_503_before_it_exits(services: Services) -> None:
    storage = services.storage()
    lookup = services.lookup()
    services.broker(lookup, storage)
    proxy = services.proxy(lookup)
    assert set(proxy.wait_ready()["checks"]) == {"proxy/serving", "proxy/lookup"}
    with grpc.insecure_channel(f"127.0.0.1:{port_of(proxy)}") as channel:
        # A watcher (a load balancer, say) stays connected through the drain.
        replies = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=DEADLINE)
        assert next(replies).status == SERVING
        assert proxy.proc is not None
        proxy.proc.send_signal(signal.SIGTERM)
        assert next(replies).status == NOT_SERVING
        reason = proxy.wait_not_ready("proxy/serving")
        assert reason == "draining"
        assert proxy.proc.poll() is None  # all this before it exits
        replies.cancel()
    assert proxy.stop() == 0


def test_every_service_command_logs_one_json_object_per_line_when_asked(services: Services) -> None:
    storage = services.storage()
    lookup = services.lookup()
    broker = services.broker(lookup, storage)
    proxy = services.proxy(lookup)
    worker = services.dlq_worker(lookup)
    for service in (storage, lookup, broker, proxy, worker):
        service.wait_ready()
    for service in reversed(services.started):
        assert service.stop() == 0
    for service in services.started:
        lines = service.stderr_path.read_text().splitlines()
        assert lines, f"{service.name} logged nothing"
        for line in lines:
            record = json.loads(line)
            assert {"time", "level", "logger", "message"} <= record.keys(), line
    assert any("registered with lookup" in json.loads(line)["message"]
               for line in broker.stderr_path.read_text().splitlines())


def port_of(service: ServiceProcess) -> int:
    assert service.port is not None
    return service.port


class RedisServer:
    """A redis-server of the test's own, stopped and started again on the same port."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed: run `make test`, which installs it"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
             "--save", "", "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=DEADLINE)
