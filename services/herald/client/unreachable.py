"""What a failed connection attempt says for certain. A refused connection (nothing listens at the
address) and a host name the resolver does not know are answers: a first connection to the service
URL that gets one fails at once. Anything else (a timeout, a reset, a resolver that failed for now,
a TLS handshake that failed) may pass, and is retried until the operation timeout."""

from __future__ import annotations

import socket

# The resolver's "no such name" answers (EAI_NODATA is not on every platform).
_UNKNOWN_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def definite_failure(exc: BaseException, host: str, service_url: str) -> str | None:
    """Why nothing can answer at `host`, from the error a plain connection attempt raised; None
    when the error is no such answer."""
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused: nothing listens there for {service_url}"
    if isinstance(exc, socket.gaierror) and exc.errno in _UNKNOWN_HOST:
        return f"the host {host} is not known: {exc.strerror}"
    return None
