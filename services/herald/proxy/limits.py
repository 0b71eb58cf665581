"""Client connection counting and the max_connections limit. gRPC does not tell a server when a
connection opens or closes, so a connection is a client peer (`context.peer()`: one TCP
connection) from its first call until it has had no call in progress for the idle timeout; the
server closes connections idle that long (grpc.max_connection_idle_ms), so both views agree."""

from __future__ import annotations

import time
from collections.abc import Callable

from herald.common.errors import TooManyRequestsError
from herald.proxy.metrics import ProxyMetrics


class _Peer:
    __slots__ = ("calls", "idle_since")

    def __init__(self) -> None:
        self.calls = 0
        self.idle_since = 0.0


class ConnectionLimiter:
    """Counts calls per peer; a peer counts as a connection while it has calls in progress and for
    `idle_timeout` seconds after its last one. `max_connections` 0 means no limit."""

    def __init__(self, max_connections: int, idle_timeout: float, metrics: ProxyMetrics, own_address: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._metrics = metrics
        self._own_address = own_address
        self._clock = clock
        self._peers: dict[str, _Peer] = {}

    @property
    def connections(self) -> int:
        return len(self._peers)

    def enter(self, peer: str) -> None:
        """A call begins on `peer`'s connection; TooManyRequestsError (RESOURCE_EXHAUSTED) when it
        is a new connection and the proxy already has max_connections."""
        known = self._peers.get(peer)
        if known is None:
            if self.max_connections and len(self._peers) >= self.max_connections:
                self.expire_idle()
            if self.max_connections and len(self._peers) >= self.max_connections:
                self._metrics.rejected_connections.inc()
                raise TooManyRequestsError(
                    f"proxy {self._own_address} has reached its limit of {self.max_connections} client "
                    f"connections (max_connections): retry later, or connect to another proxy replica")
            known = self._peers[peer] = _Peer()
            self._metrics.connections.inc()
            self._metrics.active_connections.set(len(self._peers))
        known.calls += 1

    def leave(self, peer: str) -> None:
        """A call on `peer`'s connection ended."""
        known = self._peers.get(peer)
        if known is None:
            return
        known.calls -= 1
        if known.calls <= 0:
            known.calls = 0
            known.idle_since = self._clock()

    def expire_idle(self) -> None:
        """Forget peers idle for the idle timeout (their connections are being closed)."""
        cutoff = self._clock() - self.idle_timeout
        idle = [peer for peer, known in self._peers.items() if known.calls == 0 and known.idle_since <= cutoff]
        for peer in idle:
            del self._peers[peer]
        if idle:
            self._metrics.active_connections.set(len(self._peers))
