"""The security settings every service shares (TLS, authentication, the service's own credentials):
each service's settings dataclass derives from `SecuritySettings`, so the names are the same
everywhere (HERALD_<SERVICE>_TLS_CERT_FILE, ...). Everything is off by default. Plain data: what a
service builds from them is herald.common.security.service's."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SecuritySettings:
    # TLS on this service's gRPC port: its certificate chain and key (PEM). tls_ca_file is the CA
    # that signs the cluster's certificates: trusted when this service dials the others (which it
    # does over TLS whenever tls_cert_file is set), and asked of clients' certificates;
    # tls_require_client_cert refuses clients without one (mutual TLS). tls_server_name: the name
    # the other services' certificates must carry when it is not the host dialled.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_ca_file: str = ""
    tls_require_client_cert: bool = False
    tls_server_name: str = ""
    # Authentication of every call (but grpc.health.v1): a JWT checked with the secret key (HS256)
    # or the public key (RS256), its audience when token_audience is set; with tls_client_auth a
    # client certificate's common name is the role of a call without a token.
    authentication_enabled: bool = False
    token_secret_key_file: str = ""
    token_public_key_file: str = ""
    token_audience: str = ""
    tls_client_auth: bool = False
    # This service's own token (a file holding a JWT, re-read when it changes), sent on its calls
    # to other services when they authenticate.
    auth_token_file: str = ""
    # Roles of proxies: their calls may name another principal (x-herald-original-principal), which
    # is then the one authorized (so may broker_roles' calls, and dlq_worker_roles' in the calls
    # that move a dead letter).
    proxy_roles: list[str] = field(default_factory=list)
    # Authorization (broker, lookup, storage; herald.metadata.authorization): superuser_roles may do
    # everything; broker_roles are the brokers' own (register with lookup, use storage nodes,
    # forward admin calls for a principal); dlq_worker_roles take dead letters from brokers and
    # publish them to their dead-letter topics acting for the role each letter names (the
    # subscriber's: x-herald-original-principal, taken from them in DLQ_WORKER_ACTING_METHODS only),
    # with no right of their own. Other roles get what tenants' admin_roles and the
    # produce / consume grants give them. With authentication on and authorization off, any
    # authenticated role may do anything.
    authorization_enabled: bool = False
    superuser_roles: list[str] = field(default_factory=list)
    broker_roles: list[str] = field(default_factory=list)
    dlq_worker_roles: list[str] = field(default_factory=list)

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert_file)


@dataclass
class MetricsEndpointSettings:
    # /metrics only answers a request carrying `Authorization: Bearer <the token>`, the token being
    # this file's contents (re-read when it changes, so it can be rotated); empty: anyone may read it.
    metrics_auth_token_file: str = ""
    # HTTPS on the metrics port (/metrics, /healthz and /readyz) with this certificate chain and key
    # (PEM); empty: plain HTTP. Without it a token crosses the network in clear text.
    metrics_tls_cert_file: str = ""
    metrics_tls_key_file: str = ""
