"""The operator's settings: one dataclass, loaded like every Herald service's (defaults < the
[operator] table of a TOML file < HERALD_OPERATOR_<FIELD> < flags); HERALD_ADMIN_URL is also read
for the admin URL, as the `herald admin` command does."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herald.common.config import load_settings as _load
from herald.common.errors import InvalidArgumentError

SECTION = "operator"


@dataclass
class OperatorSettings:
    # Herald's admin API: a service URL (herald://lookup:6660, which names a live broker) or a
    # broker's host:port.
    admin_url: str = "herald://127.0.0.1:6660"
    # Every admin call's deadline.
    admin_timeout: float = 10.0
    # Security (docs/security.md): a file holding the operator's token (a super-user's, or an admin
    # role of every tenant it manages), re-read when it changes; for a herald+ssl:// admin_url, the
    # CA bundle that signs the services' certificates (empty: the system's). tls_cert_file /
    # tls_key_file: the client certificate it presents, which services with tls_require_client_cert
    # ask of it.
    auth_token_file: str = ""
    tls_trust_certs_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # How often each resource is reconciled again and its status refreshed from the topic's stats
    # (drift made through the admin API is reverted then).
    resync_interval: float = 30.0
    # After a temporary failure (admin API unreachable, a topic not ready) a handler is retried
    # after this many seconds.
    retry_delay: float = 10.0
    # Kubernetes namespaces watched; empty: every namespace (cluster-wide).
    namespaces: list[str] = field(default_factory=list)
    # kopf's scanning: follow namespaces and CRDs appearing after start (needs RBAC to list and
    # watch namespaces and customresourcedefinitions); off, both are discovered once at start.
    scanning: bool = True
    # kopf's liveness endpoint (http://health_host:health_port/healthz), which the chart's liveness
    # and readiness probes ask; -1: none. A pod's probes need health_host 0.0.0.0.
    health_host: str = "127.0.0.1"
    health_port: int = 8080
    # Prometheus metrics (reconcile counts, errors, durations per kind) on /metrics; 0: any free
    # port, -1: none.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9108
    # Leader election between replicas (kopf peering): the KopfPeering (with namespaces) or
    # ClusterKopfPeering object the replicas share; the chart installs its CRDs and the object.
    # Empty: kopf's own detection of a peering object named "default" (standalone without one).
    # The oldest replica is active, the others wait until it stops being seen.
    peering_name: str = ""

    def __post_init__(self) -> None:
        for name in ("admin_timeout", "resync_interval", "retry_delay"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(
                    f"operator setting {name} must be a positive number of seconds, got {getattr(self, name)}")
        if not 1 <= self.health_port <= 65535 and self.health_port != -1:
            raise InvalidArgumentError(f"operator setting health_port must be a port (1-65535) or -1 for none, "
                                       f"got {self.health_port}")
        if not 0 <= self.metrics_port <= 65535 and self.metrics_port != -1:
            raise InvalidArgumentError(f"operator setting metrics_port must be a port (0-65535; 0 any free) or -1 "
                                       f"for none, got {self.metrics_port}")
        if not self.admin_url:
            raise InvalidArgumentError("operator setting admin_url is empty: give herald://host:port or host:port")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise InvalidArgumentError("operator settings tls_cert_file and tls_key_file go together: give both "
                                       "(the client certificate and its key) or neither")


def load_settings(
    config_file: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> OperatorSettings:
    """Defaults, `config_file`'s [operator] table, HERALD_ADMIN_URL, HERALD_OPERATOR_* variables and
    `overrides` (flags; None values ignored), in rising order."""
    environ = os.environ if environ is None else environ
    env = dict(environ)
    if "HERALD_ADMIN_URL" in env and "HERALD_OPERATOR_ADMIN_URL" not in env:
        env["HERALD_OPERATOR_ADMIN_URL"] = env["HERALD_ADMIN_URL"]
    return _load(OperatorSettings, SECTION, config_file=config_file, environ=env, overrides=overrides)
