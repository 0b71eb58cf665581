"""Graceful drain (SIGTERM): once it begins, new calls are refused with a retryable error, every
relayed stream is told to wind down (produce streams after their receipts, consume streams at
once), and the proxy waits for them up to the drain timeout."""

from __future__ import annotations

import asyncio
from typing import Protocol

from herald.common.errors import ServiceNotReadyError
from herald.proxy.metrics import ProxyMetrics

DRAINING_MESSAGE = "proxy is draining: reconnect"


class Drainable(Protocol):
    def drain(self) -> None:
        """Begin winding down; the stream's handler returns once it has."""


class Drain:
    """The proxy's draining state and the streams it has to wait for."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        self._metrics = metrics
        self._streams: set[Drainable] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.draining = False

    def check(self) -> None:
        """Refuse a new call while draining (ServiceNotReadyError: UNAVAILABLE, retryable)."""
        if self.draining:
            raise ServiceNotReadyError(DRAINING_MESSAGE)

    def add(self, stream: Drainable) -> None:
        self._streams.add(stream)
        self._idle.clear()
        if self.draining:
            stream.drain()

    def remove(self, stream: Drainable) -> None:
        self._streams.discard(stream)
        if not self._streams:
            self._idle.set()

    async def begin(self, timeout: float) -> bool:  # noqa: ASYNC109 - the drain timeout itself
        """Start draining and wait until every stream ended or `timeout` seconds passed; True when
        all ended in time."""
        self.draining = True
        self._metrics.draining.set(1)
        for stream in list(self._streams):
            stream.drain()
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True
