"""Prometheus metrics are served at /metrics by the process's HTTP endpoint
(herald.common.http_endpoint, which also says how metrics are named). MetricsServer is that
endpoint's first name, kept for code that still uses it."""

from __future__ import annotations

from herald.common.http_endpoint import HttpEndpoint as MetricsServer

__all__ = ["MetricsServer"]
