"""Who a Pulsar connection is: its CONNECT's credentials, checked once (and again when a token
refreshes), as the gRPC front end checks a call's. Token authentication is Pulsar's: method "token",
the JWT as the auth data (the official clients' AuthenticationToken), the same tokens Herald issues.
With tls_client_auth a client certificate's common name is the role of a connection without a token.
A proxy authenticates as itself and names the client it connects for (original_principal), which is
taken only from proxy roles, as Pulsar's brokers do."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.errors import AuthenticationError, AuthorizationError
from herald.common.security.settings import SecuritySettings
from herald.common.security.tokens import TokenVerifier

TOKEN_METHOD = "token"
_NO_METHOD = ("", "none")


@dataclass(frozen=True, slots=True)
class Identity:
    """The role a connection acts for (None: authentication is off) and when its credentials expire
    (unix seconds; None: never)."""

    role: str | None
    expires: float | None = None
    token: bool = False  # the credentials were a token (they can be refreshed with AUTH_CHALLENGE)


class ConnectAuthenticator:
    def __init__(self, settings: SecuritySettings) -> None:
        self.enabled = settings.authentication_enabled
        self._verifier = TokenVerifier.from_files(
            settings.token_secret_key_file, settings.token_public_key_file, settings.token_audience,
        ) if self.enabled and (settings.token_secret_key_file or settings.token_public_key_file) else None
        self._tls_client_auth = settings.tls_client_auth
        self._forwarders = frozenset({*settings.proxy_roles, *settings.broker_roles})

    def connect(self, connect: pulsar.CommandConnect, peer_certificate: dict[str, object] | None) -> Identity:
        """The identity a CONNECT establishes; AuthenticationError / AuthorizationError saying why not."""
        if not self.enabled:
            return Identity(None)
        identity = self._credentials(connect.auth_method_name, connect.auth_data, peer_certificate)
        original = connect.original_principal
        if not original or original == identity.role:
            return identity
        if identity.role not in self._forwarders:
            raise AuthorizationError(
                f"role {identity.role!r} may not connect for another principal (original_principal): only the "
                "proxy roles may (proxy_roles)")
        return Identity(original, identity.expires, identity.token)

    def refresh(self, response: pulsar.CommandAuthResponse, current: Identity) -> Identity:
        """The identity an AUTH_RESPONSE renews: the same role, new credentials."""
        data = response.response
        renewed = self._credentials(data.auth_method_name, data.auth_data, None)
        if current.role is not None and renewed.role != current.role and current.token:
            raise AuthenticationError(
                f"the refreshed token names role {renewed.role!r}, not the connection's {current.role!r}")
        return Identity(current.role, renewed.expires, renewed.token)

    def _credentials(self, method: str, data: bytes, peer_certificate: dict[str, object] | None) -> Identity:
        if method == TOKEN_METHOD and data:
            if self._verifier is None:
                raise AuthenticationError("this server takes no tokens: authenticate with a client certificate")
            token = data.decode("utf-8", "replace").strip()
            role = self._verifier.role(token)
            return Identity(role, self._verifier.expiry(token), token=True)
        if method not in _NO_METHOD and method != TOKEN_METHOD:
            raise AuthenticationError(f"authentication method {method!r} is not supported: use token")
        name = _common_name(peer_certificate) if self._tls_client_auth else None
        if name:
            return Identity(name)
        raise AuthenticationError("authentication is required: no token was given (configure the client "
                                  "with AuthenticationToken)")


def _common_name(certificate: dict[str, object] | None) -> str | None:
    """The common name of a verified client certificate (ssl's getpeercert() form)."""
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):  # type: ignore[attr-defined]
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def peer_certificate(transport_ssl: ssl.SSLObject | None) -> dict[str, object] | None:
    if transport_ssl is None:
        return None
    certificate = transport_ssl.getpeercert()
    return dict(certificate) if certificate else None
