"""Which failed connection attempts are answers (herald.client.unreachable): pure code, errors as
the socket layer raises them."""

from __future__ import annotations

import socket

import pytest
from herald.client.unreachable import definite_failure

URL = "herald://broker.example:6650"


def test_a_refused_connection_means_nothing_listens() -> None:
    assert definite_failure(ConnectionRefusedError(111, "Connection refused"), "broker.example", URL) == (
        "connection refused: nothing listens there for herald://broker.example:6650")


def test_a_name_the_resolver_does_not_know_is_an_unknown_host() -> None:
    error = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert definite_failure(error, "brokr.example", URL) == (
        "the host brokr.example is not known: Name or service not known")


@pytest.mark.parametrize("error", [
    socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),  # the resolver may come back
    TimeoutError(),
    ConnectionResetError(104, "Connection reset by peer"),
    OSError(113, "No route to host"),
], ids=["resolver-down", "timeout", "reset", "no-route"])
def test_failures_that_may_pass_are_no_answer(error: BaseException) -> None:
    assert definite_failure(error, "broker.example", URL) is None
