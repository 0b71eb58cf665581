"""The dlq-worker's settings: one dataclass, loaded like every service's (defaults < the [dlq-worker]
table of a TOML file < HERALD_DLQ_WORKER_<FIELD> < flags) by `load_settings`."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herald.common.config import load_settings as _load
from herald.common.errors import InvalidArgumentError
from herald.common.security.settings import MetricsEndpointSettings

SECTION = "dlq-worker"  # the TOML table; variables are HERALD_DLQ_WORKER_<FIELD>


@dataclass
class DlqWorkerSettings(MetricsEndpointSettings):
    # The cluster: a service URL naming lookup (herald://host:port, herald+ssl:// for TLS). Brokers
    # are found through it (GetClusterInfo) and reached at the addresses lookup gives.
    service_url: str = "herald://127.0.0.1:6660"
    # Shown in logs (empty: host name and process id).
    worker_name: str = ""
    # /metrics over HTTP: port 0 takes a free port (printed at start), -1 serves none (a bearer
    # token and TLS on it: MetricsEndpointSettings).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9105
    # Letters taken from each broker at once (flow permits): the moves in flight per broker.
    flow_permits: int = 100
    # How often lookup is asked for the live brokers (new ones get a stream, gone ones lose theirs).
    broker_refresh_interval: float = 10.0
    # Every network wait: lookups, a letter's publish (register, send, receipts), admin calls.
    operation_timeout: float = 30.0
    connection_timeout: float = 10.0
    # A letter that could not be moved is handed back to its broker after retry_delay seconds,
    # doubling per failure of that letter up to retry_delay_max; meanwhile it is lent to this
    # worker but takes no flow permit. At most max_parked letters per broker wait so; past that
    # they keep their permit until handed back.
    retry_delay: float = 1.0
    retry_delay_max: float = 60.0
    max_parked: int = 10_000
    # Made on each dead-letter topic (at its earliest message) before the first letter is
    # published to it, so dead letters stay until `herald admin dlq replay` takes them (retention
    # would remove messages no subscription holds). Empty: none is made. With authorization on it is
    # made as the letters' role (dlq.acting), so only where that role may consume.
    initial_subscription: str = "herald-dlq-replay"
    # The largest message a letter's entry may decompress to (with its framing) for the worker to
    # unpack it; one that claims more, or inflates past its claim (a decompression bomb), is moved
    # as it is, never inflated. Raise it to the largest max_message_size of the topics served.
    max_message_size: int = 5 * 1024 * 1024
    # Security: the worker's token (a file holding a JWT, re-read when it changes; its role must be
    # in the brokers' and lookup's dlq_worker_roles) and, for a herald+ssl:// service_url, the CA
    # bundle that signs the services' certificates (empty: the system's). tls_cert_file /
    # tls_key_file: the client certificate it presents, which services with tls_require_client_cert ask of it.
    auth_token_file: str = ""
    tls_trust_certs_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""

    def __post_init__(self) -> None:
        for name in ("flow_permits", "max_parked", "max_message_size"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"dlq-worker setting {name} must be at least 1, got {getattr(self, name)}")
        for name in ("broker_refresh_interval", "operation_timeout", "connection_timeout", "retry_delay"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(
                    f"dlq-worker setting {name} must be a positive number of seconds, got {getattr(self, name)}")
        if self.retry_delay_max < self.retry_delay:
            raise InvalidArgumentError(
                f"dlq-worker setting retry_delay_max ({self.retry_delay_max}) must be at least retry_delay "
                f"({self.retry_delay})")
        if self.metrics_port < -1:
            raise InvalidArgumentError(
                f"dlq-worker setting metrics_port must be a port, 0 (any free port) or -1 (none), "
                f"got {self.metrics_port}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise InvalidArgumentError("dlq-worker settings tls_cert_file and tls_key_file go together: give both "
                                       "(the client certificate and its key) or neither")
        if self.tls_cert_file and not self.service_url.startswith("herald+ssl://"):
            raise InvalidArgumentError(f"dlq-worker setting tls_cert_file needs a herald+ssl:// service_url, "
                                       f"got {self.service_url!r}: certificates travel in TLS")
        if not self.worker_name:
            self.worker_name = f"{socket.gethostname()}-{os.getpid()}"


def load_settings(
    config_file: str | Path | None = None, overrides: dict[str, Any] | None = None,
) -> DlqWorkerSettings:
    """The worker's settings from defaults, `config_file`'s [dlq-worker] table, HERALD_DLQ_WORKER_*
    variables and `overrides` (flags; None values ignored)."""
    return _load(DlqWorkerSettings, SECTION, config_file=config_file, overrides=overrides)
