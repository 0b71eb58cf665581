"""The broker's Pulsar listeners: pulsar:// on `pulsar_port` and pulsar+ssl:// on `pulsar_tls_port`
(the broker's certificate; client certificates checked against tls_ca_file when required), each
connection a PulsarConnection. Connections per client address follow the broker's
max_connections_per_address, counted from when a connection authenticated until it closes (as on
the gRPC port: a refused client takes no place)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import Counter

from herald.broker.pulsar.connection import PulsarConnection
from herald.broker.pulsar.frontend import FrontEnd
from herald.common.errors import AddressInUseError, HeraldError, TooManyRequestsError
from herald.common.security.settings import SecuritySettings

log = logging.getLogger(__name__)


def server_ssl_context(settings: SecuritySettings) -> ssl.SSLContext:
    """TLS for pulsar+ssl://, from the broker's own TLS settings."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_ca_file:
        context.load_verify_locations(settings.tls_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED if settings.tls_require_client_cert else ssl.CERT_OPTIONAL
    return context


class PulsarServer:
    """start() / stop() are symmetrical; stop() closes every connection (their clients reconnect
    elsewhere). Port 0 picks a free port; -1 serves no listener of that kind."""

    def __init__(self, frontend: FrontEnd, host: str, port: int, tls_port: int = -1,
                 keepalive_seconds: float = 30.0) -> None:
        self.frontend = frontend
        self.host = host
        self._requested = (port, tls_port)
        self.port = -1
        self.tls_port = -1
        self._keepalive = keepalive_seconds
        self._servers: list[asyncio.Server] = []
        self._connections: set[PulsarConnection] = set()
        self._per_address: Counter[str] = Counter()

    async def start(self) -> None:
        port, tls_port = self._requested
        if port >= 0:
            try:
                server = await asyncio.start_server(self._serve, self.host, port)
            except OSError as exc:
                raise AddressInUseError.of("Pulsar's protocol", self.host, port, "--pulsar-port") from exc
            self._servers.append(server)
            self.port = server.sockets[0].getsockname()[1]
            log.info("broker serves the Pulsar protocol on pulsar://%s:%d", self.host, self.port)
        if tls_port >= 0:
            context = server_ssl_context(self.frontend.settings)
            try:
                server = await asyncio.start_server(self._serve, self.host, tls_port, ssl=context)
            except OSError as exc:
                raise AddressInUseError.of("Pulsar's protocol over TLS", self.host, tls_port,
                                           "--pulsar-tls-port") from exc
            self._servers.append(server)
            self.tls_port = server.sockets[0].getsockname()[1]
            log.info("broker serves the Pulsar protocol on pulsar+ssl://%s:%d", self.host, self.tls_port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        limit = self.frontend.settings.max_connections_per_address

        def admit() -> HeraldError | None:
            # Counted once authenticated, as on the gRPC port: refused clients take no place.
            if limit and self._per_address[address] >= limit:
                return TooManyRequestsError(
                    f"the broker has reached its limit of {limit} connections from client address {address} "
                    "(max_connections_per_address): close idle connections and retry later")
            self._per_address[address] += 1
            return None

        connection = PulsarConnection(self.frontend, reader, writer, self._keepalive, admit)
        self._connections.add(connection)
        try:
            await connection.run()
        except Exception:
            log.exception("pulsar connection %s failed", address)
        finally:
            self._connections.discard(connection)
            if connection.admitted:
                self._per_address[address] -= 1
                if self._per_address[address] <= 0:
                    del self._per_address[address]

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for connection in list(self._connections):
            with contextlib.suppress(Exception):
                await connection.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
