"""Where a consumer, a reader, a seek or a pull may start (issue 16, item 11), spoken as raw gRPC
to a secure standalone (TLS, token authentication, authorization on) as a client that skips the
client library's checks would: an out-of-range initial position or subscription type gets its own
clear InvalidArgument (not "unknown subscription type" for both), and Pull, a reader's start,
Seek and an admin's cursor reset refuse the same positions, with the same words (one check,
herald.common.codec.message_id.check_position, which the client library runs before sending too)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from herald.api.v1 import broker_pb2, broker_pb2_grpc, common_pb2, lookup_pb2, lookup_pb2_grpc
from herald.client import AuthenticationToken, MessageId
from herald.client.admin import AdminClient
from herald.common.errors import InvalidArgumentError
from herald.common.transport.rpc import error_from_rpc

from tests.conftest import StandaloneProcess
from tests.helpers import unique_name, unique_topic
from tests.security.conftest import ADMIN, Keys, Pki
from tests.security.test_standalone_security import _admin, _client

# The shapes every start refuses: each id runs from -1 (the earliest) to 2^63-1 (the latest).
REFUSED = [(-2, 0), (0, -2), (-5, -7), (-(2**63), 0)]
INVALID_POSITION = "is invalid: its {} {} is out of range; ledger and entry ids run from -1"


def _why(ledger_id: int, entry_id: int) -> str:
    name, value = ("ledger id", ledger_id) if ledger_id < -1 else ("entry id", entry_id)
    return f"{ledger_id}:{entry_id} " + INVALID_POSITION.format(name, value)


class Broker:
    """A TLS channel to the broker that owns `topic`, with the super-user's token on each call."""

    def __init__(self, server: StandaloneProcess, pki: Pki, keys: Keys) -> None:
        self.server = server
        self.credentials = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
        self.metadata = [("authorization", f"Bearer {keys.token(ADMIN)}")]
        self.channel: grpc.aio.Channel | None = None

    async def open(self, topic: str) -> broker_pb2_grpc.BrokerServiceStub:
        async with grpc.aio.secure_channel(f"127.0.0.1:{self.server.port}", self.credentials) as lookup_channel:
            owner = await lookup_pb2_grpc.LookupServiceStub(lookup_channel).LookupTopic(
                lookup_pb2.LookupTopicRequest(topic=topic), metadata=self.metadata, timeout=10)
        self.channel = grpc.aio.secure_channel(owner.broker_address, self.credentials)
        return broker_pb2_grpc.BrokerServiceStub(self.channel)

    async def subscribe(self, stub: broker_pb2_grpc.BrokerServiceStub, subscribe: broker_pb2.Subscribe,
                        *more: broker_pb2.ConsumeRequest) -> list[broker_pb2.ConsumeResponse]:
        """A Consume stream: Subscribe then `more`; one reply for each (Subscribed or an Error)."""
        call = stub.Consume(metadata=self.metadata, timeout=10)
        replies = []
        try:
            for request in (broker_pb2.ConsumeRequest(subscribe=subscribe), *more):
                await call.write(request)
                reply = await call.read()
                replies.append(reply)
                if reply.HasField("error"):
                    break
        finally:
            call.cancel()
        return replies


@pytest.fixture
async def topic(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> AsyncIterator[str]:
    """A topic holding three messages."""
    name = unique_topic("start")
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token(ADMIN))) as client:
        producer = await client.create_producer(name, batching_enabled=False)
        for index in range(3):
            await producer.send(f"m{index}".encode())
        await producer.close()
    yield name


@pytest.fixture
async def broker(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> AsyncIterator[Broker]:
    connection = Broker(secure_standalone, pki, keys)
    yield connection
    if connection.channel is not None:
        await connection.channel.close()


def _error(reply: broker_pb2.ConsumeResponse) -> common_pb2.Error:
    assert reply.HasField("error"), f"expected an error, got {reply}"
    return reply.error


# ---- 11a: initial position and subscription type ----

async def test_an_out_of_range_initial_position_is_named_as_such(broker: Broker, topic: str) -> None:
    stub = await broker.open(topic)
    [reply] = await broker.subscribe(stub, broker_pb2.Subscribe(topic=topic, subscription="s", initial_position=7))
    error = _error(reply)
    assert error.code == common_pb2.INVALID_ARGUMENT
    assert error.message == "initial position 7 is invalid: use EARLIEST or LATEST"


async def test_an_out_of_range_subscription_type_is_named_as_such(broker: Broker, topic: str) -> None:
    stub = await broker.open(topic)
    [reply] = await broker.subscribe(stub, broker_pb2.Subscribe(topic=topic, subscription="s", type=9))
    error = _error(reply)
    assert error.code == common_pb2.INVALID_ARGUMENT
    assert error.message == "subscription type 9 is invalid: use EXCLUSIVE, SHARED, FAILOVER or KEY_SHARED"


async def test_an_out_of_range_seek_edge_is_named_as_such(broker: Broker, topic: str) -> None:
    stub = await broker.open(topic)
    subscribed, result = await broker.subscribe(
        stub, broker_pb2.Subscribe(topic=topic, subscription="edge"),
        broker_pb2.ConsumeRequest(seek=broker_pb2.Seek(request_id=1, edge=5)))
    assert subscribed.HasField("subscribed")
    assert result.result.request_id == 1
    assert result.result.error.code == common_pb2.INVALID_ARGUMENT
    assert result.result.error.message == "seek edge 5 is invalid: use EARLIEST or LATEST"


async def test_the_client_refuses_the_same_before_sending(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, topic: str,
) -> None:
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token(ADMIN))) as client:
        with pytest.raises(InvalidArgumentError, match="initial_position must be a InitialPosition"):
            await client.subscribe(topic, "s", initial_position=7)  # type: ignore[call-overload]
        with pytest.raises(InvalidArgumentError, match="consumer_type must be a ConsumerType"):
            await client.subscribe(topic, "s", consumer_type=9)  # type: ignore[call-overload]


# ---- 11b: one rule for every start position ----

@pytest.mark.parametrize(("ledger_id", "entry_id"), REFUSED)
async def test_pull_refuses_a_start_seek_refuses(broker: Broker, topic: str, ledger_id: int, entry_id: int) -> None:
    stub = await broker.open(topic)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Pull(broker_pb2.PullRequest(topic=topic, partition=-1, max_entries=10,
                                               start=common_pb2.Position(ledger_id=ledger_id, entry_id=entry_id)),
                        metadata=broker.metadata, timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = error_from_rpc(refused.value)
    assert isinstance(error, InvalidArgumentError)
    assert f"pull start {_why(ledger_id, entry_id)}" in str(error)


@pytest.mark.parametrize(("ledger_id", "entry_id"), REFUSED)
async def test_seek_refuses_the_same_positions_in_the_same_words(
    broker: Broker, topic: str, ledger_id: int, entry_id: int,
) -> None:
    stub = await broker.open(topic)
    position = common_pb2.Position(ledger_id=ledger_id, entry_id=entry_id)
    subscribed, result = await broker.subscribe(
        stub, broker_pb2.Subscribe(topic=topic, subscription="seeker"),
        broker_pb2.ConsumeRequest(seek=broker_pb2.Seek(request_id=3, position=position)))
    assert subscribed.HasField("subscribed")
    assert result.result.error.code == common_pb2.INVALID_ARGUMENT
    assert result.result.error.message == f"position {_why(ledger_id, entry_id)} (the earliest) to 2^63-1 (the latest)"


@pytest.mark.parametrize(("ledger_id", "entry_id"), REFUSED)
async def test_a_readers_start_refuses_the_same_positions(
    broker: Broker, topic: str, ledger_id: int, entry_id: int,
) -> None:
    stub = await broker.open(topic)
    [reply] = await broker.subscribe(stub, broker_pb2.Subscribe(
        topic=topic, subscription=unique_name("reader"), non_durable=True,
        start_position=common_pb2.Position(ledger_id=ledger_id, entry_id=entry_id)))
    error = _error(reply)
    assert error.code == common_pb2.INVALID_ARGUMENT
    assert error.message.startswith(f"reader start {_why(ledger_id, entry_id)}")


async def test_every_start_still_takes_the_edges_and_positions_between(broker: Broker, topic: str) -> None:
    stub = await broker.open(topic)
    for (ledger_id, entry_id), wanted in (((-1, -1), 3), ((0, -1), 3), ((2**63 - 1, 2**63 - 1), 0)):
        start = common_pb2.Position(ledger_id=ledger_id, entry_id=entry_id)
        reply = await stub.Pull(broker_pb2.PullRequest(topic=topic, partition=-1, max_entries=10, start=start),
                                metadata=broker.metadata, timeout=10)
        assert len(reply.entries) == wanted, (ledger_id, entry_id)


async def test_the_client_library_and_the_admin_client_refuse_them_before_sending(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, topic: str,
) -> None:
    bad = MessageId(-2, 0)
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token(ADMIN))) as client:
        with pytest.raises(InvalidArgumentError, match=r"pull start -2:0 is invalid"):
            await client.pull(topic, bad)
        with pytest.raises(InvalidArgumentError, match=r"start_message_id -2:0 is invalid"):
            await client.create_reader(topic, bad)
        consumer = await client.subscribe(topic, "client-seek")
        with pytest.raises(InvalidArgumentError, match=r"seek target -2:0 is invalid"):
            await consumer.seek(bad)
        await consumer.close()
    admin: AdminClient
    async with _admin(secure_standalone, pki, keys) as admin:
        with pytest.raises(InvalidArgumentError, match=r"position 0:-3 is invalid"):
            await admin.reset_cursor(topic, "client-seek", position=(0, -3))
