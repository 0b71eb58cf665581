"""The fuzzing target and its watchers: one `herald standalone` (lookup, broker, storage, proxy) for
the whole fuzz session, a checking producer and consumer running alongside on a thread (numbered
messages on a tenant the fuzzer never names: every acknowledged send must come back, in order), and
after each test a check that the process is alive, answers health checks and a fresh produce and
consume, and that its log holds no traceback.

How long fuzzing runs is a hypothesis profile: `HERALD_FUZZ_EXAMPLES` examples per property
(default 150: tests/fuzz takes well under two minutes; `make fuzz` runs 5,000)."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from herald.client import Client, InitialPosition
from herald.common.errors import HeraldError
from hypothesis import HealthCheck, settings

from tests.conftest import StandaloneProcess, running_standalone

settings.register_profile(
    "herald-fuzz",
    max_examples=int(os.environ.get("HERALD_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                           HealthCheck.function_scoped_fixture],
    print_blob=True,
)
settings.load_profile("herald-fuzz")

CHECK_TENANT = f"herald-fuzz-check-{uuid.uuid4().hex[:8]}"
DEADLINE = 30.0
# What an unhandled exception leaves in the log (Python's and asyncio's wording).
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Task exception was never retrieved|"
                        r"Exception in callback|Unexpected error|internal error while")


class CheckingTraffic:
    """A producer sending numbered messages and a consumer receiving them, on a thread, for as long
    as the fuzzing runs. Every send that was acknowledged must be received; messages arrive in
    order (dedup is on: a resend after a reconnect is never stored twice)."""

    def __init__(self, service_url: str) -> None:
        self.client = Client(service_url, operation_timeout=DEADLINE)
        self.topic = f"persistent://{CHECK_TENANT}/ns/checked"
        self.acknowledged: list[int] = []
        self.received: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        from herald.client.admin import SyncAdminClient

        with SyncAdminClient(self.client_url, timeout=DEADLINE) as admin:
            admin.create_tenant(CHECK_TENANT)
            admin.create_namespace(f"{CHECK_TENANT}/ns")
        self.consumer = self.client.subscribe(self.topic, "checker", initial_position=InitialPosition.Earliest)
        self.producer = self.client.create_producer(self.topic, batching_enabled=False)
        self._threads = [threading.Thread(target=self._produce, daemon=True, name="fuzz-check-producer"),
                         threading.Thread(target=self._consume, daemon=True, name="fuzz-check-consumer")]
        for thread in self._threads:
            thread.start()

    @property
    def client_url(self) -> str:
        return self.client._service_url

    def _produce(self) -> None:
        number = 0
        while not self._stop.is_set():
            try:
                self.producer.send(b"%d" % number)
            except HeraldError as exc:
                self.errors.append(f"send {number}: {exc!r}")
                return
            self.acknowledged.append(number)
            number += 1
            self._stop.wait(0.01)

    def _consume(self) -> None:
        while not self._stop.is_set() or len(self.received) < len(self.acknowledged):
            try:
                message = self.consumer.receive(timeout=1.0)
            except HeraldError as exc:
                self.errors.append(f"receive: {exc!r}")
                return
            if message is None:
                if self._stop.is_set() and time.monotonic() > self._drain_deadline:
                    return
                continue
            self.received.append(int(message.data()))
            self.consumer.acknowledge(message)

    _drain_deadline = float("inf")

    def check_so_far(self) -> None:
        assert not self.errors, self.errors
        received = list(self.received)
        assert received == list(range(len(received))), f"checking consumer got {received[-20:]} out of order"

    def stop(self) -> None:
        self._drain_deadline = time.monotonic() + DEADLINE
        self._stop.set()
        for thread in self._threads:
            thread.join(DEADLINE + 5)
        try:
            self.check_so_far()
            assert self.acknowledged, "the checking producer sent nothing"
            assert self.received[:len(self.acknowledged)] == self.acknowledged, (
                f"{len(self.acknowledged)} sends acknowledged, {len(self.received)} received")
        finally:
            self.client.close()


class FuzzTarget:
    """The standalone under fuzzing, with the checks made between batches."""

    def __init__(self, server: StandaloneProcess) -> None:
        self.server = server
        self.log_offset = 0
        self.health_rounds = 0

    @property
    def ports(self) -> dict[str, int]:
        server = self.server
        return {"lookup": server.port, "broker": server.broker_port, "proxy": server.proxy_port,
                "storage": server.storage_port}

    def new_log(self) -> str:
        text = self.server.log_path.read_text(errors="replace")
        new, self.log_offset = text[self.log_offset:], len(text)
        return new

    def check_alive(self) -> None:
        """The process runs, every server answers its health check, no traceback was logged, and a
        fresh producer and consumer (on the broker directly and through the proxy) work."""
        proc = self.server.proc
        assert proc is not None and proc.poll() is None, f"standalone died:\n{self.new_log()[-4000:]}"
        for name, port in self.ports.items():
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=DEADLINE)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, (name, reply)
        self.health_rounds += 1
        for url in (self.server.service_url, self.server.proxy_url):
            topic = f"persistent://{CHECK_TENANT}/ns/health-{self.health_rounds}-{url.rsplit(':', 1)[1]}"
            with Client(url, operation_timeout=DEADLINE) as client:
                consumer = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
                producer = client.create_producer(topic)
                producer.send(b"alive")
                message = consumer.receive(timeout=DEADLINE)
                assert message is not None and message.data() == b"alive"
        new = self.new_log()
        found = _TRACEBACK.search(new)
        assert found is None, (
            f"the standalone logged an unhandled exception:\n{new[max(0, found.start() - 2000):][:8000]}")


@pytest.fixture(scope="session")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    with running_standalone(Path(tmp_path_factory.mktemp("fuzz")) / "data") as server:
        target = FuzzTarget(server)
        checker = CheckingTraffic(server.service_url)
        checker.start()
        target.checker = checker  # type: ignore[attr-defined]
        try:
            yield target
        finally:
            checker.stop()
            target.check_alive()


@pytest.fixture
def target(fuzz_target: FuzzTarget) -> Iterator[FuzzTarget]:
    """The fuzz target, checked after the test: alive, serving, nothing lost so far."""
    yield fuzz_target
    fuzz_target.check_alive()
    fuzz_target.checker.check_so_far()  # type: ignore[attr-defined]
