"""Client connection counting and its limits (max per client address, max in all), for every gRPC
server. gRPC tells a server nothing of connections, so a connection is a client peer
(`context.peer()`, "ipv4:10.0.0.7:51234": one TCP connection; calls multiplexed on it share it)
from its first call until it has had no call in progress for the idle timeout. Servers that count
close connections idle that long (`idle_server_options`), so both views agree: a client that closed
its connection stops counting once the timeout passes."""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from herald.common.errors import HeraldError, TooManyRequestsError
from herald.common.rpc import abort, handler_behavior

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
    """Counts calls per peer; a peer counts as a connection of its address while it has calls in
    progress and for `idle_timeout` seconds after its last one. A call on a new connection past
    `max_per_address` connections of its address, or `max_total` in all, is refused (0: no
    limit) with TooManyRequestsError (RESOURCE_EXHAUSTED, retryable)."""

    def __init__(self, service: str, *, idle_timeout: float, max_per_address: int = 0, max_total: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.idle_timeout = idle_timeout
        self.max_per_address = max_per_address
        self.max_total = max_total
        self._clock = clock
        self._peers: dict[str, _Peer] = {}
        self._per_address: dict[str, int] = {}
        self._last_sweep = clock()

    @property
    def connections(self) -> int:
        return len(self._peers)

    def connections_of(self, address: str) -> int:
        return self._per_address.get(address, 0)

    def enter(self, peer: str) -> None:
        """A call begins on `peer`'s connection; TooManyRequestsError when it is a new connection
        over a limit."""
        known = self._peers.get(peer)
        if known is None:
            address = peer_address(peer)
            if self._clock() - self._last_sweep >= self.idle_timeout / 4 or self._over_limit(address):
                self.expire_idle()
            self._check(address)
            known = self._peers[peer] = _Peer(address)
            self._per_address[address] = self._per_address.get(address, 0) + 1
            self._opened()
        known.calls += 1

    def _over_limit(self, address: str) -> bool:
        return bool(self.max_total and len(self._peers) >= self.max_total) or bool(
            self.max_per_address and self._per_address.get(address, 0) >= self.max_per_address)

    def _check(self, address: str) -> None:
        if self.max_total and len(self._peers) >= self.max_total:
            self._refused()
            raise self._total_error()
        if self.max_per_address and self._per_address.get(address, 0) >= self.max_per_address:
            self._refused()
            raise TooManyRequestsError(
                f"{self.service} has reached its limit of {self.max_per_address} connections from client address "
                f"{address} (max_connections_per_address): close idle connections (clients sharing an "
                f"address share the limit) and retry later")

    def _total_error(self) -> HeraldError:
        return TooManyRequestsError(
            f"{self.service} has reached its limit of {self.max_total} client connections (max_connections): "
            "retry later")

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
        now = self._last_sweep = self._clock()
        cutoff = now - self.idle_timeout
        idle = [peer for peer, known in self._peers.items() if known.calls == 0 and known.idle_since <= cutoff]
        for peer in idle:
            address = self._peers.pop(peer).address
            left = self._per_address[address] - 1
            if left:
                self._per_address[address] = left
            else:
                del self._per_address[address]
        if idle:
            self._expired()

    # Hooks for metrics.
    def _opened(self) -> None:
        pass

    def _refused(self) -> None:
        pass

    def _expired(self) -> None:
        pass


class ConnectionLimitInterceptor(_Interceptor):
    """Admits every call of a server through a ConnectionTracker: a call on a connection over a
    limit ends with RESOURCE_EXHAUSTED before its handler runs."""

    def __init__(self, tracker: ConnectionTracker) -> None:
        self.tracker = tracker

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        tracker = self.tracker
        behavior, make = handler_behavior(handler)

        async def admit(context: grpc.aio.ServicerContext[Any, Any]) -> str:
            peer = context.peer()
            try:
                tracker.enter(peer)
            except HeraldError as error:
                await abort(context, error)
            return peer

        if inspect.isasyncgenfunction(behavior):
            async def generating(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                peer = await admit(context)
                try:
                    async for reply in behavior(request, context):
                        yield reply
                finally:
                    tracker.leave(peer)

            wrapped: Any = generating
        else:
            async def calling(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                peer = await admit(context)
                try:
                    return await behavior(request, context)
                finally:
                    tracker.leave(peer)

            wrapped = calling
        return make(
            wrapped, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


def connection_limits(service: str, max_per_address: int, idle_timeout: float,
                      ) -> tuple[list[_Interceptor], list[tuple[str, int]]]:
    """The interceptors and server options a server adds to count its connections and refuse
    those past `max_per_address` per client address; none when there is no limit (0)."""
    if max_per_address <= 0:
        return [], []
    tracker = ConnectionTracker(service, idle_timeout=idle_timeout, max_per_address=max_per_address)
    return [ConnectionLimitInterceptor(tracker)], idle_server_options(idle_timeout)
