"""Noticing a broker that stopped answering while its TCP connection stays up: a paused or hung
process, a frozen VM, a link that black-holes packets.

gRPC's own keepalive does not see it when it matters most: its ping is timed only once written, and a
producer with sends in flight has filled the socket toward the silent peer, so the ping is never
written and the producer waited for its whole send timeout. Pulsar's clients time their PING from the
moment it is due, not from when it left; this watchdog does the same with a health call on the
connection, whose deadline runs whether or not the request could be written. A connection that does
not answer within two keepalive intervals is closed, so every stream on it reconnects (and asks
lookup, which by then names the broker that took over)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from herald.common.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# Answers from a live peer, even if not a health report (a proxy or an older broker may not serve
# grpc.health.v1): only silence counts.
_SILENT = (grpc.StatusCode.DEADLINE_EXCEEDED,)
# The channel itself failed or closed: the pool sees that from the channel's state; nothing to do.
_GONE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


class ChannelWatchdog:
    """Probes one pooled channel every `interval` seconds; calls `on_silent()` once (and stops) when
    a probe has no answer within two intervals."""

    def __init__(self, channel: grpc.aio.Channel, address: str, interval: float,
                 on_silent: Callable[[], None]) -> None:
        self._stub = health_pb2_grpc.HealthStub(channel)
        self._address = address
        self._interval = interval
        self._on_silent = on_silent
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"herald-liveness-{self._address}")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task, swallow_errors=True)
            self._task = None

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        request = health_pb2.HealthCheckRequest()
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._stub.Check(request, timeout=2 * self._interval)
            except grpc.aio.AioRpcError as exc:
                if exc.code() in _GONE:
                    return
                if exc.code() in _SILENT:
                    log.warning("the connection to %s had no answer within %gs (keep_alive %gs): closing it; "
                                "its producers and consumers reconnect", self._address, 2 * self._interval,
                                self._interval)
                    self._task = None
                    self._on_silent()
                    return
