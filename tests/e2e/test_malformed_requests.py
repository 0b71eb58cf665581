"""Requests whose bytes are no valid message (found by tests/fuzz): every server decodes them at
the edge (herald.common.transport.decoding) and answers INVALID_ARGUMENT naming the message type, for
unary calls and for messages inside streams, logs no traceback, and goes on serving."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest
from herald.api.v1 import broker_pb2, common_pb2, lookup_pb2, lookup_pb2_grpc
from herald.client import AsyncClient, InitialPosition
from herald.common.errors import InvalidArgumentError
from herald.common.transport.rpc import error_from_rpc

from tests.conftest import StandaloneProcess

# A length-delimited field 1 announcing 5 bytes and holding 2: no protobuf parser accepts it.
MALFORMED = b"\x0a\x05ab"


def _identity(raw: bytes) -> bytes:
    return raw


@pytest.mark.parametrize(("server", "method", "message"), [
    ("lookup", "/herald.v1.LookupService/RegisterBroker", "herald.v1.RegisterBrokerRequest"),
    ("lookup", "/herald.v1.LookupService/LookupTopic", "herald.v1.LookupTopicRequest"),
    ("proxy", "/herald.v1.LookupService/LookupTopic", "herald.v1.LookupTopicRequest"),
    ("broker", "/herald.v1.BrokerService/GetLastMessageId", "herald.v1.GetLastMessageIdRequest"),
    ("broker", "/herald.v1.AdminService/CreateTenant", "herald.v1.Tenant"),
    ("storage", "/herald.v1.StorageService/Fence", "herald.v1.FenceRequest"),
    ("broker", "/grpc.health.v1.Health/Check", "grpc.health.v1.HealthCheckRequest"),
])
async def test_a_malformed_unary_request_is_an_invalid_argument_naming_its_type(
    shared_standalone: StandaloneProcess, server: str, method: str, message: str,
) -> None:
    port = {"lookup": shared_standalone.port, "proxy": shared_standalone.proxy_port,
            "broker": shared_standalone.broker_port, "storage": shared_standalone.storage_port}[server]
    log_start = len(shared_standalone.log_path.read_text(errors="replace"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(method, request_serializer=_identity, response_deserializer=_identity)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(MALFORMED, timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    error = error_from_rpc(refused.value)
    assert isinstance(error, InvalidArgumentError)
    assert f"the request is not a valid {message} message" in str(error)
    assert "Traceback" not in shared_standalone.log_path.read_text(errors="replace")[log_start:]
    await still_serves(shared_standalone)


async def test_a_malformed_message_inside_a_produce_stream_ends_it_with_invalid_argument(
    shared_standalone: StandaloneProcess,
) -> None:
    log_start = len(shared_standalone.log_path.read_text(errors="replace"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{shared_standalone.port}") as lookup:
        await lookup_pb2_grpc.LookupServiceStub(lookup).LookupTopic(  # assigns the topic its owner
            lookup_pb2.LookupTopicRequest(topic="malformed-in-stream"), timeout=10)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{shared_standalone.broker_port}") as channel:
        call = channel.stream_stream("/herald.v1.BrokerService/Produce", request_serializer=_identity,
                                     response_deserializer=broker_pb2.ProduceResponse.FromString)(None)
        await call.write(broker_pb2.ProduceRequest(
            register=broker_pb2.RegisterProducer(topic="malformed-in-stream")).SerializeToString())
        registered = await call.read()
        assert registered.HasField("registered"), registered
        await call.write(MALFORMED)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            while True:
                reply = await call.read()
                assert reply is not grpc.aio.EOF, "the stream ended without an error"  # type: ignore[attr-defined]
                assert not (reply.HasField("error") and reply.error.code == common_pb2.UNKNOWN_ERROR), reply
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert "not a valid herald.v1.ProduceRequest message" in (refused.value.details() or "")
    assert "Traceback" not in shared_standalone.log_path.read_text(errors="replace")[log_start:]
    await still_serves(shared_standalone)


async def still_serves(server: StandaloneProcess) -> None:
    async with AsyncClient(server.service_url) as client:
        consumer = await client.subscribe("after-malformed", "s", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer("after-malformed")
        sent = await producer.send(b"fine")
        message = await consumer.receive(timeout=30)
        assert message is not None and message.message_id == sent
        consumer.acknowledge(message)
