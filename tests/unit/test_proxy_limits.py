"""The proxy's connection counting and its settings: pure code, a clock of the test's own."""

from __future__ import annotations

import pytest
from herald.common.config import load_settings
from herald.common.errors import InvalidArgumentError, TooManyRequestsError
from herald.proxy.limits import ConnectionLimiter
from herald.proxy.metrics import ProxyMetrics
from herald.proxy.settings import ProxySettings

from tests.helpers import ManualClock


def limiter(max_connections: int, idle: float = 10.0) -> tuple[ConnectionLimiter, ProxyMetrics, ManualClock]:
    metrics, clock = ProxyMetrics(), ManualClock()
    return ConnectionLimiter(max_connections, idle, metrics, "proxy:6660", clock), metrics, clock


def value(metrics: ProxyMetrics, name: str) -> float:
    found = metrics.registry.get_sample_value(name)
    assert found is not None
    return found


def test_a_new_peer_over_the_limit_is_refused_with_the_limit_named_and_known_peers_are_not() -> None:
    limits, metrics, _ = limiter(2)
    limits.enter("ipv4:10.0.0.1:1000")
    limits.enter("ipv4:10.0.0.2:1000")
    with pytest.raises(TooManyRequestsError, match=r"proxy proxy:6660 has reached its limit of 2 client connections"):
        limits.enter("ipv4:10.0.0.3:1000")
    limits.enter("ipv4:10.0.0.1:1000")  # another call on a connection already counted
    assert limits.connections == 2
    assert value(metrics, "herald_proxy_active_connections") == 2
    assert value(metrics, "herald_proxy_connections_total") == 2
    assert value(metrics, "herald_proxy_rejected_connections_total") == 1


def test_a_peer_counts_while_it_has_calls_and_is_one_connection_across_them() -> None:
    limits, metrics, clock = limiter(1, idle=10.0)
    limits.enter("a")
    limits.enter("a")
    limits.leave("a")
    with pytest.raises(TooManyRequestsError):  # one call of a's still in progress
        limits.enter("b")
    limits.leave("a")
    assert value(metrics, "herald_proxy_active_connections") == 0
    limits.enter("b")  # a has no call in progress: b takes its place at once
    limits.leave("b")
    limits.enter("b")  # b's next call: the same connection, not a new one
    assert limits.connections == 1
    assert value(metrics, "herald_proxy_active_connections") == 1
    assert value(metrics, "herald_proxy_connections_total") == 2
    clock.now += 10
    limits.expire_idle()  # a, idle for the timeout, is forgotten: its next call opens a connection again
    limits.leave("b")
    limits.enter("a")
    assert value(metrics, "herald_proxy_connections_total") == 3


def test_no_limit_counts_but_refuses_nothing() -> None:
    limits, _, _ = limiter(0)
    for peer in range(100):
        limits.enter(f"ipv4:10.0.0.1:{peer}")
    assert limits.connections == 100


def test_proxy_settings_come_from_the_environment_and_are_checked() -> None:
    settings = load_settings(ProxySettings, "proxy", environ={
        "HERALD_PROXY_LOOKUP_ADDRESS": "lookup:6660", "HERALD_PROXY_MAX_CONNECTIONS": "500",
        "HERALD_PROXY_DRAIN_TIMEOUT": "5", "HERALD_PROXY_METRICS_PORT": "-1",
    })
    assert (settings.lookup_address, settings.max_connections, settings.drain_timeout, settings.metrics_port) == (
        "lookup:6660", 500, 5.0, -1)
    with pytest.raises(InvalidArgumentError, match="max_connections must be 0"):
        ProxySettings(max_connections=-1)
    with pytest.raises(InvalidArgumentError, match="drain_timeout must be a positive number"):
        ProxySettings(drain_timeout=0)
    with pytest.raises(InvalidArgumentError, match="metrics_port must be"):
        ProxySettings(metrics_port=-2)
    with pytest.raises(InvalidArgumentError, match="connections_per_broker must be at least 1"):
        ProxySettings(connections_per_broker=0)
