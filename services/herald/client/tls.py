"""TLS for `herald+ssl://` service URLs: the gRPC channel credentials and options for one address,
from ClientConfig's tls_* settings (Pulsar's meaning).

- tls_trust_certs_file_path: the CA bundle that signs the services' certificates (None: the
  system's trust store).
- tls_allow_insecure_connection: accept the certificate the server presents (self-signed ones
  included) instead of checking it against a CA: for tests and private networks only.
- tls_validate_hostname: check that the certificate names the host dialled. Off (Pulsar's default),
  the channel is told to expect the name the certificate carries, so brokers may advertise plain
  addresses while their certificates name the cluster.
- the client's own certificate (mutual TLS): AuthenticationTls's, or tls_certificate_file_path and
  tls_private_key_file_path beside a token.

tls_allow_insecure_connection and tls_validate_hostname need the server's certificate before the
channel is made; it is fetched once per address with an unverified handshake
(ssl.get_server_certificate) on a worker thread.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from herald.client.config import ClientConfig
from herald.client.unreachable import definite_failure
from herald.common.errors import ConnectionError_, InvalidArgumentError
from herald.common.transport.tls import read_pem

ChannelOptions = list[tuple[str, str | int]]


def read_trust_certs(path: str) -> bytes:
    """The CA bundle's bytes; InvalidArgumentError naming the option when it cannot be read."""
    return read_pem(path, "tls_trust_certs_file_path", kind="CERTIFICATE")


async def secure_channel_settings(
    config: ClientConfig, address: str, trusted: bytes | None,
) -> tuple[grpc.ChannelCredentials, ChannelOptions]:
    """Credentials and extra channel options to dial `address` (`host:port`) over TLS; `trusted`
    is the CA bundle read from tls_trust_certs_file_path (None: the system's)."""
    roots = trusted
    options: ChannelOptions = []
    if config.tls_allow_insecure_connection or not config.tls_validate_hostname:
        presented = await _server_certificate(address, config.connection_timeout, config.service_url)
        if config.tls_allow_insecure_connection:
            roots = presented.encode()
        if not config.tls_validate_hostname:
            options.append(("grpc.ssl_target_name_override", certificate_name(presented)))
    key = chain = None
    if config.client_certificate is not None:  # mutual TLS: the client's certificate
        cert_file, key_file = config.client_certificate
        key = read_client_file(key_file, "key")
        chain = read_client_file(cert_file, "certificate")
    return grpc.ssl_channel_credentials(root_certificates=roots, private_key=key, certificate_chain=chain), options


def read_client_file(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"client {what} file {path!r} cannot be read: {exc.strerror}") from None


class CertificateFetchRefused(ConnectionError_):
    """Fetching the server's certificate got a definite answer (unreachable.py): nothing listens
    there, or no such host; `reason` says which (the pool decides whether that is worth retrying)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


async def _server_certificate(address: str, timeout: float, service_url: str) -> str:  # noqa: ASYNC109
    host, _, port = address.rpartition(":")
    try:
        return await asyncio.to_thread(ssl.get_server_certificate, (host.strip("[]"), int(port)), timeout=timeout)
    except (OSError, ssl.SSLError) as exc:
        message = f"could not fetch the TLS certificate of {address}: {exc}"
        reason = definite_failure(exc, host, service_url)
        if reason is not None:
            raise CertificateFetchRefused(message, reason) from None
        raise ConnectionError_(message) from None


def certificate_name(pem: str) -> str:
    """The first DNS name a certificate is for (its subject alternative names, else its common name)."""
    certificate = x509.load_pem_x509_certificate(pem.encode())
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = names.get_values_for_type(x509.DNSName)
        if dns:
            return str(dns[0])
    except x509.ExtensionNotFound:
        pass
    common = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not common:
        raise ConnectionError_("the server's TLS certificate names no host (no DNS name, no common name)")
    return str(common[0].value)
