"""Credentials a caller puts on its calls: `AuthenticationToken` (a JWT from a string, a file
re-read when it changes, or a callable asked at every call) and the client interceptors that add
`authorization: Bearer <token>` (and, from a proxy or a forwarding broker, the principal it acts
for) to the metadata of every call and stream of a channel. Used by the client, the services'
own calls and the admin client alike; the checking side is herald.common.security.authentication."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc.aio

from herald.common.errors import AuthenticationError, InvalidArgumentError

MetadataPairs = Callable[[], Sequence[tuple[str, str]]]

if TYPE_CHECKING:
    _UU = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _US = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
    _SU = grpc.aio.StreamUnaryClientInterceptor[Any, Any]
    _SS = grpc.aio.StreamStreamClientInterceptor[Any, Any]
else:
    _UU, _US = grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor
    _SU, _SS = grpc.aio.StreamUnaryClientInterceptor, grpc.aio.StreamStreamClientInterceptor


class AuthenticationToken:
    """A JWT for token authentication (Pulsar's AuthenticationToken): `AuthenticationToken("eyJ…")`,
    `AuthenticationToken.from_file(path)` (read again whenever the file changes, so a rotated token
    is picked up) or `AuthenticationToken(callable)` (asked for the token at every call)."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        if isinstance(token, str):
            if not token.strip():
                raise InvalidArgumentError("AuthenticationToken needs a token, got an empty string")
            fixed = token.strip()
            self._supplier: Callable[[], str] = lambda: fixed
        elif callable(token):
            self._supplier = token
        else:
            raise InvalidArgumentError(f"AuthenticationToken takes a token string or a callable, got {token!r}")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> AuthenticationToken:
        reader = _TokenFile(Path(path))
        reader.token()  # a missing or empty file fails here, where it was given
        return cls(reader.token)

    def token(self) -> str:
        try:
            value = self._supplier()
        except AuthenticationError:
            raise
        except Exception as exc:
            raise AuthenticationError(f"the token supplier failed: {exc!r}") from exc
        if not isinstance(value, str) or not value.strip():
            raise AuthenticationError("the token supplier gave no token")
        return value.strip()

    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token()}")]


class AuthenticationTls:
    """Mutual TLS authentication (Pulsar's AuthenticationTLS): the client presents this certificate
    on `herald+ssl://` connections, and services that take certificates as credentials
    (tls_client_auth) use its common name as the role."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        if not cert_file or not key_file:
            raise InvalidArgumentError("AuthenticationTls needs a certificate file and a key file")
        self.cert_file = cert_file
        self.key_file = key_file

    def metadata(self) -> list[tuple[str, str]]:
        return []


Authentication = AuthenticationToken | AuthenticationTls


class _TokenFile:
    """A token file, read again when its modification time or size changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()  # the sync facade's threads may ask too
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def token(self) -> str:
        try:
            status = self._path.stat()
            stamp = (status.st_mtime_ns, status.st_size)
            with self._lock:
                if stamp != self._stamp:
                    token = self._path.read_text().strip()
                    if not token:
                        raise AuthenticationError(f"token file {str(self._path)!r} is empty")
                    self._token, self._stamp = token, stamp
                return self._token
        except OSError as exc:
            raise AuthenticationError(f"token file {str(self._path)!r} cannot be read: {exc.strerror}") from None


def check_authentication(auth: object) -> Authentication | None:
    if auth is None or isinstance(auth, AuthenticationToken | AuthenticationTls):
        return auth
    raise InvalidArgumentError(f"auth must be an AuthenticationToken or AuthenticationTls, got {auth!r}")


def client_certificate(auth: Authentication | None, cert_file: str | None,
                       key_file: str | None) -> tuple[str, str] | None:
    """The certificate a client presents in its TLS handshakes, as (certificate file, key file):
    AuthenticationTls's, or tls_certificate_file_path / tls_private_key_file_path given beside a
    token (a cluster that requires a certificate of every client, while the token names the role);
    None: none."""
    for name, value in (("tls_certificate_file_path", cert_file), ("tls_private_key_file_path", key_file)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidArgumentError(f"{name} must be a file path, got {value!r}")
    if (cert_file is None) != (key_file is None):
        raise InvalidArgumentError(
            "a client certificate needs both tls_certificate_file_path and tls_private_key_file_path")
    if isinstance(auth, AuthenticationTls):
        if cert_file is not None:
            raise InvalidArgumentError(
                "AuthenticationTls already names the client certificate: give tls_certificate_file_path and "
                "tls_private_key_file_path only with a token or no auth")
        return auth.cert_file, auth.key_file
    return (cert_file, key_file) if cert_file is not None and key_file is not None else None


def _with_metadata(details: grpc.aio.ClientCallDetails, pairs: MetadataPairs) -> grpc.aio.ClientCallDetails:
    extra = pairs()
    if not extra:
        return details
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    for key, value in extra:
        metadata[key] = value  # replaces: a call never carries two tokens
    return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                      details.wait_for_ready)


class _UnaryUnary(_UU):
    def __init__(self, pairs: MetadataPairs) -> None:
        self._pairs = pairs

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(_with_metadata(client_call_details, self._pairs), request)


class _UnaryStream(_US):
    def __init__(self, pairs: MetadataPairs) -> None:
        self._pairs = pairs

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(_with_metadata(client_call_details, self._pairs), request)


def _stop_request_poller(call: Any) -> None:
    """When an intercepted streaming call ends, end the task that feeds it its requests.

    grpc.aio gives an intercepted stream written with write() a request iterator of its own, and
    a task reading it; the task ends on done_writing() or cancel(), but not when the server ends
    the call first (a cancel() then comes too late: the call is done). It would wait for the next
    write for ever, held in a reference cycle, and be destroyed pending by the garbage collector,
    which logs "Task was destroyed but it is pending!" and "aclose(): asynchronous generator is
    already running" at ERROR: a proxy relaying streams with a token did, once per stream a broker
    ended (grpc/grpc#29518; a fix, grpc/grpc#37355, was never merged). Cancelling the task is
    what cancel() does on a call still running."""
    poller = getattr(call, "_async_request_poller", None)
    if isinstance(poller, asyncio.Task):
        poller.cancel()


def _feeding_ends_with(call: Any) -> Any:
    add_done_callback = getattr(call, "add_done_callback", None)
    if add_done_callback is not None:
        add_done_callback(_stop_request_poller)
    return call


class _StreamUnary(_SU):
    def __init__(self, pairs: MetadataPairs) -> None:
        self._pairs = pairs

    async def intercept_stream_unary(self, continuation: Any, client_call_details: Any,
                                     request_iterator: Any) -> Any:
        return _feeding_ends_with(
            await continuation(_with_metadata(client_call_details, self._pairs), request_iterator))


class _StreamStream(_SS):
    def __init__(self, pairs: MetadataPairs) -> None:
        self._pairs = pairs

    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any,
                                      request_iterator: Any) -> Any:
        return _feeding_ends_with(
            await continuation(_with_metadata(client_call_details, self._pairs), request_iterator))


def call_interceptors(pairs: MetadataPairs) -> list[Any]:
    """Client interceptors (one per call kind: grpc.aio files each under one kind) adding what
    `pairs()` gives to the metadata of every call and stream, once per call."""
    return [_UnaryUnary(pairs), _UnaryStream(pairs), _StreamUnary(pairs), _StreamStream(pairs)]


def auth_interceptors(auth: Authentication | None) -> list[Any]:
    """The interceptors that carry `auth`'s token; none without a token (TLS certificates travel
    in the handshake)."""
    if not isinstance(auth, AuthenticationToken):
        return []
    return call_interceptors(auth.metadata)
