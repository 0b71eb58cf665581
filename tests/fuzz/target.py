"""The standalone under fuzzing and its watchers: a checking producer and consumer running alongside
on a thread (numbered messages on a tenant the fuzzer never names: every acknowledged send must come
back, in order), and the checks made after each test: the process is alive, answers health checks
and a fresh produce and consume, and its log holds no traceback."""

from __future__ import annotations

import re
import socket
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from herald.client import Client, InitialPosition
from herald.common.errors import HeraldError

from tests.conftest import StandaloneProcess
from tests.helpers import unique_name

CHECK_TENANT = unique_name("herald-fuzz-check")
DEADLINE = 30.0
# Settings of the standalones under fuzzing. An admin call on a partitioned topic is made on every
# partition (loading each): past a few, random partition counts would spend the run loading them.
FUZZ_ENV = {"HERALD_BROKER_MAX_PARTITIONS_PER_TOPIC": "16"}
# What an unhandled exception leaves in the log (Python's and asyncio's wording).
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Task exception was never retrieved|"
                        r"Exception in callback|Unexpected error|internal error while")


class CheckingTraffic:
    """A producer sending numbered messages and a consumer receiving them, on a thread, for as long
    as the fuzzing runs. Every send that was acknowledged must be received; messages arrive in
    order (dedup is on: a resend after a reconnect is never stored twice)."""

    def __init__(self, client: Client, topic: str) -> None:
        """`client` (closed by stop()) may produce and consume on `topic`, whose namespace exists."""
        self.client = client
        self.topic = topic
        self.acknowledged: list[int] = []
        self.received: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.consumer = self.client.subscribe(self.topic, "checker", initial_position=InitialPosition.Earliest)
        self.producer = self.client.create_producer(self.topic, batching_enabled=False)
        self._threads = [threading.Thread(target=self._produce, daemon=True, name="fuzz-check-producer"),
                         threading.Thread(target=self._consume, daemon=True, name="fuzz-check-consumer")]
        for thread in self._threads:
            thread.start()

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

    def __init__(self, server: StandaloneProcess, checker: CheckingTraffic) -> None:
        self.server = server
        self.checker = checker
        self.log_offset = 0
        self.health_rounds = 0

    def channel(self, port: int) -> grpc.Channel:
        """A channel to one of the standalone's servers (health checks need no credentials)."""
        return grpc.insecure_channel(f"127.0.0.1:{port}")

    def client(self, url: str) -> Client:
        """A client that may produce and consume in CHECK_TENANT."""
        return Client(url, operation_timeout=DEADLINE)

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
            with self.channel(port) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=DEADLINE)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, (name, reply)
        self.health_rounds += 1
        for url in (self.server.service_url, self.server.proxy_url):
            topic = f"persistent://{CHECK_TENANT}/ns/health-{self.health_rounds}-{url.rsplit(':', 1)[1]}"
            with self.client(url) as client:
                consumer = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
                producer = client.create_producer(topic)
                producer.send(b"alive")
                message = consumer.receive(timeout=DEADLINE)
                assert message is not None and message.data() == b"alive"
        new = self.new_log()
        found = TRACEBACK.search(new)
        assert found is None, (
            f"the standalone logged an unhandled exception:\n{new[max(0, found.start() - 2000):][:8000]}")


READ_TIMEOUT = 0.3  # a server waiting for the rest of a frame is left after this long


def send_raw(port: int, data: bytes, read_reply: bool) -> None:
    """Write `data` on a fresh connection, maybe read what the server answers (until it closes,
    goes quiet or has sent 64 KiB: it may keep pinging), close."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT) as sock:
        try:
            sock.sendall(data)
            received = 0
            while read_reply and received < 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += len(chunk)
        except (TimeoutError, ConnectionError):
            pass  # a server that closes on garbage, or waits for more: both fine
