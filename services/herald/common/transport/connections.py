"""Client connection counting and its limits (max per client address, max in all), for every gRPC
server. gRPC tells a server nothing of connections, so a connection is a client peer
(`context.peer()`, "ipv4:10.0.0.7:51234": one TCP connection; calls multiplexed on it share it).
Only live, authenticated connections count: a peer counts while it has a call in progress that
was admitted, and calls are admitted after authentication (the interceptors come after the
AuthenticationInterceptor; the proxy's Gate runs inside its handlers). So a client that failed to
authenticate, or hung up, or is between calls takes no place of a legitimate client from its
address. Servers that count also close connections idle for the idle timeout
(`idle_server_options`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from herald.common.errors import HeraldError, TooManyRequestsError
from herald.common.transport.admission import OPEN_METHODS, admitting
from herald.common.transport.rpc import abort

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor


def peer_address(peer: str) -> str:
    """The client address of a gRPC peer: "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7",
    "ipv6:[::1]:51234" -> "ipv6:[::1]"; anything else (unix sockets) as it is."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer


def idle_server_options(idle_timeout: float) -> list[tuple[str, int]]:
    """Server options that close a connection with no call for `idle_timeout` seconds."""
    return [("grpc.max_connection_idle_ms", max(1, int(idle_timeout * 1000)))]


class _Peer:
    __slots__ = ("address", "calls", "idle_since")

    def __init__(self, address: str) -> None:
        self.address = address
        self.calls = 0
        self.idle_since = 0.0


class ConnectionTracker:
    """Counts the calls in progress per peer; a peer with at least one is a live connection of its
    address. A call that would make a connection live past `max_per_address` live connections of
    its address, or `max_total` in all, is refused (0: no limit) with TooManyRequestsError
    (RESOURCE_EXHAUSTED, retryable); calls on a connection already live are not. Peers are
    remembered until idle for `idle_timeout` (their connections are being closed then), so that a
    connection making call after call is one connection opened (`_opened`), not one per call."""

    def __init__(self, service: str, *, idle_timeout: float, max_per_address: int = 0, max_total: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.idle_timeout = idle_timeout
        self.max_per_address = max_per_address
        self.max_total = max_total
        self._clock = clock
        self._peers: dict[str, _Peer] = {}
        self._live_per_address: dict[str, int] = {}
        self._live = 0
        self._last_sweep = clock()

    @property
    def connections(self) -> int:
        """Live connections: those with a call in progress."""
        return self._live

    def connections_of(self, address: str) -> int:
        """Live connections of a client address."""
        return self._live_per_address.get(address, 0)

    def enter(self, peer: str) -> None:
        """A call begins on `peer`'s connection; TooManyRequestsError when that makes it a live
        connection over a limit."""
        known = self._peers.get(peer)
        if known is None:
            if self._clock() - self._last_sweep >= self.idle_timeout / 4:
                self.expire_idle()
            address = peer_address(peer)
            self._check(address)
            known = self._peers[peer] = _Peer(address)
            self._opened()
        elif known.calls == 0:
            self._check(known.address)
        known.calls += 1
        if known.calls == 1:
            self._live += 1
            self._live_per_address[known.address] = self._live_per_address.get(known.address, 0) + 1
            self._live_changed()

    def _check(self, address: str) -> None:
        if self.max_total and self._live >= self.max_total:
            self._refused()
            raise self._total_error()
        if self.max_per_address and self._live_per_address.get(address, 0) >= self.max_per_address:
            self._refused()
            raise TooManyRequestsError(
                f"{self.service} has reached its limit of {self.max_per_address} connections from client address "
                f"{address} (max_connections_per_address): close connections you do not use (clients sharing "
                f"an address share the limit) and retry later")

    def _total_error(self) -> HeraldError:
        return TooManyRequestsError(
            f"{self.service} has reached its limit of {self.max_total} client connections (max_connections): "
            "retry later")

    def leave(self, peer: str) -> None:
        """A call on `peer`'s connection ended: its connection stops counting with its last call."""
        known = self._peers.get(peer)
        if known is None or known.calls <= 0:
            return
        known.calls -= 1
        if known.calls == 0:
            known.idle_since = self._clock()
            self._live -= 1
            left = self._live_per_address[known.address] - 1
            if left:
                self._live_per_address[known.address] = left
            else:
                del self._live_per_address[known.address]
            self._live_changed()

    def expire_idle(self) -> None:
        """Forget peers idle for the idle timeout (their connections are being closed)."""
        now = self._last_sweep = self._clock()
        cutoff = now - self.idle_timeout
        idle = [peer for peer, known in self._peers.items() if known.calls == 0 and known.idle_since <= cutoff]
        for peer in idle:
            del self._peers[peer]

    # Hooks for metrics.
    def _opened(self) -> None:
        pass

    def _live_changed(self) -> None:
        pass

    def _refused(self) -> None:
        pass


class ConnectionLimitInterceptor(_Interceptor):
    """Admits every call of a server (but health probes: they carry no credentials) through a
    ConnectionTracker before its request is read (herald.common.transport.admission): a call that would make
    its connection live over a limit ends with RESOURCE_EXHAUSTED. Put it after the
    AuthenticationInterceptor, so that only authenticated calls count."""

    def __init__(self, tracker: ConnectionTracker) -> None:
        self.tracker = tracker

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        if handler is None or method.startswith(OPEN_METHODS):
            return handler
        return admitting(handler, self._counted, method)

    @contextlib.asynccontextmanager
    async def _counted(self, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
        peer = context.peer()
        try:
            self.tracker.enter(peer)
        except HeraldError as error:
            await abort(context, error)
        try:
            yield
        finally:
            self.tracker.leave(peer)


def connection_limits(service: str, max_per_address: int, idle_timeout: float,
                      ) -> tuple[list[_Interceptor], list[tuple[str, int]]]:
    """The interceptors (to come after authentication's) and server options a server adds to count
    its live connections and refuse those past `max_per_address` per client address; none when
    there is no limit (0)."""
    if max_per_address <= 0:
        return [], []
    tracker = ConnectionTracker(service, idle_timeout=idle_timeout, max_per_address=max_per_address)
    return [ConnectionLimitInterceptor(tracker)], idle_server_options(idle_timeout)
