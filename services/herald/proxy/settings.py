"""Settings of the proxy: one dataclass with the defaults it runs with (loading from config file,
environment HERALD_PROXY_* and flags is the CLI's, through herald.common.config.load_settings)."""

from __future__ import annotations

from dataclasses import dataclass

from herald.common.config import check_server_limits
from herald.common.errors import InvalidArgumentError
from herald.common.limits import DATA_SERVER_MAX_RECEIVE_BYTES, DEFAULT_MAX_STREAMS_PER_CONNECTION
from herald.common.security.settings import MetricsEndpointSettings, SecuritySettings


@dataclass
class ProxySettings(SecuritySettings, MetricsEndpointSettings):
    # Where the proxy listens, and the address it tells clients to dial for every topic (empty:
    # host:port as bound; set it behind a Service or when binding 0.0.0.0).
    host: str = "127.0.0.1"
    port: int = 6660
    advertised_address: str = ""
    # host:port of the lookup service: where topics' owners, partitions and live brokers come from.
    lookup_address: str = ""
    # Pulsar's binary protocol (pulsar://) on this port, for the official Pulsar clients (-1: not
    # served; 0: a free port): lookups are answered through a broker, then each client connection
    # to a broker is spliced to the broker it names (herald.proxy.pulsar). A connection that sends
    # no CONNECT within pulsar_connect_timeout seconds is closed.
    pulsar_port: int = -1
    pulsar_connect_timeout: float = 10.0

    # Client connections: a connection is one client peer (one TCP connection). Over
    # max_connections (0: no limit) a new connection's calls are refused with RESOURCE_EXHAUSTED.
    # Only live, authenticated connections count: one with a call in progress that passed
    # authentication. A connection with no call in progress for connection_idle_timeout seconds is
    # closed by the proxy.
    max_connections: int = 0
    connection_idle_timeout: float = 300.0
    # The same per client address (0: no limit): clients sharing an address share it.
    max_connections_per_address: int = 0
    # Requests larger than this are refused by gRPC with RESOURCE_EXHAUSTED (the proxy keeps serving),
    # from their length prefix, before they are read: a broker's max_message_size message and its
    # framing fit (raise both together). Requests of methods other than Produce are refused past 1 MiB.
    grpc_max_receive_message_bytes: int = DATA_SERVER_MAX_RECEIVE_BYTES
    # Streams (producers, consumers, calls in progress) one client connection holds at once
    # (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): past it a client's new stream waits in the client
    # until one ends. The proxy's own connections to a broker carry all its clients' streams to it:
    # keep their number per connection (see connections_per_broker) under the broker's limit.
    max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION

    # On SIGTERM (stop): new calls are refused, produce streams take no new sends and end once
    # their receipts are back, consume streams end at once; whatever is still open after
    # drain_timeout seconds is ended with a retryable error.
    drain_timeout: float = 20.0

    # Lookups, registrations with the owner and forwarded calls are retried (looking up again)
    # within this many seconds before the client gets the last error.
    operation_timeout: float = 30.0
    # Channels (TCP connections) to each broker, used in turn by the streams relayed to it.
    connections_per_broker: int = 1
    # Pings on channels to brokers and lookup this often, so a paused or unreachable broker is
    # noticed (a SIGKILLed one is noticed at once: its socket closes).
    broker_keepalive: float = 10.0

    # The /metrics endpoint: 0 picks a free port, -1 serves none (an embedding process serves the
    # registry itself).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9104

    def __post_init__(self) -> None:
        if self.max_connections < 0:
            raise InvalidArgumentError(
                f"max_connections must be 0 (no limit) or a positive number, got {self.max_connections}")
        check_server_limits(self)
        if self.connections_per_broker < 1:
            raise InvalidArgumentError(f"connections_per_broker must be at least 1, got {self.connections_per_broker}")
        if self.metrics_port < -1:
            raise InvalidArgumentError(
                f"metrics_port must be a port, 0 (a free one) or -1 (no metrics server), got {self.metrics_port}")
        if self.pulsar_port < -1:
            raise InvalidArgumentError(
                f"pulsar_port must be a port, 0 (a free one) or -1 (no Pulsar listener), got {self.pulsar_port}")
        for name in ("connection_idle_timeout", "pulsar_connect_timeout", "drain_timeout", "operation_timeout",
                     "broker_keepalive"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(f"{name} must be a positive number of seconds, got {getattr(self, name)!r}")
