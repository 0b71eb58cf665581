"""What a service builds from its SecuritySettings (herald.common.security.settings): its server's
credentials and authentication interceptor, and the `Dialer` for its calls to other services."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import grpc

from herald.api.v1 import admin_pb2, broker_pb2, lookup_pb2
from herald.common.errors import InvalidArgumentError
from herald.common.security.authentication import AuthenticationInterceptor, Authenticator, forwarded_principal
from herald.common.security.credentials import AuthenticationToken, call_interceptors
from herald.common.security.settings import SecuritySettings
from herald.common.security.tokens import TokenVerifier
from herald.common.transport.tls import Dialer, server_credentials


def _method(module: Any, service: str, method: str) -> str:
    """A gRPC method's full name (`/herald.v1.Service/Method`); KeyError for one the contract lacks."""
    described = module.DESCRIPTOR.services_by_name[service]
    return f"/{described.full_name}/{described.methods_by_name[method].name}"


# What a dlq-worker does acting for the role a dead letter moves for (herald.dlq.acting): find the
# brokers, look the dead-letter topic up, publish to it, make its initial subscription. Only in
# these may a dlq_worker_roles call name an original principal: a worker's token must not be
# every role's.
DLQ_WORKER_ACTING_METHODS = frozenset({
    _method(lookup_pb2, "LookupService", "GetClusterInfo"),
    _method(lookup_pb2, "LookupService", "LookupTopic"),
    _method(lookup_pb2, "LookupService", "GetPartitionedTopicMetadata"),
    _method(broker_pb2, "BrokerService", "Produce"),
    _method(admin_pb2, "AdminService", "CreateSubscription"),
})


class ServiceSecurity:
    """What one service runs with, built (and checked: unreadable files fail here) at start."""

    def __init__(self, settings: SecuritySettings, *, forwarder_roles: Collection[str] = (),
                 allowed_roles: Collection[str] | None = None) -> None:
        self.settings = settings
        self.server_credentials: grpc.ServerCredentials | None = None
        if settings.tls_cert_file or settings.tls_key_file:
            self.server_credentials = server_credentials(
                settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file, settings.tls_require_client_cert)
        if settings.tls_client_auth and not (settings.tls_require_client_cert and self.server_credentials):
            raise InvalidArgumentError("tls_client_auth needs TLS with tls_require_client_cert: gRPC asks clients for "
                                       "a certificate only when it requires one")
        self.interceptors: list[Any] = []
        # Who a call is from, for front ends that authenticate their own requests (the broker's REST API).
        self.authenticator: Authenticator | None = None
        if settings.authentication_enabled:
            verifier = None
            if settings.token_secret_key_file or settings.token_public_key_file:
                verifier = TokenVerifier.from_files(settings.token_secret_key_file, settings.token_public_key_file,
                                                    settings.token_audience)
            authenticator = Authenticator(verifier, tls_client_auth=settings.tls_client_auth,
                                          forwarder_roles={*settings.proxy_roles, *settings.broker_roles,
                                                           *forwarder_roles},
                                          allowed_roles=allowed_roles, acting_roles=settings.dlq_worker_roles,
                                          acting_methods=DLQ_WORKER_ACTING_METHODS)
            self.interceptors.append(AuthenticationInterceptor(authenticator))
            self.authenticator = authenticator
        self.token = AuthenticationToken.from_file(settings.auth_token_file) if settings.auth_token_file else None
        self.dialer = self._dialer(forward_principal=False)
        # For calls made on a client's behalf (proxy → lookup / brokers, broker → broker admin
        # forwarding): they also name the principal of the call being handled.
        self.forwarding_dialer = self._dialer(forward_principal=True)

    def _dialer(self, *, forward_principal: bool) -> Dialer:
        settings = self.settings
        token = self.token

        def call_metadata() -> list[tuple[str, str]]:
            pairs = token.metadata() if token is not None else []
            if forward_principal:
                pairs.extend(forwarded_principal())
            return pairs

        mutual = settings.tls_enabled and bool(settings.tls_ca_file)
        return Dialer(
            ca_file=settings.tls_ca_file if settings.tls_enabled else "",
            cert_file=settings.tls_cert_file if mutual else "",
            key_file=settings.tls_key_file if mutual else "",
            # No interceptor unless there is something to add: grpc.aio drives an intercepted stream
            # through a generator of its own that breaks when a relay cancels the stream.
            interceptors=call_interceptors(call_metadata)
            if token is not None or (forward_principal and settings.authentication_enabled) else (),
            server_name=settings.tls_server_name, tls=settings.tls_enabled,
        )
