"""Random and mutated requests on every client-facing and admin RPC of a real standalone: lookup
(on lookup and through the proxy), broker unary calls and the Produce / Consume / Letters streams
(on the broker and through the proxy), admin (on the broker and through the proxy) and gRPC health.

Requests are made from the protobuf descriptors (tests.fuzz.strategies) and sent as bytes, either
as built or damaged. Properties: every call ends (a deadline that passes is a hang) with OK or an
error status other than INTERNAL / UNKNOWN, no stream reply carries an UNKNOWN_ERROR (an unhandled
exception), and after each property the service is alive, serves a fresh producer and consumer,
logged no traceback and lost none of the checking traffic's messages (tests/fuzz/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2, deadletter_pb2, lookup_pb2
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.strategies import messages, mutated
from tests.fuzz.target import FuzzTarget

CALL_DEADLINE = 20.0
BAD_STATUSES = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


def _methods(module: Any, service: str) -> list[MethodDescriptor]:
    return list(module.DESCRIPTOR.services_by_name[service].methods)


LOOKUP = _methods(lookup_pb2, "LookupService")
ADMIN = _methods(admin_pb2, "AdminService")
BROKER = _methods(broker_pb2, "BrokerService")
BROKER_UNARY = [m for m in BROKER if not m.client_streaming]
STREAMS = [m for m in BROKER if m.client_streaming] + _methods(deadletter_pb2, "DeadLetterService")
HEALTH = list(health_pb2.DESCRIPTOR.services_by_name["Health"].methods)[:1]  # Check (Watch never ends)

# (server, methods it serves) for unary calls.
UNARY_TARGETS = [("lookup", LOOKUP), ("proxy", LOOKUP), ("broker", BROKER_UNARY), ("proxy", BROKER_UNARY),
                 ("broker", ADMIN), ("proxy", ADMIN), ("lookup", HEALTH), ("broker", HEALTH), ("proxy", HEALTH)]
STREAM_TARGETS = [("broker", STREAMS), ("proxy", STREAMS[:2])]


def _path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def request_bytes(method: MethodDescriptor) -> st.SearchStrategy[bytes]:
    """A request of the method's input type, serialised, or those bytes damaged."""
    built = messages(method.input_type).map(lambda message: message.SerializeToString())
    return st.one_of(built, built.flatmap(mutated))


@pytest.fixture(scope="module")
def channels(fuzz_target: FuzzTarget) -> Iterator[dict[str, grpc.Channel]]:
    opened = {name: grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_send_message_length", 64 * 1024 * 1024), ("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        for name, port in fuzz_target.ports.items()}
    yield opened
    for channel in opened.values():
        channel.close()


def _identity(raw: bytes) -> bytes:
    return raw


def check_status(error: grpc.RpcError, method: MethodDescriptor, request: bytes) -> None:
    code = error.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        # Pull waits as long as its request asks; nothing else may outlast the deadline.
        assert method.name == "Pull", f"{_path(method)} hung ({request[:200]!r})"
        return
    assert code not in BAD_STATUSES, f"{_path(method)} failed with {code}: {error.details()} ({request[:200]!r})"
    details = error.details() or ""
    assert not details.startswith(f"{common_pb2.UNKNOWN_ERROR}:"), (
        f"{_path(method)}: unhandled error {details} ({request[:200]!r})")


def _forget_registration(channels: dict[str, grpc.Channel], method: MethodDescriptor, request: bytes,
                         reply: bytes) -> None:
    """A broker the fuzzer registered with lookup leaves at once: lookup must not give topics to it."""
    if method.name != "RegisterBroker":
        return
    try:
        registered = lookup_pb2.RegisterBrokerRequest.FromString(request)
    except DecodeError:
        return
    lease = lookup_pb2.RegisterBrokerResponse.FromString(reply).lease_id
    channels["lookup"].unary_unary(
        "/herald.v1.LookupService/UnregisterBroker", request_serializer=_identity, response_deserializer=_identity,
    )(lookup_pb2.UnregisterBrokerRequest(broker_id=registered.broker_id, lease_id=lease).SerializeToString(),
      timeout=CALL_DEADLINE)


@st.composite
def unary_calls(draw: st.DrawFn) -> tuple[str, MethodDescriptor, bytes]:
    server, methods = draw(st.sampled_from(UNARY_TARGETS))
    method = draw(st.sampled_from(methods))
    return server, method, draw(request_bytes(method))


@given(call=unary_calls())
def test_random_and_mutated_unary_requests_get_a_status_never_an_internal_error(
    target: FuzzTarget, channels: dict[str, grpc.Channel], call: tuple[str, MethodDescriptor, bytes],
) -> None:
    server, method, request = call
    stub = channels[server].unary_unary(_path(method), request_serializer=_identity, response_deserializer=_identity)
    try:
        reply = stub(request, timeout=CALL_DEADLINE)
    except grpc.RpcError as error:
        check_status(error, method, request)
        return
    if server == "lookup":
        _forget_registration(channels, method, request, reply)


def _first_requests(method: MethodDescriptor) -> st.SearchStrategy[Message]:
    """A stream's opening request that passes the handshake more often than chance would."""
    cls = GetMessageClass(method.input_type)
    if method.name == "Produce":
        return st.builds(lambda topic, name: cls(register=broker_pb2.RegisterProducer(topic=topic, producer_name=name)),
                         st.sampled_from(["fuzz-a", "persistent://public/default/fuzz-b", "non-persistent://public/default/fuzz-np"]),
                         st.sampled_from(["", "fuzz-producer"]))
    if method.name == "Consume":
        return st.builds(lambda topic, kind: cls(subscribe=broker_pb2.Subscribe(
            topic=topic, subscription="fuzz-sub", type=kind, initial_position=broker_pb2.EARLIEST)),
            st.sampled_from(["fuzz-a", "non-persistent://public/default/fuzz-np"]),
            st.sampled_from([broker_pb2.SHARED, broker_pb2.KEY_SHARED, broker_pb2.FAILOVER]))
    return messages(method.input_type)


@st.composite
def stream_calls(draw: st.DrawFn) -> tuple[str, MethodDescriptor, list[bytes]]:
    server, methods = draw(st.sampled_from(STREAM_TARGETS))
    method = draw(st.sampled_from(methods))
    first: list[bytes] = []
    if draw(st.booleans()):
        first = [draw(_first_requests(method)).SerializeToString()]
    rest = draw(st.lists(request_bytes(method), max_size=5))
    return server, method, first + rest


def _reply_errors(method: MethodDescriptor, raw: bytes) -> list[common_pb2.Error]:
    reply = GetMessageClass(method.output_type).FromString(raw)
    found = []
    for field in ("error", "send_error"):
        if field in reply.DESCRIPTOR.fields_by_name and reply.HasField(field):
            value = getattr(reply, field)
            found.append(value.error if field == "send_error" else value)
    if reply.DESCRIPTOR.name == "ConsumeResponse" and reply.HasField("result") and reply.result.HasField("error"):
        found.append(reply.result.error)
    return found


@given(call=stream_calls())
def test_random_and_mutated_stream_requests_end_with_a_status_never_an_internal_error(
    target: FuzzTarget, channels: dict[str, grpc.Channel], call: tuple[str, MethodDescriptor, list[bytes]],
) -> None:
    server, method, requests = call
    stub = channels[server].stream_stream(_path(method), request_serializer=_identity, response_deserializer=_identity)
    replies = stub(iter(requests), timeout=CALL_DEADLINE)
    try:
        for raw in replies:
            for error in _reply_errors(method, raw):
                assert error.code != common_pb2.UNKNOWN_ERROR, f"{_path(method)}: unhandled error {error.message}"
    except grpc.RpcError as error:
        check_status(error, method, b"".join(requests)[:200])

