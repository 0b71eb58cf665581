"""HeraldError is protocol-neutral: its codes are an enum of its own whose numbers are the gRPC
contract's ErrorCode, and the transport maps an error to the wire and back without losing its kind."""

from __future__ import annotations

import pytest
from herald.api.v1 import common_pb2
from herald.common import errors
from herald.common.errors import ErrorCode
from herald.common.transport.rpc import error_from_proto, error_to_proto


def test_error_codes_are_the_contracts() -> None:
    wire = dict(common_pb2.ErrorCode.items())
    assert {code.name: int(code) for code in ErrorCode} == wire


@pytest.mark.parametrize("kind", sorted({cls for cls in errors._BY_CODE.values()}, key=lambda cls: cls.code))
def test_every_error_kind_survives_the_wire(kind: type[errors.HeraldError]) -> None:
    sent = kind("what went wrong")
    received = error_from_proto(common_pb2.Error.FromString(error_to_proto(sent).SerializeToString()))
    assert type(received) is kind
    assert str(received) == "what went wrong" and received.retryable == sent.retryable


def test_an_unknown_code_is_a_plain_herald_error() -> None:
    received = error_from_proto(common_pb2.Error(code=9999, message="from a newer broker"))  # type: ignore[arg-type]
    assert type(received) is errors.HeraldError and str(received) == "from a newer broker"
