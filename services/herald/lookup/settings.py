"""Settings of the lookup service."""

from __future__ import annotations

from dataclasses import dataclass

from herald.common.config import check_metrics_port


@dataclass
class LookupSettings:
    metadata_url: str = "redis://127.0.0.1:6379/0"
    host: str = "127.0.0.1"
    port: int = 6650
    cluster: str = "standalone"
    # Brokers heartbeat this often (RocketMQ: 30 s); one silent for expiry_heartbeats of them expires.
    heartbeat_interval: float = 5.0
    expiry_heartbeats: int = 3
    # Prometheus /metrics (herald.lookup.metrics): 0 picks a free port, -1 serves none (an
    # embedding process serves the registry itself).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9101

    def __post_init__(self) -> None:
        check_metrics_port(self.metrics_port)
