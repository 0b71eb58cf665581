"""The dlq-worker's metrics (prometheus-client, served at /metrics by herald.common.http.endpoint)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from herald.api.v1 import common_pb2
from herald.common import errors


class DlqMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.letters_moved = Counter(
            "herald_dlq_letters_moved_total",
            "Dead letters published to their dead-letter topic (or found there already) and reported moved.",
            registry=registry)
        self.messages_moved = Counter(
            "herald_dlq_messages_moved_total", "Messages inside the dead letters moved.", registry=registry)
        self.move_failures = Counter(
            "herald_dlq_move_failures_total",
            "Dead letters that could not be published, by error; each is handed back to its broker and tried "
            "again later.", ["error"], registry=registry)
        self.moves_retried = Counter(
            "herald_dlq_moves_retried_total",
            "Dead letters taken again after a failed move of theirs.", registry=registry)
        self.duplicates = Counter(
            "herald_dlq_duplicates_total",
            "Dead letters the dead-letter topic held already (an earlier move that was not reported moved): "
            "recognised by dedup, not stored again.", registry=registry)
        self.streams_connected = Gauge(
            "herald_dlq_broker_streams_connected", "Brokers whose dead letters this worker is taking now.",
            registry=registry)
        self.moves_in_flight = Gauge(
            "herald_dlq_moves_in_flight", "Dead letters being published now.", registry=registry)
        self.letters_parked = Gauge(
            "herald_dlq_letters_parked", "Failed dead letters waiting out their retry delay before being handed "
            "back.", registry=registry)
        self.move_seconds = Histogram(
            "herald_dlq_move_duration_seconds", "Time to publish one dead letter (successful moves).",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=registry)
        # The failures a healthy cluster meets first (a broker restarting, a slow one) have their
        # series at 0 from the start: dashboards show 0, not "No data", until one happens.
        for error in ("UNAVAILABLE", "TIMEOUT"):
            self.move_failures.labels(error)

    def failed(self, error: errors.HeraldError) -> None:
        self.move_failures.labels(error_label(error)).inc()


def error_label(error: errors.HeraldError) -> str:
    """A bounded label for an error: its wire code's name, or what kind of client-side failure."""
    if isinstance(error, errors.ConnectionError_):
        return "UNAVAILABLE"
    if isinstance(error, errors.HeraldTimeoutError):
        return "TIMEOUT"
    try:
        return common_pb2.ErrorCode.Name(error.code)  # type: ignore[arg-type]
    except ValueError:
        return "UNKNOWN_ERROR"
