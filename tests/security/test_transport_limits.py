"""Transport limits of `herald standalone` with TLS, token authentication and authorization on,
driven through raw gRPC channels (an attacker's view) and the client (issue 16, items 6 to 8):

- memory before authentication: an unauthenticated call is refused from its metadata before its
  request is read, so the process's peak RSS does not grow by the bodies sent; each server's
  receive limit fits its requests, requests of methods that carry no data have a limit of their
  own, and a connection holds at most max_streams_per_connection streams (HTTP/2
  SETTINGS_MAX_CONCURRENT_STREAMS: the next one waits in the client);
- connection counting: only live (a call in progress), authenticated connections count, so an
  attacker's refused connections leave the address's places to legitimate clients at once;
- producer and consumer properties are capped in number and bytes.

Peak RSS is the standalone's VmHWM (/proc/<pid>/status), reset before each measure by writing 5
to /proc/<pid>/clear_refs; the bounds are generous and never about time."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from herald.api.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, common_pb2, lookup_pb2, lookup_pb2_grpc, storage_pb2
from herald.client import (
    AsyncClient,
    AuthenticationToken,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    InvalidArgumentError,
)
from herald.client.admin import AdminClient
from herald.common.errors import MessageTooLargeError, TooManyRequestsError
from herald.common.transport.rpc import error_from_rpc

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name, unique_topic
from tests.security.conftest import ADMIN, Keys, Pki, secure_process
from tests.wire import values_of

MIB = 1024 * 1024
DEADLINE = 30.0
Metadata = tuple[tuple[str, str], ...]
Held = grpc.aio.StreamStreamCall  # type: ignore[type-arg]


# ---- helpers ----


def tls_channel(port: int, pki: Pki) -> grpc.aio.Channel:
    """A TLS channel with a TCP connection of its own, that sends requests of any size."""
    return grpc.aio.secure_channel(
        f"127.0.0.1:{port}", grpc.ssl_channel_credentials(pki.ca_cert.read_bytes()),
        options=[("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", -1)])


def bearer(keys: Keys, role: str = ADMIN) -> Metadata:
    return (("authorization", f"Bearer {keys.token(role)}"),)


def _varint(value: int) -> bytes:
    encoded = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        encoded.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(encoded)


def padded(request: bytes, size: int) -> bytes:
    """`request` with an unknown field (15, which no request of Herald's has) making it exactly
    `size` bytes: a valid request, as large as wanted."""
    data_length = size - len(request) - 1 - len(_varint(size))
    while len(request) + 1 + len(_varint(data_length)) + data_length < size:
        data_length += 1
    return request + bytes([15 << 3 | 2]) + _varint(data_length) + b"x" * data_length


async def call_raw(channel: grpc.aio.Channel, method: str, request: bytes, metadata: Metadata = ()) -> bytes:
    reply: bytes = await channel.unary_unary(method)(request, metadata=metadata, timeout=DEADLINE)
    return reply


LIST_TENANTS = "/herald.v1.AdminService/ListTenants"
CLUSTER_INFO = "/herald.v1.LookupService/GetClusterInfo"
LOOKUP_TOPIC = "/herald.v1.LookupService/LookupTopic"


def reset_peak_rss(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux >= 4.0: the peak becomes the current RSS


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def pid_of(server: StandaloneProcess) -> int:
    assert server.proc is not None
    return server.proc.pid


async def refused_unread(port: int, pki: Pki, method: str, request: bytes) -> grpc.StatusCode:
    """An unauthenticated call on a connection of its own; the status it ended with."""
    async with tls_channel(port, pki) as channel:
        try:
            await call_raw(channel, method, request)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def client(server: StandaloneProcess, pki: Pki, keys: Keys, url: str | None = None, **options: Any) -> AsyncClient:
    return AsyncClient(url or server.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                       tls_trust_certs_file_path=str(pki.ca_cert),
                       **{"operation_timeout": 5.0, "connection_timeout": 2.0, "stats_interval": 0, **options})


async def round_trip(herald: AsyncClient, payload: bytes = b"hello") -> None:
    topic = unique_topic("limits")
    consumer = await herald.subscribe(topic, "s")
    producer = await herald.create_producer(topic, batching_enabled=False)
    await producer.send(payload)
    message = await consumer.receive(timeout=DEADLINE)
    assert message is not None and message.data() == payload
    consumer.acknowledge(message)
    await producer.close()
    await consumer.close()


# ---- item 6: memory before authentication ----

@pytest.fixture
def fresh_standalone(tmp_path: Path, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    """A secure standalone of the test's own: its peak RSS is what this test made it (memory an
    earlier test had it take and free would be reused unseen)."""
    server = secure_process(tmp_path / "data", pki, keys)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_unauthenticated_60_mib_calls_are_refused_unread_and_the_process_does_not_grow(
    fresh_standalone: StandaloneProcess, pki: Pki,
) -> None:
    """The issue's attack: 60 MiB unary calls without credentials (8 at once: 480 MiB sent) to the
    proxy, the broker and lookup. Each is refused UNAUTHENTICATED from its metadata, none is read."""
    secure_standalone = fresh_standalone
    pid = pid_of(secure_standalone)
    body = padded(admin_pb2.ListTenantsRequest().SerializeToString(), 60 * MIB)
    lookup_body = padded(lookup_pb2.ClusterInfoRequest().SerializeToString(), 60 * MIB)
    reset_peak_rss(pid)
    before = peak_rss(pid)
    codes = await asyncio.gather(
        *(refused_unread(secure_standalone.proxy_port, pki, LIST_TENANTS, body) for _ in range(4)),
        *(refused_unread(secure_standalone.broker_port, pki, LIST_TENANTS, body) for _ in range(2)),
        *(refused_unread(secure_standalone.port, pki, CLUSTER_INFO, lookup_body) for _ in range(2)))
    grown = peak_rss(pid) - before
    print(f"8 unauthenticated 60 MiB calls: peak RSS grew by {grown / MIB:.1f} MiB")
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 8
    assert grown < 60 * MIB, f"peak RSS grew by {grown / MIB:.0f} MiB: a request body was read"


async def test_unauthenticated_calls_within_the_receive_limits_are_refused_before_they_are_read(
    fresh_standalone: StandaloneProcess, pki: Pki,
) -> None:
    """Bodies that the receive limits let through (16 per server, just under each: 296 MiB in all)
    are not read either: refusing them is a matter of authentication, not size."""
    secure_standalone = fresh_standalone
    pid = pid_of(secure_standalone)
    data = padded(admin_pb2.ListTenantsRequest().SerializeToString(), 7 * MIB + MIB // 2)
    lookup = padded(lookup_pb2.ClusterInfoRequest().SerializeToString(), 3 * MIB + MIB // 2)
    reset_peak_rss(pid)
    before = peak_rss(pid)
    codes = await asyncio.gather(
        *(refused_unread(secure_standalone.proxy_port, pki, LIST_TENANTS, data) for _ in range(16)),
        *(refused_unread(secure_standalone.broker_port, pki, LIST_TENANTS, data) for _ in range(16)),
        *(refused_unread(secure_standalone.port, pki, CLUSTER_INFO, lookup) for _ in range(16)))
    grown = peak_rss(pid) - before
    print(f"48 unauthenticated calls under the receive limits: peak RSS grew by {grown / MIB:.1f} MiB")
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 48
    # What arrived within HTTP/2 flow control before the refusal (about a MiB a connection), and the
    # connections themselves: not the bodies (read, they take the 296 MiB and more).
    assert grown < 120 * MIB, f"peak RSS grew by {grown / MIB:.0f} MiB: request bodies were read"


async def test_a_request_past_its_methods_limit_is_refused_before_it_is_parsed_and_data_is_not_limited(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    """Authenticated: an admin or storage call takes at most 1 MiB, a lookup 64 KiB (the servers'
    gRPC limits are the size of their data); a 4.5 MiB message still goes through, directly and
    through the proxy."""
    auth = bearer(keys)
    server = secure_standalone
    cases = [
        (server.broker_port, LIST_TENANTS, admin_pb2.ListTenantsRequest().SerializeToString(), MIB),
        (server.proxy_port, LIST_TENANTS, admin_pb2.ListTenantsRequest().SerializeToString(), MIB),
        (server.port, LOOKUP_TOPIC, lookup_pb2.LookupTopicRequest(topic="t").SerializeToString(), 64 * 1024),
        (server.proxy_port, LOOKUP_TOPIC, lookup_pb2.LookupTopicRequest(topic="t").SerializeToString(), MIB),
        (server.storage_port, "/herald.v1.StorageService/ReadLastAddConfirmed",
         storage_pb2.LacRequest(ledger_id=987654).SerializeToString(), MIB),
    ]
    for port, method, request, limit in cases:
        async with tls_channel(port, pki) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call_raw(channel, method, padded(request, limit + 1), auth)
            error = error_from_rpc(refused.value)
            assert isinstance(error, MessageTooLargeError), (port, method, refused.value)
            assert f"{method}: the request takes {limit + 1} bytes, more than the {limit} this method accepts" \
                in str(error), error
            try:  # under the limit, the same method on the same connection is served
                await call_raw(channel, method, padded(request, limit - 100), auth)
            except grpc.aio.AioRpcError as exc:
                assert not isinstance(error_from_rpc(exc), MessageTooLargeError), (port, method, exc)
    for url in (server.service_url, server.proxy_url):
        async with client(server, pki, keys, url) as herald:
            await round_trip(herald, b"m" * (4 * MIB + MIB // 2))


# ---- item 6: streams per connection ----

@pytest.fixture(scope="module")
def stream_capped(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    """Broker and proxy connections hold at most 2 streams each."""
    server = secure_process(tmp_path_factory.mktemp("streams") / "data", pki, keys, {
        "HERALD_BROKER_MAX_STREAMS_PER_CONNECTION": "2", "HERALD_PROXY_MAX_STREAMS_PER_CONNECTION": "2"})
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _read_exactly(connection: ssl.SSLSocket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise AssertionError("the server closed the connection before its SETTINGS")
        data += chunk
    return data


def advertised_max_streams(port: int, pki: Pki) -> int | None:
    """SETTINGS_MAX_CONCURRENT_STREAMS of the server's first SETTINGS frame (None: not sent, no
    limit), read over TLS with HTTP/2 (ALPN h2): what every client connection is held to."""
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as connection:
        empty_settings = (0).to_bytes(3, "big") + bytes([0x4, 0]) + (0).to_bytes(4, "big")
        connection.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + empty_settings)
        while True:
            header = _read_exactly(connection, 9)
            length, kind, flags = int.from_bytes(header[:3], "big"), header[3], header[4]
            payload = _read_exactly(connection, length)
            if kind == 0x4 and not flags & 0x1:  # SETTINGS, not an acknowledgement
                settings = {int.from_bytes(payload[i:i + 2], "big"): int.from_bytes(payload[i + 2:i + 6], "big")
                            for i in range(0, len(payload), 6)}
                return settings.get(0x3)


async def subscribed(channel: grpc.aio.Channel, topic: str, auth: Metadata) -> Held:
    """A Consume stream subscribed to `topic` (a subscription of its own), with permits."""
    call = broker_pb2_grpc.BrokerServiceStub(channel).Consume(metadata=auth)
    await call.write(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
        topic=topic, subscription=unique_name("s"), type=broker_pb2.SHARED)))
    reply = await asyncio.wait_for(call.read(), DEADLINE)
    assert reply.HasField("subscribed"), reply
    await call.write(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=100)))
    return call


async def delivered(call: Held) -> broker_pb2.DeliveredEntry:
    while True:
        reply = await asyncio.wait_for(call.read(), DEADLINE)
        if reply.HasField("entries"):
            return reply.entries.entries[0]  # type: ignore[no-any-return]


async def test_a_connection_holds_at_most_max_streams_per_connection_and_the_next_stream_waits(
    stream_capped: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    server = stream_capped
    # Every connection is told the cap: 2 where set, the default elsewhere.
    limits = [await asyncio.to_thread(advertised_max_streams, port, pki)
              for port in (server.broker_port, server.proxy_port, server.port, server.storage_port)]
    assert limits == [2, 2, 4096, 4096]
    auth = bearer(keys)
    topic = unique_topic("limits")
    async with tls_channel(server.port, pki) as lookup:
        await lookup_pb2_grpc.LookupServiceStub(lookup).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=topic), metadata=auth, timeout=DEADLINE)
    async with tls_channel(server.broker_port, pki) as channel, client(server, pki, keys) as herald:
        first, second = await subscribed(channel, topic, auth), await subscribed(channel, topic, auth)
        third = asyncio.create_task(subscribed(channel, topic, auth))
        producer = await herald.create_producer(topic, batching_enabled=False)  # a connection of its own
        await producer.send(b"one")
        # The two streams work on while the third waits for a place (in the client's gRPC): after
        # their round trip, which began after the third was opened, it has had no answer.
        assert [values_of(await delivered(call)) for call in (first, second)] == [[b"one"], [b"one"]]
        assert not third.done(), "a third stream was served on a connection capped at 2"
        first.cancel()
        third_call = await asyncio.wait_for(third, DEADLINE)  # in once the first ended
        await producer.send(b"two")
        assert [values_of(await delivered(call)) for call in (second, third_call)] == [[b"two"]] * 2
        second.cancel()
        third_call.cancel()


# ---- item 7: only live, authenticated connections count ----

@pytest.fixture(scope="module")
def connection_limited(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    """At most 4 live connections per client address to the broker and lookup (the standalone's own
    proxy and dlq-worker share 127.0.0.1 with the tests), 2 to the proxy; the idle timeout is the
    default 300 s; the dlq-worker runs."""
    server = secure_process(tmp_path_factory.mktemp("connections") / "data", pki, keys, {
        "HERALD_BROKER_MAX_CONNECTIONS_PER_ADDRESS": "4", "HERALD_LOOKUP_MAX_CONNECTIONS_PER_ADDRESS": "4",
        "HERALD_PROXY_MAX_CONNECTIONS_PER_ADDRESS": "2"}, dlq_worker=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def nacking(consumer: Any) -> None:
    while True:
        consumer.negative_acknowledge(await consumer.receive())


async def dead_letter_moved(herald: AsyncClient) -> None:
    """A message nacked past its subscription's max_redeliver_count reaches its dead-letter topic:
    the standalone's dlq-worker took it from the broker and published it."""
    topic = unique_topic("limits")
    dead_letters = await herald.subscribe(f"{topic}-s-DLQ", "check", initial_position=InitialPosition.Earliest)
    consumer = await herald.subscribe(topic, "s", ConsumerType.Shared, InitialPosition.Earliest,
                                      negative_ack_redelivery_delay=0.05, dead_letter_policy=DeadLetterPolicy(1))
    nacks = asyncio.create_task(nacking(consumer))
    try:
        producer = await herald.create_producer(topic)
        await producer.send(b"dead")
        moved = await dead_letters.receive(timeout=DEADLINE)
        assert moved is not None and moved.data() == b"dead"
    finally:
        nacks.cancel()
        await asyncio.gather(nacks, return_exceptions=True)


async def test_unauthenticated_connections_past_the_limit_leave_legitimate_clients_served_at_once(
    connection_limited: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    """An attacker makes 10 connections to each of lookup, the broker and the proxy from 127.0.0.1
    (past every limit), each call refused for want of credentials, and hangs up. A legitimate
    client from the same address is served at once (directly and through the proxy), and the
    standalone's own proxy and dlq-worker work on."""
    server = connection_limited
    refusals: list[tuple[int, grpc.StatusCode, str]] = []
    for port, method in ((server.port, CLUSTER_INFO), (server.broker_port, LIST_TENANTS),
                         (server.proxy_port, CLUSTER_INFO)):
        channels = [tls_channel(port, pki) for _ in range(10)]
        try:
            for channel in channels:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call_raw(channel, method, b"")
                refusals.append((port, refused.value.code(), refused.value.details() or ""))
        finally:
            for channel in channels:  # the attacker hangs up
                await channel.close()
    async with client(server, pki, keys) as direct:
        await round_trip(direct)
        await dead_letter_moved(direct)
    async with client(server, pki, keys, server.proxy_url) as proxied:
        await round_trip(proxied)
    assert {code for _, code, _ in refusals} == {grpc.StatusCode.UNAUTHENTICATED}, refusals


async def held_consumer(channel: grpc.aio.Channel, auth: Metadata, topic: str) -> Held:
    call = broker_pb2_grpc.BrokerServiceStub(channel).Consume(metadata=auth)
    await call.write(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
        topic=topic, subscription=unique_name("held"), type=broker_pb2.SHARED)))
    reply = await asyncio.wait_for(call.read(), DEADLINE)
    assert reply.HasField("subscribed"), reply
    return call


async def check_live_limit(port: int, limit: int, service: str, pki: Pki, keys: Keys, topic: str) -> None:
    """Authenticated connections each holding a Consume stream fill the address's places (with the
    standalone's own live connections); a call on one more authenticated connection is refused
    naming the limit, while an unauthenticated one is refused for its credentials; once a held
    stream ends, the refused connection gets in."""
    auth = bearer(keys)
    held: list[tuple[grpc.aio.Channel, Held]] = []
    extra = tls_channel(port, pki)
    try:
        for _ in range(limit):
            channel = tls_channel(port, pki)
            try:
                held.append((channel, await held_consumer(channel, auth, topic)))
            except grpc.aio.AioRpcError as exc:  # the standalone's own connections hold the other places
                if exc.code() == grpc.StatusCode.INTERNAL:
                    # The refusal closed the connection while the client was still writing its
                    # request (grpc reports the failed write, not the status): ask once more.
                    await channel.close()
                    channel = tls_channel(port, pki)
                    with pytest.raises(grpc.aio.AioRpcError) as again:
                        held.append((channel, await held_consumer(channel, auth, topic)))
                    exc = again.value
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                await channel.close()
                break
        assert held, "no authenticated connection was admitted"

        async def refusal() -> TooManyRequestsError | None:
            try:
                await call_raw(extra, LIST_TENANTS, b"", auth)
            except grpc.aio.AioRpcError as exc:
                error = error_from_rpc(exc)
                assert isinstance(error, TooManyRequestsError), exc
                return error
            return None

        error = await eventually(refusal, f"a call on one connection past {service}'s limit refused")
        assert f"{service} has reached its limit of {limit} connections from client address ipv4:127.0.0.1 " \
               "(max_connections_per_address)" in str(error)
        assert await refused_unread(port, pki, LIST_TENANTS, b"") == grpc.StatusCode.UNAUTHENTICATED
        for channel, _ in held:  # the live connections are served
            await call_raw(channel, LIST_TENANTS, b"", auth)
        channel, stream = held.pop()
        stream.cancel()
        await channel.close()

        async def gets_in() -> bool | None:
            try:
                await call_raw(extra, LIST_TENANTS, b"", auth)
            except grpc.aio.AioRpcError as exc:
                assert isinstance(error_from_rpc(exc), TooManyRequestsError), exc
                return None
            return True

        await eventually(gets_in, "the refused connection admitted once a held stream ended")
    finally:
        for channel, stream in held:
            stream.cancel()
            await channel.close()
        await extra.close()


async def test_live_authenticated_connections_past_the_limit_are_still_refused(
    connection_limited: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    server = connection_limited
    topic = unique_topic("limits")
    async with tls_channel(server.port, pki) as lookup:
        await lookup_pb2_grpc.LookupServiceStub(lookup).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=topic), metadata=bearer(keys), timeout=DEADLINE)
    await check_live_limit(server.broker_port, 4, "broker", pki, keys, topic)
    await check_live_limit(server.proxy_port, 2, f"proxy 127.0.0.1:{server.proxy_port}", pki, keys, topic)


# ---- item 8: producer and consumer properties ----

@pytest.fixture
async def wire_broker(secure_standalone: StandaloneProcess,
                      pki: Pki) -> AsyncIterator[broker_pb2_grpc.BrokerServiceStub]:
    async with tls_channel(secure_standalone.broker_port, pki) as channel:
        yield broker_pb2_grpc.BrokerServiceStub(channel)


TOO_MANY = {f"k{i}": "v" for i in range(65)}
TOO_LARGE = {"a": "x" * (40 * 1024), "b": "y" * (40 * 1024)}
HUGE = {"blob": "z" * (7 * MIB)}  # what a receive limit lets through, and far more than the broker keeps


async def registration_error(stub: broker_pb2_grpc.BrokerServiceStub, auth: Metadata,
                             properties: dict[str, str]) -> str:
    call = stub.Produce(metadata=auth)
    await call.write(broker_pb2.ProduceRequest(register=broker_pb2.RegisterProducer(
        topic=unique_topic("limits"), properties=properties)))
    reply = await asyncio.wait_for(call.read(), DEADLINE)
    call.cancel()
    assert reply.HasField("error") and reply.error.code == common_pb2.INVALID_ARGUMENT, reply
    return reply.error.message  # type: ignore[no-any-return]


async def subscription_error(stub: broker_pb2_grpc.BrokerServiceStub, auth: Metadata,
                             properties: dict[str, str]) -> str:
    call = stub.Consume(metadata=auth)
    await call.write(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
        topic=unique_topic("limits"), subscription="s", properties=properties)))
    reply = await asyncio.wait_for(call.read(), DEADLINE)
    call.cancel()
    assert reply.HasField("error") and reply.error.code == common_pb2.INVALID_ARGUMENT, reply
    return reply.error.message  # type: ignore[no-any-return]


async def test_producers_and_consumers_with_too_many_or_too_large_properties_are_refused(
    wire_broker: broker_pb2_grpc.BrokerServiceStub, keys: Keys,
) -> None:
    auth = bearer(keys)
    count = "properties are 65 pairs, more than the limit of 64 (max_properties): give fewer properties"
    size = ("properties take 81922 bytes, more than the limit of 65536 (max_properties_bytes): give smaller keys "
            "and values")
    huge = f"properties take {7 * MIB + 4} bytes, more than the limit of 65536 (max_properties_bytes)"
    assert await registration_error(wire_broker, auth, TOO_MANY) == f"a producer's {count}"
    assert await registration_error(wire_broker, auth, TOO_LARGE) == f"a producer's {size}"
    assert huge in await registration_error(wire_broker, auth, HUGE)
    assert await subscription_error(wire_broker, auth, TOO_MANY) == f"a consumer's {count}"
    assert await subscription_error(wire_broker, auth, TOO_LARGE) == f"a consumer's {size}"
    # A Consume stream's requests take 1 MiB at most (Produce's carry messages): refused unparsed.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await subscription_error(wire_broker, auth, HUGE)
    error = error_from_rpc(refused.value)
    assert isinstance(error, MessageTooLargeError), refused.value
    assert "more than the 1048576 this method accepts" in str(error)


async def test_the_client_refuses_too_many_properties_before_asking_and_takes_what_fits(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    topic = unique_topic("limits")
    fits = {f"k{i:02}": "v" * 900 for i in range(64)}  # 64 pairs, 57,856 bytes
    async with client(secure_standalone, pki, keys) as herald:
        with pytest.raises(InvalidArgumentError, match=r"a producer's properties are 65 pairs, more than the limit "
                                                       r"of 64 \(max_properties\)"):
            await herald.create_producer(topic, properties=TOO_MANY)
        with pytest.raises(InvalidArgumentError, match=r"a consumer's properties take 81922 bytes, more than the "
                                                       r"limit of 65536 \(max_properties_bytes\)"):
            await herald.subscribe(topic, "s", properties=TOO_LARGE)
        producer = await herald.create_producer(topic, properties=fits)
        consumer = await herald.subscribe(topic, "s", properties=fits)
        async with AdminClient(secure_standalone.service_url, timeout=10, auth=AuthenticationToken(keys.token(ADMIN)),
                               tls_trust_certs_file_path=str(pki.ca_cert)) as admin:
            stats = await admin.topic_stats(topic)
        assert [dict(p.properties) for p in stats.producers] == [fits]
        assert [dict(c.properties) for s in stats.subscriptions for c in s.consumer_stats] == [fits]
        await producer.close()
        await consumer.close()
