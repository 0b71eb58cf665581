"""Settings of the lookup service."""

from __future__ import annotations

from dataclasses import dataclass

from herald.common.config import check_metrics_port, check_server_limits
from herald.common.limits import DEFAULT_MAX_STREAMS_PER_CONNECTION
from herald.common.security.settings import MetricsEndpointSettings, SecuritySettings

MIB = 1024 * 1024


@dataclass
class LookupSettings(SecuritySettings, MetricsEndpointSettings):
    metadata_url: str = "redis://127.0.0.1:6379/0"
    host: str = "127.0.0.1"
    port: int = 6660
    cluster: str = "standalone"
    # Brokers heartbeat this often (RocketMQ: 30 s); one silent for expiry_heartbeats of them expires.
    heartbeat_interval: float = 5.0
    expiry_heartbeats: int = 3
    # Requests larger than this are refused by gRPC with RESOURCE_EXHAUSTED (the server keeps serving),
    # from their length prefix, before they are read. Lookups are tiny (every method but Heartbeat
    # is refused past 64 KiB); a broker's heartbeat names every topic it owns (4 MiB: some 40,000).
    grpc_max_receive_message_bytes: int = 4 * MIB
    # Streams (producers, consumers, calls in progress) one client connection holds at once
    # (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): past it a client's new stream waits in the client
    # until one ends. With grpc_max_receive_message_bytes it bounds the request bytes a connection
    # has in flight.
    max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION
    # Client connections (one TCP connection each, whatever its calls) from one client address: past
    # max_connections_per_address (0: no limit) a new connection's calls are refused with
    # RESOURCE_EXHAUSTED. Only live, authenticated connections count: one with a call in progress
    # that passed authentication. While it is on, a connection with no call for
    # connection_idle_timeout seconds is closed.
    max_connections_per_address: int = 0
    connection_idle_timeout: float = 300.0
    # Prometheus /metrics (herald.lookup.metrics): 0 picks a free port, -1 serves none (an
    # embedding process serves the registry itself).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9101

    def __post_init__(self) -> None:
        check_metrics_port(self.metrics_port)
        check_server_limits(self)
