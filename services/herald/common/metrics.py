"""Prometheus metrics: every service defines its metrics (names prefixed `herald_`, counters ending
`_total`, durations in seconds) on a registry, and serves them over HTTP at /metrics on a port of
its own with MetricsServer. Services in one process (standalone) may share one registry and one
server. prometheus-client does the exposition; this module only owns the server's life cycle."""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, disable_created_metrics, start_http_server

log = logging.getLogger(__name__)

# No `<counter>_created` series: they double every counter's series for a timestamp dashboards
# never show.
disable_created_metrics()  # type: ignore[no-untyped-call]


class MetricsServer:
    """/metrics of `registry` over HTTP on host:port (port 0: a free port, see `.port`), served by
    prometheus-client's own thread. start() / stop() are symmetrical; stop() is idempotent."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        if self._server is not None:
            return
        self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        self.port = self._server.server_port
        log.info("metrics served on http://%s/metrics", self.address)

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)
