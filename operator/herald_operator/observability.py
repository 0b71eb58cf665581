"""What the operator tells Kubernetes and Prometheus about itself: reconcile counts, errors and
durations per kind on a prometheus_client registry of its own (one per operator, so that two in a
process do not mix), served on /metrics by prometheus_client's HTTP server; and the probe kopf's
liveness endpoint answers (`herald operator --health-port`).

Metrics (docs/operator.md "Metrics"):
- herald_operator_reconciles_total{kind, result}: passes by result: applied (Herald reconciled),
  conflict (another resource owns the object: not applied), paused (the pause annotation),
  invalid (a spec refused), error (Herald refused or did not answer);
- herald_operator_reconcile_errors_total{kind}: passes that raised (retried by kopf);
- herald_operator_reconcile_duration_seconds{kind}: a pass's wall time.
Every known label value is set to 0 at start, so that the series exist before their first event.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from threading import Thread
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

KINDS = ("topic", "subscription")
RESULTS = ("applied", "conflict", "paused", "invalid", "error")


@dataclass
class Outcome:
    """What a pass came to; the handler sets `result` when it is not a plain apply."""

    result: str = "applied"


@dataclass
class OperatorMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.reconciles = Counter("herald_operator_reconciles", "Reconcile passes by kind and result",
                                  ["kind", "result"], registry=self.registry)
        self.errors = Counter("herald_operator_reconcile_errors", "Reconcile passes that raised (kopf retries them)",
                              ["kind"], registry=self.registry)
        self.durations = Histogram("herald_operator_reconcile_duration_seconds", "Wall time of a reconcile pass",
                                   ["kind"], registry=self.registry)
        for kind in KINDS:
            self.errors.labels(kind)
            self.durations.labels(kind)
            for result in RESULTS:
                self.reconciles.labels(kind, result)

    @contextlib.contextmanager
    def reconciling(self, kind: str) -> Iterator[Outcome]:
        outcome = Outcome()
        started = time.monotonic()
        try:
            yield outcome
        except BaseException:
            self.errors.labels(kind).inc()
            if outcome.result == "applied":
                outcome.result = "error"
            raise
        finally:
            self.durations.labels(kind).observe(time.monotonic() - started)
            self.reconciles.labels(kind, outcome.result).inc()


class MetricsServer:
    """prometheus_client's HTTP server on a thread; port 0 picks a free one (see `port`)."""

    def __init__(self, metrics: OperatorMetrics, host: str, port: int) -> None:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
        self._server: Any = server
        self._thread: Thread = thread
        self.port: int = int(server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
