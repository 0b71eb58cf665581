"""Who may read a process's /metrics: /metrics names every tenant's topics and subscriptions (the
broker's topic-level labels, on unless metrics_topic_level is off), so an operator may ask scrapers
for a bearer token and serve the endpoint over TLS. The probes (/healthz, /readyz) answer anyone:
Kubernetes' kubelet sends no credentials. Every service's settings derive from
`MetricsEndpointSettings`; herald.common.http.endpoint applies what `MetricsAccess` builds."""

from __future__ import annotations

import hmac
import logging
import ssl
from typing import NamedTuple

from herald.common.errors import HeraldError, InvalidArgumentError
from herald.common.security.credentials import AuthenticationToken
from herald.common.security.settings import MetricsEndpointSettings
from herald.common.transport.tls import read_pem

log = logging.getLogger(__name__)


class MetricsAccess:
    """What an endpoint enforces, built (and checked: an unreadable or empty file fails here, naming
    the setting) at start: `ssl_context` for TLS (None: plain HTTP) and `check` for each /metrics
    request."""

    def __init__(self, settings: MetricsEndpointSettings) -> None:
        self._token: AuthenticationToken | None = None
        if settings.metrics_auth_token_file:
            try:
                self._token = AuthenticationToken.from_file(settings.metrics_auth_token_file)
            except HeraldError as exc:
                raise InvalidArgumentError(f"metrics_auth_token_file: {exc}") from None
        self.ssl_context = _ssl_context(settings.metrics_tls_cert_file, settings.metrics_tls_key_file)
        if self._token is not None and self.ssl_context is None:
            log.warning("/metrics asks for a bearer token over plain HTTP: the token crosses the network in clear "
                        "text (set metrics_tls_cert_file and metrics_tls_key_file for HTTPS)")

    @property
    def token_required(self) -> bool:
        return self._token is not None

    def check(self, authorization: str | None) -> Refusal | None:
        """None when a request with this Authorization header may read /metrics, else the answer."""
        if self._token is None:
            return None
        try:
            expected = self._token.token()
        except HeraldError as exc:  # the file went away or was emptied: refuse rather than open up
            log.warning("/metrics refused a scrape: %s", exc)
            return Refusal("503 Service Unavailable", "the metrics token cannot be read on the server: see its log")
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return Refusal(UNAUTHORIZED, "/metrics needs a token: send Authorization: Bearer <token>")
        # Constant time: how long the comparison takes says nothing about how much of the token matched.
        if not hmac.compare_digest(given.strip().encode(), expected.encode()):
            return Refusal(UNAUTHORIZED, "the bearer token is not the metrics token")
        return None


UNAUTHORIZED = "401 Unauthorized"


class Refusal(NamedTuple):
    status: str  # the HTTP status line
    reason: str


def _ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext | None:
    if not cert_file and not key_file:
        return None
    if not cert_file or not key_file:
        raise InvalidArgumentError("metrics TLS needs both metrics_tls_cert_file and metrics_tls_key_file")
    # Read first for errors that name the setting; ssl reads the files itself.
    read_pem(cert_file, "metrics_tls_cert_file", kind="CERTIFICATE")
    read_pem(key_file, "metrics_tls_key_file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidArgumentError(f"metrics_tls_cert_file {cert_file!r} and metrics_tls_key_file {key_file!r} are "
                                   f"not a certificate chain and its private key: {exc}") from None
    return context
