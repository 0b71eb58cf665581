"""Health reporting on its own: /healthz follows the event loop's heartbeat (a wedged loop fails it),
/readyz runs each service's checks on its loop and names each failure, and grpc.health.v1 answers
(Check and Watch) what the checks say."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from herald.common.errors import AddressInUseError
from herald.common.http.endpoint import HttpEndpoint
from herald.common.transport.health import NOT_SERVING, SERVING, ServiceHealth
from prometheus_client import CollectorRegistry

from tests.helpers import eventually_sync


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on a thread of its own, as a service's loop runs beside the HTTP threads."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def on(loop: asyncio.AbstractEventLoop, call: Callable[[], Any]) -> Any:
    """Run `call` (a coroutine function) on `loop` and wait for its result."""
    return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=10)


def test_healthz_fails_while_the_event_loop_is_stalled_and_recovers_when_it_runs_again(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    endpoint = HttpEndpoint(CollectorRegistry(), stall_timeout=0.5, heartbeat_interval=0.05)
    health = ServiceHealth("broker", check_timeout=0.2)
    endpoint.watch(health)

    async def start() -> None:
        endpoint.start()
        await health.start()

    on(loop_thread, start)
    base = f"http://{endpoint.address}"
    try:
        assert get(f"{base}/healthz") == (200, {"alive": True})
        assert get(f"{base}/readyz")[0] == 200
        release = threading.Event()
        loop_thread.call_soon_threadsafe(release.wait)  # a blocking call wedges the loop
        try:
            _, body = eventually_sync(lambda: get(f"{base}/healthz"), "/healthz of a stalled loop",
                                      until=lambda answer: answer[0] == 503)
            assert body["alive"] is False and "event loop has not run" in body["reason"]
            status, body = get(f"{base}/readyz")
            assert status == 503
            assert "event loop is stalled" in body["checks"]["broker/event-loop"]["reason"]
        finally:
            release.set()
        eventually_sync(lambda: get(f"{base}/healthz"), "/healthz once the loop runs again",
                        until=lambda answer: answer[0] == 200)
        eventually_sync(lambda: get(f"{base}/readyz"), "/readyz once the loop runs again",
                        until=lambda answer: answer[0] == 200)
    finally:
        async def stop() -> None:
            await health.stop()
            endpoint.stop()

        on(loop_thread, stop)


def test_readyz_names_every_check_and_why_each_failing_one_failed(loop_thread: asyncio.AbstractEventLoop) -> None:
    answers: dict[str, str | None] = {"registered": "heartbeat to lookup at 127.0.0.1:1 failed: UNAVAILABLE"}

    async def registered() -> str | None:
        return answers["registered"]

    async def store() -> None:
        raise ConnectionError("metadata get failed on redis at 127.0.0.1:1: connection refused")

    async def hangs() -> None:
        await asyncio.Event().wait()

    endpoint = HttpEndpoint(CollectorRegistry())
    health = ServiceHealth("broker", check_timeout=0.2)
    health.add_check("lookup-registration", registered)
    health.add_check("metadata-store", store)
    health.add_check("slow", hangs)
    other = ServiceHealth("storage")
    endpoint.watch(health)
    endpoint.watch(other)
    endpoint.start()
    base = f"http://{endpoint.address}"
    try:
        status, body = get(f"{base}/readyz")
        assert status == 503 and body["ready"] is False
        assert body["checks"]["broker/serving"] == {"ok": False, "reason": "starting"}
        assert body["checks"]["storage/serving"] == {"ok": False, "reason": "starting"}

        on(loop_thread, health.start)
        on(loop_thread, other.start)
        status, body = get(f"{base}/readyz")
        assert status == 503
        assert body["checks"] == {
            "broker/serving": {"ok": True},
            "broker/lookup-registration": {"ok": False, "reason": answers["registered"]},
            "broker/metadata-store": {"ok": False, "reason": "metadata get failed on redis at 127.0.0.1:1: "
                                                             "connection refused"},
            "broker/slow": {"ok": False, "reason": "no answer within 0.2s"},
            "storage/serving": {"ok": True},
        }
        # /metrics is still served beside them.
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as reply:
            assert reply.status == 200

        on(loop_thread, other.stop)
        status, body = get(f"{base}/readyz")
        assert body["checks"]["storage/serving"] == {"ok": False, "reason": "stopping"}
    finally:
        on(loop_thread, health.stop)
        endpoint.stop()


async def test_grpc_health_answers_what_the_checks_say_and_watch_sees_each_change() -> None:
    failing: list[str] = []

    async def journal() -> str | None:
        return failing[0] if failing else None

    health = ServiceHealth("storage", ["herald.v1.StorageService"], refresh_interval=0.05)
    health.add_check("journal", journal)
    server = grpc.aio.server()
    await health.add_to_server(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)

    async def check(service: str) -> int:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        return int(reply.status)

    try:
        assert await check("") == NOT_SERVING  # starting
        assert await check("herald.v1.StorageService") == NOT_SERVING
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="herald.v1.StorageService"), timeout=60)
        assert (await watch.read()).status == NOT_SERVING
        await health.start()
        assert (await watch.read()).status == SERVING
        assert await check("") == SERVING and await check("herald.v1.StorageService") == SERVING
        failing.append("the journal failed: fdatasync: EIO")
        assert (await watch.read()).status == NOT_SERVING  # the next refresh saw it
        assert await check("") == NOT_SERVING
        failing.clear()
        assert (await watch.read()).status == SERVING
        await health.stop()
        assert (await watch.read()).status == NOT_SERVING
        assert await check("") == NOT_SERVING
        watch.cancel()
    finally:
        await channel.close()
        await server.stop(None)


def test_the_endpoint_serves_the_process_figures_once_however_often_its_registry_is_served() -> None:
    registry = CollectorRegistry()
    endpoint = HttpEndpoint(registry, port=0)
    HttpEndpoint(registry, port=0)  # a second endpoint on the same registry registers nothing twice
    endpoint.start()
    try:
        with urllib.request.urlopen(f"http://{endpoint.address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        endpoint.stop()
    types = [line for line in text.splitlines() if line.startswith("# TYPE ")]
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_gc_objects_collected_total",
                   "python_info"):
        assert sum(line.split()[2] == family for line in types) == 1, f"{family} in {types}"


def test_a_taken_port_is_refused_with_the_setting_to_change() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = HttpEndpoint(CollectorRegistry(), port=port)
        expected = f"broker cannot serve metrics on 127.0.0.1:{port} .*metrics_port"
        with pytest.raises(AddressInUseError, match=expected):
            endpoint.start_or_explain("broker")
