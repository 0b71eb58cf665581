"""The metrics endpoint: a registry's metrics over HTTP at /metrics, on a free port, stopped cleanly."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from herald.common.http.endpoint import HttpEndpoint
from prometheus_client import CollectorRegistry, Counter


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


def test_metrics_are_served_in_the_exposition_format_without_created_series() -> None:
    registry = CollectorRegistry()
    moved = Counter("herald_test_things_total", "Things.", ["kind"], registry=registry)
    moved.labels("a").inc(3)
    server = HttpEndpoint(registry)
    server.start()
    try:
        assert server.port > 0
        text = scrape(server.address)
        assert '# TYPE herald_test_things_total counter' in text
        assert 'herald_test_things_total{kind="a"} 3.0' in text
        assert "_created" not in text
    finally:
        server.stop()
        server.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        scrape(server.address)
