"""Limits against real `herald standalone` processes: each over-the-limit client gets a clear error
(retryable or final, as the limit is) and everyone else is served on.

- connections per client address (broker, lookup and proxy `max_connections_per_address`): with as
  many live connections (a call in progress on each) as the limit, a call on one connection more
  from the same address is refused with RESOURCE_EXHAUSTED naming the limit; calls on the live
  connections go on; a connection stops counting as soon as its last call ends;
- gRPC max receive size (`grpc_max_receive_message_bytes` of every server): a bigger request gets
  RESOURCE_EXHAUSTED (MessageTooLargeError in the client) and the same connection serves the next;
- pending sends per producer stream (broker `max_pending_sends`): flow control, every send arrives;
- topics per namespace (namespace policy `max_topics`, broker default `max_topics_per_namespace`):
  creating one more, by auto-creation on produce or by the admin API, is refused;
- partitions per topic (broker `max_partitions_per_topic`): creating or growing a partitioned
  topic past it is refused.

The maximum message size and the producer / consumer limits per topic are tested in
test_policies.py (with the others still working)."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import grpc
import grpc.aio
import pytest
from herald.api.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    lookup_pb2,
    lookup_pb2_grpc,
    storage_pb2,
)
from herald.client import AsyncClient, InitialPosition, NotAllowedError
from herald.client.admin import AdminClient
from herald.common.errors import InvalidArgumentError, MessageTooLargeError, TooManyRequestsError
from herald.common.transport.rpc import error_from_rpc
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import eventually, unique_name, unique_topic
from tests.wire import WireClient, make_entry

T = TypeVar("T")
DEADLINE = 30.0
SMALL_GRPC_LIMIT = 256 * 1024


def own_connection(port: int) -> grpc.aio.Channel:
    """A channel with a TCP connection of its own (channels in one process otherwise share one)."""
    return grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])


# ---- connections per client address ----

@pytest.fixture(scope="module")
def connection_limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Broker and proxy at 2 live connections per address, lookup at 4 (the broker's heartbeats and
    the proxy's lookups come from the same address, a call at a time); connections idle for a
    second are closed."""
    with running_standalone(
        tmp_path_factory.mktemp("connections") / "data", max_connections_per_address=2, connection_idle_timeout=1,
        extra_env={"HERALD_LOOKUP_MAX_CONNECTIONS_PER_ADDRESS": "4", "HERALD_LOOKUP_CONNECTION_IDLE_TIMEOUT": "1",
                   "HERALD_PROXY_MAX_CONNECTIONS_PER_ADDRESS": "2", "HERALD_PROXY_CONNECTION_IDLE_TIMEOUT": "1"},
    ) as server:
        yield server


async def list_tenants(channel: grpc.aio.Channel) -> list[str]:
    reply = await admin_pb2_grpc.AdminServiceStub(channel).ListTenants(admin_pb2.ListTenantsRequest(), timeout=10)
    return list(reply.tenants)


async def cluster_info(channel: grpc.aio.Channel) -> int:
    reply = await lookup_pb2_grpc.LookupServiceStub(channel).GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=10)
    return len(reply.brokers)


Held = grpc.aio.StreamStreamCall | grpc.aio.StreamUnaryCall  # type: ignore[type-arg]


async def consuming(channel: grpc.aio.Channel, topic: str = "held-connections") -> Held:
    """A call in progress on the connection: a Consume stream, subscribed (to `topic`, looked up)."""
    call = broker_pb2_grpc.BrokerServiceStub(channel).Consume()
    await call.write(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
        topic=topic, subscription=unique_name("held"), type=broker_pb2.SHARED)))
    reply = await asyncio.wait_for(call.read(), DEADLINE)
    assert reply.HasField("subscribed"), reply
    return call


async def awaiting_its_request(channel: grpc.aio.Channel) -> Held:
    """A call in progress on the connection: a lookup whose request is not sent yet (its
    connection counts from admission, before the request is read). Its headers are on the wire
    before this returns: until they are, the connection has no call and may be closed as idle."""
    call = channel.stream_unary(
        "/herald.v1.LookupService/GetClusterInfo", request_serializer=lookup_pb2.ClusterInfoRequest.SerializeToString,
        response_deserializer=lookup_pb2.ClusterInfoResponse.FromString)()
    await call.wait_for_connection()
    return call  # type: ignore[no-any-return]


async def check_connection_limit(port: int, limit: int, service: str,
                                 call: Callable[[grpc.aio.Channel], Awaitable[object]],
                                 hold: Callable[[grpc.aio.Channel], Awaitable[Held]]) -> None:
    """`limit` connections holding a call in progress are live: a call on one connection more is
    refused naming the limit, calls on the live ones (multiplexed) are served, and once one live
    connection's call ends (the connection stays open) the refused connection gets in."""
    held: list[tuple[grpc.aio.Channel, Held]] = []
    refused = own_connection(port)
    try:
        for _ in range(limit):
            channel = own_connection(port)
            held.append((channel, await hold(channel)))

        async def refusal() -> TooManyRequestsError | None:
            try:
                await call(refused)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                assert f"{service} has reached its limit of {limit} connections from client address ipv4:127.0.0.1 " \
                       "(max_connections_per_address)" in (exc.details() or "")
                error = error_from_rpc(exc)
                assert isinstance(error, TooManyRequestsError) and error.retryable
                return error
            return None  # a held call not admitted yet

        await eventually(refusal, f"a call on connection {limit + 1} from one address refused")
        for channel, _ in held:  # every live connection is still served
            await call(channel)
        with pytest.raises(grpc.aio.AioRpcError) as again:  # a retry on the refused one: still over
            await call(refused)
        assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        held.pop()[1].cancel()  # its connection stays open, with no call in progress

        async def gets_in() -> bool | None:
            try:
                await call(refused)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                return None
            return True

        await eventually(gets_in, "the refused connection admitted once a live one's call ended")
    finally:
        for channel, call_in_progress in held:
            call_in_progress.cancel()
            await channel.close()
        await refused.close()


async def test_a_brokers_live_connections_from_one_address_are_limited_and_released_when_their_calls_end(
    connection_limited: StandaloneProcess,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{connection_limited.port}") as lookup:
        await lookup_pb2_grpc.LookupServiceStub(lookup).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic="held-connections"), timeout=10)  # owned by the broker
    await check_connection_limit(connection_limited.broker_port, 2, "broker", list_tenants, consuming)


async def test_lookups_live_connections_from_one_address_are_limited_and_released_when_their_calls_end(
    connection_limited: StandaloneProcess,
) -> None:
    await check_connection_limit(connection_limited.port, 4, "lookup", cluster_info, awaiting_its_request)


async def test_a_proxys_live_connections_from_one_address_are_limited_and_released_when_their_calls_end(
    connection_limited: StandaloneProcess,
) -> None:
    await check_connection_limit(connection_limited.proxy_port, 2, f"proxy 127.0.0.1:{connection_limited.proxy_port}",
                                 cluster_info, consuming)


async def test_calls_multiplexed_on_one_connection_count_once(connection_limited: StandaloneProcess) -> None:
    channel = own_connection(connection_limited.broker_port)
    try:
        counts = await asyncio.gather(*(list_tenants(channel) for _ in range(50)))
        assert all("public" in tenants for tenants in counts)
    finally:
        await channel.close()


# ---- gRPC max receive size, on every server ----

@pytest.fixture(scope="module")
def small_requests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Every server of the standalone takes requests of at most 256 KiB (and the broker messages of
    at most 128 KiB, which it checks fit); the broker keeps at most 2 sends of a producer stream
    without receipts, and partitioned topics of at most 3 partitions."""
    services = ("LOOKUP", "PROXY", "STORAGE")
    with running_standalone(
        tmp_path_factory.mktemp("small") / "data", grpc_max_receive_message_bytes=SMALL_GRPC_LIMIT,
        max_message_size=SMALL_GRPC_LIMIT // 2, max_pending_sends=2, max_partitions_per_topic=3,
        extra_env={f"HERALD_{service}_GRPC_MAX_RECEIVE_MESSAGE_BYTES": str(SMALL_GRPC_LIMIT) for service in services},
    ) as server:
        yield server


async def test_every_server_refuses_a_request_over_its_grpc_receive_limit_and_serves_the_next(
    small_requests: StandaloneProcess,
) -> None:
    huge = "x" * (SMALL_GRPC_LIMIT + 1)
    calls: list[tuple[int, Callable[[grpc.aio.Channel, str], Awaitable[object]]]] = [
        (small_requests.port, lambda channel, name: lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=name), timeout=10)),
        (small_requests.proxy_port, lambda channel, name: lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=name), timeout=10)),
        (small_requests.broker_port, lambda channel, name: broker_pb2_grpc.BrokerServiceStub(channel).GetLastMessageId(
            broker_pb2.GetLastMessageIdRequest(topic=name), timeout=10)),
        # Storage's requests hold numbers only: the bulk rides in an unknown field.
        (small_requests.storage_port, lambda channel, name: channel.unary_unary(
            "/herald.v1.StorageService/ReadLastAddConfirmed",
            response_deserializer=storage_pb2.LacResponse.FromString)(
            storage_pb2.LacRequest(ledger_id=987654).SerializeToString() + with_unknown_field(name.encode()),
            timeout=10)),
    ]
    for port, call in calls:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(channel, huge)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (port, refused.value)
            error = error_from_rpc(refused.value)
            assert isinstance(error, MessageTooLargeError) and not error.retryable
            assert "grpc_max_receive_message_bytes" in str(error)
            try:  # the same connection serves a normal request
                await call(channel, unique_name("small"))
            except grpc.aio.AioRpcError as exc:
                assert exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED, (port, exc)
    await produce_and_consume(small_requests, 20)


def with_unknown_field(data: bytes) -> bytes:
    """Protobuf bytes of field 15 (length-delimited), which no request of Herald's has."""
    length, varint = len(data), bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        varint.append(byte | (0x80 if length else 0))
        if not length:
            return bytes([15 << 3 | 2]) + bytes(varint) + data


async def produce_and_consume(server: StandaloneProcess, count: int) -> None:
    """Another client still works: `count` messages produced and consumed in order."""
    topic = unique_name("still-works")
    async with AsyncClient(server.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, batching_enabled=False)
        futures = [await producer.send_async(b"%d" % i) for i in range(count)]
        await producer.flush()
        for future in futures:
            future.result()
        for i in range(count):
            message = await consumer.receive(timeout=DEADLINE)
            assert message is not None and message.data() == b"%d" % i
            consumer.acknowledge(message)


# ---- pending sends per producer stream ----

def throttled_sends(server: StandaloneProcess) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "herald_broker_throttled_sends":
            return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
    raise AssertionError("herald_broker_throttled_sends is not exported")


async def test_a_producer_stream_past_max_pending_sends_is_paused_and_loses_nothing(
    small_requests: StandaloneProcess,
) -> None:
    before = throttled_sends(small_requests)
    # Unbatched sends: each is one entry on the stream, far more than 2 waiting at once.
    await produce_and_consume(small_requests, 300)
    assert throttled_sends(small_requests) > before


async def test_a_raw_stream_writing_ahead_of_its_receipts_gets_every_receipt_in_order(
    small_requests: StandaloneProcess,
) -> None:
    async with WireClient(small_requests.port) as wire:
        topic = unique_name("raw-ahead")
        producer = await wire.producer(topic)
        for sequence_id in range(40):  # written without waiting for receipts
            await producer.stream.send(broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
                sequence_id=sequence_id, highest_sequence_id=sequence_id, num_messages=1,
                entry=make_entry(producer.name, sequence_id, b"v%d" % sequence_id))))
        receipts = [await producer.stream.reply() for _ in range(40)]
        assert all(reply.HasField("receipt") for reply in receipts), receipts
        assert [reply.receipt.sequence_id for reply in receipts] == list(range(40))
        await producer.close()


# ---- topics per namespace ----

@pytest.fixture
async def admin(small_requests: StandaloneProcess) -> AsyncIterator[AdminClient]:
    async with AdminClient(small_requests.service_url, timeout=20) as client:
        yield client


async def test_a_namespace_at_max_topics_refuses_one_more_topic_however_it_is_made(
    small_requests: StandaloneProcess, admin: AdminClient,
) -> None:
    tenant = unique_name("limited")
    await admin.create_tenant(tenant)
    namespace = f"{tenant}/ns"
    await admin.create_namespace(namespace, admin_pb2.Policies(max_topics=3))
    partitioned, first, second = (f"persistent://{namespace}/{name}" for name in ("p", "t1", "t2"))
    await admin.create_topic(partitioned, 2)  # 2 of 3
    limit = re.escape(f"namespace {namespace} has reached its limit of 3 topics (max_topics; it holds 3)")
    async with AsyncClient(small_requests.service_url, operation_timeout=20) as client:
        producer = await client.create_producer(first)  # auto-created: 3 of 3
        await producer.send(b"in")
        with pytest.raises(NotAllowedError, match=r"cannot create one more topic"):
            await client.create_producer(second)  # auto-creation refused, at once (final)
        with pytest.raises(NotAllowedError, match=limit):
            await client.subscribe(f"non-persistent://{namespace}/np", "s")
        with pytest.raises(NotAllowedError, match=limit):
            await admin.create_topic(second)
        with pytest.raises(NotAllowedError, match=limit):
            await admin.create_topic(f"persistent://{namespace}/p2", 1)
        with pytest.raises(NotAllowedError, match=r"cannot create one more topic"):
            await admin.update_partitions(partitioned, 3)
        # What exists keeps working: the partitions and the auto-created topic.
        for topic in (first, f"{partitioned}-partition-1"):
            other = await client.create_producer(topic)
            await other.send(b"still served")
        await producer.send(b"again")
        assert sorted(await admin.list_topics(namespace)) == sorted([first, partitioned])
        # A topic may not carry the limit; raising the namespace's lets one more in.
        with pytest.raises(InvalidArgumentError, match="max_topics is a namespace policy"):
            await admin.set_topic_policies(first, admin_pb2.Policies(max_topics=10))
        await admin.set_namespace_policies(namespace, admin_pb2.Policies(max_topics=4))
        await (await client.create_producer(second)).send(b"now it fits")
        with pytest.raises(NotAllowedError, match="limit of 4 topics"):
            await client.create_producer(f"persistent://{namespace}/t3")


# ---- partitions per topic ----

async def test_a_partitioned_topic_past_max_partitions_per_topic_is_refused(admin: AdminClient) -> None:
    topic, grown = (unique_topic("parts") for _ in range(2))
    with pytest.raises(NotAllowedError, match=re.escape(
            f"topic {topic} cannot have 4 partitions: the limit is 3 per topic (the broker setting "
            "max_partitions_per_topic)")):
        await admin.create_topic(topic, 4)
    await admin.create_topic(grown, 2)
    with pytest.raises(NotAllowedError, match="cannot have 4 partitions: the limit is 3"):
        await admin.update_partitions(grown, 4)
    assert await admin.update_partitions(grown, 3) == 3
    assert await admin.get_partitions(grown) == 3
    assert await admin.get_partitions(topic) == 0  # never made
