"""The proxy's client connection limits (max_connections in all, max_connections_per_address per
client address), counted as every server counts them (herald.common.transport.connections: only live,
authenticated connections, a client peer while it has a call in progress; the Gate admits calls
inside the handlers, after authentication), with the proxy's metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

from herald.common.errors import HeraldError, TooManyRequestsError
from herald.common.transport.connections import ConnectionTracker
from herald.proxy.metrics import ProxyMetrics


class ConnectionLimiter(ConnectionTracker):
    """Counts calls per peer; `max_connections` / `max_per_address` 0 means no limit."""

    def __init__(self, max_connections: int, idle_timeout: float, metrics: ProxyMetrics, own_address: str,
                 clock: Callable[[], float] = time.monotonic, max_per_address: int = 0) -> None:
        super().__init__(f"proxy {own_address}", idle_timeout=idle_timeout, max_per_address=max_per_address,
                         max_total=max_connections, clock=clock)
        self._metrics = metrics
        self._own_address = own_address

    @property
    def max_connections(self) -> int:
        return self.max_total

    def _total_error(self) -> HeraldError:
        return TooManyRequestsError(
            f"proxy {self._own_address} has reached its limit of {self.max_total} client "
            f"connections (max_connections): retry later, or connect to another proxy replica")

    def _opened(self) -> None:
        self._metrics.connections.inc()

    def _live_changed(self) -> None:
        self._metrics.active_connections.set(self.connections)

    def _refused(self) -> None:
        self._metrics.rejected_connections.inc()
