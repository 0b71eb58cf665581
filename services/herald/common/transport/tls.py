"""TLS for every gRPC server and for the calls services make to each other: server credentials
and the listening port, and `Dialer`, which opens channels to other services (TLS when the service
was given a CA to trust, plaintext otherwise) with the interceptors that put the service's own
credentials on every call. Clients' `herald+ssl://` URLs are herald.client.tls's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from herald.common.errors import AddressInUseError, InvalidArgumentError

ChannelOptions = Sequence[tuple[str, Any]]


def read_pem(path: str, setting: str, *, kind: str = "") -> bytes:
    """A PEM file's bytes (holding a `kind` block, e.g. "CERTIFICATE", or any); InvalidArgumentError
    naming the setting when it cannot be read or holds no such block."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"{setting} {path!r} cannot be read: {exc.strerror}") from None
    if f"-----BEGIN {kind}".encode() not in data:
        raise InvalidArgumentError(f"{setting} {path!r} holds no PEM {kind.lower() or 'data'}")
    return data


def server_credentials(cert_file: str, key_file: str, ca_file: str = "",
                       require_client_cert: bool = False) -> grpc.ServerCredentials:
    """A server's TLS credentials: its certificate chain and key, and the CA that signs clients'
    certificates (asked for when ca_file is set, required with require_client_cert)."""
    if not cert_file or not key_file:
        raise InvalidArgumentError("TLS needs both tls_cert_file and tls_key_file")
    if require_client_cert and not ca_file:
        raise InvalidArgumentError("tls_require_client_cert needs tls_ca_file: the CA that signs client certificates")
    chain = read_pem(cert_file, "tls_cert_file")
    key = read_pem(key_file, "tls_key_file")
    roots = read_pem(ca_file, "tls_ca_file") if ca_file else None
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=roots,
                                       require_client_auth=require_client_cert)


def add_port(server: grpc.aio.Server, target: str, credentials: grpc.ServerCredentials | None) -> int:
    """Listen on `target` (host:port; port 0 picks one) with TLS when credentials are given; the
    port bound."""
    try:
        if credentials is None:
            return server.add_insecure_port(target)
        return server.add_secure_port(target, credentials)
    except RuntimeError as exc:  # grpc's "Failed to bind": the address is taken (or not ours)
        host, _, port = target.rpartition(":")
        raise AddressInUseError.of("gRPC", host, int(port), "--port (or the service's other port flags)",
                                   optional=False) from exc


class Dialer:
    """Opens channels from one service to others. `tls` (or a `ca_file`): TLS, trusting that CA
    (default: the system's trust store) and presenting cert_file / key_file when given (mutual
    TLS); otherwise plaintext. `interceptors` (see herald.common.security.credentials) add the service's
    token, and a proxy's forwarded principal, to every call. `server_name`: the name certificates
    must carry (default: the host dialled)."""

    def __init__(self, ca_file: str = "", cert_file: str = "", key_file: str = "",
                 interceptors: Sequence[Any] = (), server_name: str = "", tls: bool = False) -> None:
        self._credentials: grpc.ChannelCredentials | None = None
        if tls or ca_file:
            if bool(cert_file) != bool(key_file):
                raise InvalidArgumentError("a client certificate needs both tls_cert_file and tls_key_file")
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=read_pem(ca_file, "tls_ca_file") if ca_file else None,
                private_key=read_pem(key_file, "tls_key_file") if key_file else None,
                certificate_chain=read_pem(cert_file, "tls_cert_file") if cert_file else None,
            )
        self._interceptors = list(interceptors)
        self._server_name = server_name

    @property
    def tls(self) -> bool:
        return self._credentials is not None

    def channel(self, address: str, options: ChannelOptions = ()) -> grpc.aio.Channel:
        interceptors = self._interceptors or None
        if self._credentials is None:
            return grpc.aio.insecure_channel(address, options=list(options), interceptors=interceptors)
        extra = [("grpc.ssl_target_name_override", self._server_name)] if self._server_name else []
        return grpc.aio.secure_channel(address, self._credentials, options=[*options, *extra],
                                       interceptors=interceptors)


PLAINTEXT = Dialer()
