"""The proxy's Prometheus metrics (herald.common.http.endpoint serves them): client connections, streams
relayed, bytes forwarded, lookups and what happened to upstream brokers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

TO_BROKER = "to_broker"
TO_CLIENT = "to_client"


class ProxyMetrics:
    """Every metric of one proxy, on `registry` (a fresh one unless an embedding process shares its own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.active_connections = Gauge(
            "herald_proxy_active_connections", "Authenticated client connections (peers) with a call in progress.",
            registry=r)
        self.connections = Counter(
            "herald_proxy_connections_total", "Client connections (peers) accepted.", registry=r)
        self.rejected_connections = Counter(
            "herald_proxy_rejected_connections_total",
            "Calls refused because their connection would have been one live connection more than "
            "max_connections or max_connections_per_address allow.",
            registry=r)
        self.active_streams = Gauge(
            "herald_proxy_active_streams", "Produce and consume streams being relayed.", ["kind"], registry=r)
        self.streams = Counter(
            "herald_proxy_streams_total", "Produce and consume streams opened by clients.", ["kind"], registry=r)
        self.forwarded_bytes = Counter(
            "herald_proxy_forwarded_bytes_total",
            "Bytes of messages relayed on broker calls, by direction (to_broker, to_client).",
            ["direction"], registry=r)
        self.forwarded_calls = Counter(
            "herald_proxy_forwarded_calls_total", "Unary calls forwarded, by service (lookup, broker, admin).",
            ["service"], registry=r)
        self.lookups = Counter(
            "herald_proxy_lookups_total", "Topic owner lookups made to the lookup service, by result (ok, error).",
            ["result"], registry=r)
        self.upstream_reconnects = Counter(
            "herald_proxy_upstream_reconnects_total",
            "Attempts made again on a fresh lookup after a broker said not owner or could not be reached.",
            ["kind"], registry=r)
        self.upstream_failures = Counter(
            "herald_proxy_upstream_failures_total",
            "Relayed streams ended for the client to reconnect because their broker failed, ended them or moved "
            "the topic.", ["kind"], registry=r)
        self.draining = Gauge("herald_proxy_draining", "1 while the proxy drains before it stops.", registry=r)
        # Every known label value has its series at 0 from the start, so that dashboards and alerts
        # see 0 on a healthy proxy rather than no data until the first event.
        for kind in ("produce", "consume"):
            self.active_streams.labels(kind)
            self.streams.labels(kind)
            self.upstream_failures.labels(kind)
        for kind in ("produce", "consume", "broker", "admin"):  # the streams', passthrough's calls
            self.upstream_reconnects.labels(kind)
        for direction in (TO_BROKER, TO_CLIENT):
            self.forwarded_bytes.labels(direction)
        for result in ("ok", "error"):
            self.lookups.labels(result)
