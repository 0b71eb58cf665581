"""Health of Herald's services as probes see it. Liveness: the process's event loop still runs
(LoopHeartbeat, a callback the loop runs every second). Readiness: named checks each service
registers ("registered with lookup", "journal open"), run on the service's event loop
(ServiceHealth); the gRPC health service (grpc.health.v1) of the service's server answers SERVING
while they all pass. The process's HTTP endpoint (common.http.endpoint) serves both as /healthz and
/readyz."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from herald.common.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[str | None]]
"""A readiness check: None when ready, else why not; an exception it raises counts as its message."""

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CHECK_TIMEOUT = 2.0  # seconds a check may take before it counts as failed
REFRESH_INTERVAL = 2.0  # seconds between two runs of the checks for the gRPC health status
PROBE_TIMEOUT = 1.0  # deadline of a health RPC to another service (reachable or not)
SERVING_CHECK = "serving"  # the life-cycle check every service has: starting, serving, stopping


class ServiceHealth:
    """One service's readiness: its checks, plus the life-cycle check `serving` (fails while the
    service starts, and for good once it stops or drains), and the gRPC health service of its
    server. The overall status ("") and each of `grpc_services` are SERVING while every check
    passes, NOT_SERVING otherwise; the checks run every `refresh_interval` seconds, and whenever
    /readyz asks. start() / stop() are symmetrical; stop() is idempotent."""

    def __init__(self, service: str, grpc_services: Sequence[str] = (), *, check_timeout: float = CHECK_TIMEOUT,
                 refresh_interval: float = REFRESH_INTERVAL) -> None:
        self.service = service
        self.check_timeout = check_timeout
        self.refresh_interval = refresh_interval
        self._grpc_services = ("", *grpc_services)
        self._checks: dict[str, Check] = {}
        self._servicer: Any = None  # grpc_health's aio HealthServicer, once on a server
        self._serving: bool | None = None  # the status last given to the gRPC health service
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = "starting"  # "serving" once started; then why it no longer serves
        self._refresher: asyncio.Task[None] | None = None

    def add_check(self, name: str, check: Check) -> None:
        self._checks[name] = check

    @property
    def check_names(self) -> list[str]:
        return [SERVING_CHECK, *self._checks]

    async def add_to_server(self, server: grpc.aio.Server) -> None:
        """Serve grpc.health.v1 on `server`, every service NOT_SERVING until start()."""
        servicer = health_aio.HealthServicer()
        for name in self._grpc_services:
            await servicer.set(name, NOT_SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        self._servicer = servicer

    async def start(self) -> None:
        """The service is up: from now on its checks decide (run at once, then every refresh_interval)."""
        if self._state != "starting":
            return
        self._loop = asyncio.get_running_loop()
        self._state = "serving"
        await self.check()
        self._refresher = asyncio.create_task(self._refresh(), name=f"{self.service}-health")

    async def stop(self, reason: str = "stopping") -> None:
        """NOT_SERVING from now on, `reason` saying why (e.g. "draining"); call it first in the
        service's stop(), so that probes and watchers learn before calls start failing."""
        if self._state not in ("starting", "serving"):
            return
        self._state = reason
        await cancel_and_wait(self._refresher)
        self._refresher = None
        if self._servicer is not None:
            await self._servicer.enter_graceful_shutdown()  # every service NOT_SERVING, for good

    async def check(self) -> dict[str, str | None]:
        """Run every check (on the service's loop): None for each that passes, else why it failed.
        The gRPC health status follows the result."""
        results: dict[str, str | None] = {SERVING_CHECK: None if self._state == "serving" else self._state}
        if results[SERVING_CHECK] is None:
            reasons = await asyncio.gather(*(self._run(check) for check in self._checks.values()))
            results.update(zip(self._checks, reasons, strict=True))
        await self._publish(all(reason is None for reason in results.values()))
        return results

    def check_threadsafe(self) -> concurrent.futures.Future[dict[str, str | None]]:
        """check() from another thread (the HTTP endpoint's), on the service's loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            done: concurrent.futures.Future[dict[str, str | None]] = concurrent.futures.Future()
            done.set_result({SERVING_CHECK: self._state if loop is None else "stopped"})
            return done
        return asyncio.run_coroutine_threadsafe(self.check(), loop)

    async def _run(self, check: Check) -> str | None:
        try:
            async with asyncio.timeout(self.check_timeout):
                return await check()
        except TimeoutError:
            return f"no answer within {self.check_timeout:g}s"
        except Exception as exc:  # a check's failure is its answer
            return str(exc) or repr(exc)

    async def _publish(self, serving: bool) -> None:
        if self._servicer is None or serving is self._serving:
            return
        self._serving = serving
        for name in self._grpc_services:
            await self._servicer.set(name, SERVING if serving else NOT_SERVING)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            results = await self.check()
            failed = {name: reason for name, reason in results.items() if reason is not None}
            if failed:
                log.debug("%s not ready: %s", self.service, failed)


async def unreachable(channel: grpc.aio.Channel, what: str, rpc_deadline: float = PROBE_TIMEOUT) -> str | None:
    """None when the server on `channel` answers a health check (whatever its status: it is
    reachable), else why not; `what` names it in the reason ("lookup at host:port")."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=rpc_deadline)
    except grpc.aio.AioRpcError as exc:
        if exc.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
            return None  # it answered, without the health service
        return f"{what} does not answer: {exc.code().name}: {exc.details()}"
    return None


class LoopHeartbeat:
    """Liveness of an event loop: a callback the loop runs every `interval` seconds records the
    time. A loop that has not run it for `stall_timeout` seconds is wedged (a blocking call on it,
    or a task that never yields), and problem() says so from any thread."""

    def __init__(self, interval: float = 1.0, stall_timeout: float = 10.0) -> None:
        self.interval = interval
        self.stall_timeout = stall_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.Handle | None = None
        self._last = 0.0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin beating on `loop` (call it from the loop's own thread)."""
        if self._loop is not None:
            return
        self._loop = loop
        self._last = time.monotonic()
        self._handle = loop.call_soon(self._beat)

    def _beat(self) -> None:
        if self._loop is None:
            return
        self._last = time.monotonic()
        self._handle = self._loop.call_later(self.interval, self._beat)

    def stop(self) -> None:
        handle, self._handle, self._loop = self._handle, None, None
        if handle is not None:
            handle.cancel()

    def problem(self) -> str | None:
        """None while the loop beats (or none is watched), else what is wrong with it."""
        loop = self._loop
        if loop is None:
            return None
        if loop.is_closed():
            return "the event loop is closed"
        silent = time.monotonic() - self._last
        if silent > self.stall_timeout:
            return (f"the event loop has not run for {silent:.1f}s (limit {self.stall_timeout:g}s): a blocking "
                    "call or a task that never yields holds it")
        return None
