"""The client's connections against a real `herald standalone`: the pool (connections per broker,
handed out connected, dropped when they fail), lookups that follow redirects, and the clear errors
when a service cannot be reached.

Herald's own lookup knows every owner, so it never redirects; a proxy or a lookup in front of
several clusters would. The redirecting lookup here is a real gRPC server on loopback that answers
LookupTopic with a redirect to the standalone's lookup and passes the partition metadata on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.client import AsyncClient, InitialPosition
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool
from herald.common.errors import AlreadyClosedError, ConnectionError_, HeraldError

from tests.conftest import StandaloneProcess, free_port
from tests.helpers import unique_topic


class RedirectingLookup(lookup_pb2_grpc.LookupServiceServicer):
    """Sends every topic lookup on to `target` (redirect=True), as a lookup that does not own the
    answer would; partition metadata is asked of `metadata_from` (a real lookup) and passed back."""

    def __init__(self, target: str, metadata_from: str) -> None:
        self.target = target
        self.metadata_from = metadata_from
        self.redirected = 0

    async def LookupTopic(
        self, request: lookup_pb2.LookupTopicRequest, context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> lookup_pb2.LookupTopicResponse:
        self.redirected += 1
        return lookup_pb2.LookupTopicResponse(broker_address=self.target, redirect=True)

    async def GetPartitionedTopicMetadata(
        self, request: lookup_pb2.PartitionedTopicMetadataRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> lookup_pb2.PartitionedTopicMetadataResponse:
        async with grpc.aio.insecure_channel(self.metadata_from) as channel:
            reply: lookup_pb2.PartitionedTopicMetadataResponse = await lookup_pb2_grpc.LookupServiceStub(
                channel).GetPartitionedTopicMetadata(request)
            return reply


async def serve(servicer: lookup_pb2_grpc.LookupServiceServicer) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    lookup_pb2_grpc.add_LookupServiceServicer_to_server(servicer, server)
    address = f"127.0.0.1:{server.add_insecure_port(f'127.0.0.1:{free_port()}')}"
    await server.start()
    return server, address


@pytest.fixture
async def redirector(shared_standalone: StandaloneProcess) -> AsyncIterator[tuple[RedirectingLookup, str]]:
    lookup = f"127.0.0.1:{shared_standalone.port}"
    servicer = RedirectingLookup(lookup, lookup)
    server, address = await serve(servicer)
    yield servicer, address
    await server.stop(None)


async def test_lookups_follow_redirects_to_the_owner(redirector: tuple[RedirectingLookup, str]) -> None:
    servicer, address = redirector
    topic = unique_topic("connections")
    async with AsyncClient(f"herald://{address}") as client:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        sent = await producer.send(b"through a redirect")
        message = await consumer.receive(timeout=10)
        assert message is not None and (message.value, message.message_id) == (b"through a redirect", sent)
    assert servicer.redirected >= 2  # the producer's lookup and the consumer's


async def test_a_lookup_redirected_without_end_fails_clearly(shared_standalone: StandaloneProcess) -> None:
    servicer = RedirectingLookup("", f"127.0.0.1:{shared_standalone.port}")
    server, address = await serve(servicer)
    servicer.target = address  # every answer sends the client back here
    try:
        async with AsyncClient(f"herald://{address}", operation_timeout=5) as client:
            with pytest.raises(HeraldError, match="was redirected more than 20 times"):
                await client.create_producer(unique_topic("connections"))
    finally:
        await server.stop(None)


async def test_the_pool_keeps_connections_per_broker_connected_and_takes_them_in_turn(
    shared_standalone: StandaloneProcess,
) -> None:
    address = f"127.0.0.1:{shared_standalone.broker_port}"
    pool = ConnectionPool(ClientConfig(shared_standalone.service_url, connections_per_broker=3))
    try:
        handed = [await pool.get(address) for _ in range(6)]
        assert len({id(channel) for channel in handed}) == 3
        assert handed[:3] == handed[3:]  # in turn
        assert all(channel.get_state() is grpc.ChannelConnectivity.READY for channel in handed)
        pool.discard(address)  # a failed broker's channels are forgotten: the next get connects anew
        fresh = await pool.get(address)
        assert all(fresh is not channel for channel in handed)
    finally:
        await pool.close()
    with pytest.raises(AlreadyClosedError):
        await pool.get(address)


async def test_a_refused_connection_is_reported_at_once_not_after_the_connection_timeout() -> None:
    """Issue 21 item 5: a broker that died refuses connections; the pool says so at its first
    failed attempt, so a reconnecting stream asks lookup again instead of waiting out the connection
    timeout (10 s by default: most of the 10.9 s failover gap). The timeout here is far longer than
    the guard: the old pool, waiting for a connection that never comes, trips the guard."""
    address = f"127.0.0.1:{free_port()}"
    pool = ConnectionPool(ClientConfig(f"herald://{address}", connection_timeout=3600))
    try:
        async with asyncio.timeout(60):
            with pytest.raises(ConnectionError_, match=f"could not connect to {address}: the connection failed"):
                await pool.get(address)
    finally:
        await pool.close()


async def test_a_service_nobody_listens_on_fails_within_the_operation_timeout() -> None:
    async with AsyncClient(f"herald://127.0.0.1:{free_port()}", connection_timeout=0.5,
                           operation_timeout=2) as client:
        # Issue 22 item 4: nothing ever answered there, so the first connection's refusal is the
        # answer, at once (it used to be retried until the operation timeout).
        with pytest.raises(ConnectionError_, match=r"could not connect to 127\.0\.0\.1:\d+: the connection failed"):
            await client.create_producer(unique_topic("connections"))


async def test_a_client_survives_its_service_restarting(standalone: StandaloneProcess) -> None:
    """The pooled channel of the stopped process fails, is dropped, and a new one is made."""
    topic = unique_topic("connections")
    async with AsyncClient(standalone.service_url, operation_timeout=60) as client:
        producer = await client.create_producer(topic)
        await producer.send(b"before")
        standalone.restart()
        await producer.send(b"after")
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        got = [await consumer.receive(timeout=10) for _ in range(2)]
        assert [m.value for m in got if m is not None] == [b"before", b"after"]
