"""The process's HTTP endpoint, on a port of its own: /metrics (Prometheus), /healthz (alive: the
event loop still runs) and /readyz (ready: every check of every service the endpoint watches
passes), for scrapers and the chart's probes. Services in one process (standalone) share one
endpoint. Metrics: every service defines its metrics (names prefixed `herald_`, counters ending
`_total`, durations in seconds) on a registry; prometheus-client does the exposition. /metrics may
ask for a bearer token and the port may serve HTTPS (herald.common.http.metrics_access)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import json
import logging
import socket
import ssl
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer

from herald.common.errors import AddressInUseError, InvalidArgumentError
from herald.common.http.metrics_access import UNAUTHORIZED, MetricsAccess
from herald.common.security.settings import MetricsEndpointSettings
from herald.common.transport.health import LoopHeartbeat, ServiceHealth

log = logging.getLogger(__name__)

# No `<counter>_created` series: they double every counter's series for a timestamp dashboards
# never show.
disable_created_metrics()  # type: ignore[no-untyped-call]

READY_WAIT_MARGIN = 1.0  # seconds /readyz waits for the checks beyond their own timeout
# A peer that sends nothing (or stalls its TLS handshake) holds its request thread this long at most.
REQUEST_TIMEOUT = 30.0

# Registries already given the process's own figures (process_*, python_gc_*, python_info): a
# registry served twice must not register them twice.
_with_process_metrics: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def add_process_metrics(registry: CollectorRegistry) -> None:
    """The standard process figures (CPU, memory, open files, GC, Python version) on `registry`,
    which each service makes fresh: the default registry that has them is not served."""
    if registry in _with_process_metrics:
        return
    _with_process_metrics.add(registry)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT

    def setup(self) -> None:
        super().setup()
        # The TLS handshake happens here, on the request's own thread: done on accept, one peer
        # that never finishes it would stall every scrape and probe behind it.
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds are not worth a log line."""


class HttpEndpoint:
    """/metrics of `registry`, /healthz and /readyz over HTTP on host:port (port 0: a free port,
    see `.port`), served by its own threads. watch() a service's health to make it part of
    readiness. start() (on the event loop it reports on, if any) / stop() are symmetrical; stop()
    is idempotent."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0, *,
                 stall_timeout: float = 10.0, heartbeat_interval: float = 1.0,
                 access: MetricsEndpointSettings | None = None) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        # A bearer token for /metrics and TLS on the port, as `access` says (default: neither).
        self.access = MetricsAccess(access or MetricsEndpointSettings())
        self.heartbeat = LoopHeartbeat(heartbeat_interval, stall_timeout)
        self._watched: list[ServiceHealth] = []
        add_process_metrics(registry)
        self._metrics_app = make_wsgi_app(registry)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def scheme(self) -> str:
        return "https" if self.access.ssl_context is not None else "http"

    @property
    def url(self) -> str:
        """scheme://host:port, to which /metrics, /healthz and /readyz are added."""
        return f"{self.scheme}://{self.address}"

    def watch(self, health: ServiceHealth) -> None:
        """Count `health`'s checks in /readyz (the process is ready when all its services are)."""
        if health not in self._watched:
            self._watched.append(health)

    def start_or_explain(self, service: str) -> None:
        """start(), or an error saying which setting to change: AddressInUseError when another process
        holds the port (the operation failed), InvalidArgumentError for an address that cannot be."""
        try:
            self.start()
        except OSError as exc:
            message = (f"{service} cannot serve metrics on {self.host}:{self.port} ({exc}): set metrics_port to a "
                       "free port, 0 for any free port, or -1 for none")
            if exc.errno == errno.EADDRINUSE:
                raise AddressInUseError(message) from None
            raise InvalidArgumentError(message) from None

    def start(self) -> None:
        if self._server is not None:
            return
        family, host = _best_family(self.host, self.port)

        class Server(ThreadingWSGIServer):
            address_family = family

            def handle_error(self, request: Any, client_address: Any) -> None:
                """A peer that failed its TLS handshake or went silent: its own business, not a traceback."""
                log.debug("HTTP endpoint: request from %s failed", client_address, exc_info=True)

        server = make_server(host, self.port, self._app, Server, handler_class=_QuietHandler)
        context = self.access.ssl_context
        if context is not None:
            server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=server.serve_forever, name="http-endpoint", daemon=True)
        self._thread.start()
        self._server = server
        self.port = server.server_port
        # Started outside an event loop (a tool, a test): only the HTTP threads answer for liveness.
        with contextlib.suppress(RuntimeError):
            self.heartbeat.start(asyncio.get_running_loop())
        log.info("metrics and health served on %s (/metrics%s, /healthz, /readyz)", self.url,
                 " with a bearer token" if self.access.token_required else "")

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        self.heartbeat.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    # ---- the HTTP side (its own threads) ---------------------------------------------------

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            ok, body = self.liveness()
        elif path == "/readyz":
            ok, body = self.readiness()
        else:
            # Every other path is /metrics (as prometheus-client serves it): only the probes are open.
            refusal = self.access.check(environ.get("HTTP_AUTHORIZATION"))
            if refusal is None:
                return self._metrics_app(environ, start_response)  # type: ignore[no-any-return]
            text = (refusal.reason + "\n").encode()
            headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(text))),
                       ("Cache-Control", "no-store")]
            if refusal.status == UNAUTHORIZED:
                headers.append(("WWW-Authenticate", 'Bearer realm="herald-metrics"'))
            start_response(refusal.status, headers)
            return [text]
        data = json.dumps(body).encode()
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                        ("Cache-Control", "no-store")])
        return [data]

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        problem = self.heartbeat.problem()
        return (True, {"alive": True}) if problem is None else (False, {"alive": False, "reason": problem})

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Every watched service's checks, run on its event loop (all services at once), each
        named `<service>/<check>`: {"ok": true} or {"ok": false, "reason": "..."}."""
        pending = [(health, health.check_threadsafe()) for health in self._watched]
        wait = max((health.check_timeout for health in self._watched), default=0.0) + READY_WAIT_MARGIN
        concurrent.futures.wait([future for _, future in pending], timeout=wait)
        checks: dict[str, dict[str, Any]] = {}
        for health, future in pending:
            results: dict[str, str | None]
            if not future.done():
                future.cancel()
                results = {"event-loop": f"did not run the checks within {wait:g}s: the event loop is stalled"}
            elif future.cancelled() or future.exception() is not None:
                results = {"checks": f"could not run: {future.exception() if not future.cancelled() else 'cancelled'}"}
            else:
                results = future.result()
            for name, reason in results.items():
                checks[f"{health.service}/{name}"] = {"ok": True} if reason is None else {"ok": False,
                                                                                           "reason": reason}
        ready = all(check["ok"] for check in checks.values())
        return ready, {"ready": ready, "checks": checks}


def _best_family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """The address family to bind host with (an IPv6 address needs AF_INET6), as http.server does."""
    family, _, _, _, address = next(iter(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                            flags=socket.AI_PASSIVE)))
    return family, str(address[0])


def serve_endpoint(service: str, registry: CollectorRegistry, host: str, port: int,
                   health: ServiceHealth, access: MetricsEndpointSettings | None = None) -> HttpEndpoint | None:
    """A service process's endpoint, started and watching `health`; None when port is -1 (none)."""
    if port < 0:
        return None
    endpoint = HttpEndpoint(registry, host, port, access=access)
    endpoint.watch(health)
    endpoint.start_or_explain(service)
    return endpoint
