"""The proxy's Pulsar listener (pulsar:// on pulsar_port): each connection a Relay
(pulsar_relay.py), counted in the proxy's connection limits (max_connections,
max_connections_per_address: the same ConnectionLimiter as its gRPC calls) from when its CONNECT
authenticated until it closes, so a refused client takes no place."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

from herald.common.errors import AddressInUseError, HeraldError
from herald.common.pulsar.auth import ConnectAuthenticator
from herald.common.security.credentials import AuthenticationToken
from herald.proxy.drain import Drain
from herald.proxy.limits import ConnectionLimiter
from herald.proxy.lookups import Lookups
from herald.proxy.pulsar_relay import Relay, RelayContext
from herald.proxy.settings import ProxySettings

log = logging.getLogger(__name__)


class PulsarFront:
    """start() / stop() are symmetrical; stop() closes every connection (the clients reconnect,
    to another proxy replica or to this one restarted)."""

    def __init__(self, settings: ProxySettings, lookups: Lookups, limiter: ConnectionLimiter, drain: Drain,
                 token: AuthenticationToken | None) -> None:
        self.settings = settings
        self._limiter = limiter
        self._drain = drain
        self._context = RelayContext(ConnectAuthenticator(settings), lookups, token,
                                     settings.pulsar_connect_timeout, settings.operation_timeout)
        self._server: asyncio.Server | None = None
        self._relays: set[Relay] = set()
        self.port = -1

    @property
    def url(self) -> str:
        """pulsar://host:port of the listener ("" when there is none)."""
        if self.port < 0:
            return ""
        host = self.settings.advertised_address.rpartition(":")[0] or self.settings.host
        return f"pulsar://{host}:{self.port}"

    @property
    def connections(self) -> int:
        return len(self._relays)

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self.settings.host, self.settings.pulsar_port)
        except OSError as exc:
            raise AddressInUseError.of("Pulsar's protocol", self.settings.host, self.settings.pulsar_port,
                                       "--pulsar-port") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("proxy serves the Pulsar protocol on %s", self.url)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        # As gRPC names a peer, so both listeners' connections count under the same client address.
        name = (f"ipv6:[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"ipv4:{peer[0]}:{peer[1]}") \
            if isinstance(peer, tuple) else str(peer)
        admitted = False

        def admit() -> HeraldError | None:
            nonlocal admitted
            try:
                self._drain.check()
                self._limiter.enter(name)
            except HeraldError as error:
                return error
            admitted = True
            return None

        relay = Relay(self._context, reader, writer)
        self._relays.add(relay)
        try:
            await relay.serve(admit)
        except Exception:
            log.exception("pulsar connection %s failed", name)
        finally:
            self._relays.discard(relay)
            if admitted:
                self._limiter.leave(name)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for relay in list(self._relays):
            with contextlib.suppress(Exception):
                await relay.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
