"""Settings of the lookup service."""

from __future__ import annotations

from dataclasses import dataclass

from herald.common.config import check_metrics_port, check_server_limits
from herald.common.metrics_access import MetricsEndpointSettings
from herald.common.security import SecuritySettings

MIB = 1024 * 1024


@dataclass
class LookupSettings(SecuritySettings, MetricsEndpointSettings):
    metadata_url: str = "redis://127.0.0.1:6379/0"
    host: str = "127.0.0.1"
    port: int = 6650
    cluster: str = "standalone"
    # Brokers heartbeat this often (RocketMQ: 30 s); one silent for expiry_heartbeats of them expires.
    heartbeat_interval: float = 5.0
    expiry_heartbeats: int = 3
    # Requests larger than this are refused by gRPC with RESOURCE_EXHAUSTED (the server keeps serving).
    grpc_max_receive_message_bytes: int = 64 * MIB
    # Client connections (one TCP connection each, whatever its calls) from one client address: past
    # max_connections_per_address (0: no limit) a new connection's calls are refused with
    # RESOURCE_EXHAUSTED. While it is on, a connection with no call for connection_idle_timeout
    # seconds is closed and stops counting.
    max_connections_per_address: int = 0
    connection_idle_timeout: float = 300.0
    # Prometheus /metrics (herald.lookup.metrics): 0 picks a free port, -1 serves none (an
    # embedding process serves the registry itself).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9101

    def __post_init__(self) -> None:
        check_metrics_port(self.metrics_port)
        check_server_limits(self)
