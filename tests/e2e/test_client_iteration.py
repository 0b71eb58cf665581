"""The client's loops and context managers (issue 22, item 7): `async for message in consumer`
(and reader) on the asyncio API, `for message in consumer` (and reader) on the blocking one, each
ending when the consumer is closed; `async with` / `with` close what they made. And the first
connection to a service URL where nothing listens fails at once (item 4)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from herald.client import AsyncClient, Client, ConnectionError_, InitialPosition, Message, MessageId

from tests.conftest import StandaloneProcess, free_port
from tests.helpers import eventually_sync, unique_topic


async def test_async_for_receives_each_message_and_ends_when_the_consumer_closes(
        shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("iterate")
    async with AsyncClient(shared_standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        async with await client.create_producer(topic) as producer:
            for number in range(3):
                await producer.send(f"m{number}".encode())
        assert producer.closed
        got: list[bytes] = []
        three = asyncio.Event()

        async def loop() -> None:
            async for message in consumer:
                got.append(message.data())
                consumer.acknowledge(message)
                if len(got) == 3:
                    three.set()

        task = asyncio.create_task(loop())
        async with asyncio.timeout(60):
            await three.wait()
            await consumer.close()
            await task  # the loop ended: closing is its end, not an error
    assert got == [b"m0", b"m1", b"m2"]


async def test_async_for_over_a_reader_and_async_with_closes_it(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("iterate-reader")
    async with AsyncClient(shared_standalone.service_url) as client:
        async with await client.create_producer(topic) as producer:
            for number in range(3):
                await producer.send(f"r{number}".encode())
        async with await client.create_reader(topic, MessageId.earliest) as reader:
            got: list[bytes] = []
            async with asyncio.timeout(60):
                async for message in reader:
                    got.append(message.data())
                    if len(got) == 3:
                        break
        assert reader.closed
        assert got == [b"r0", b"r1", b"r2"]
        async for _ in reader:  # a closed reader's loop ends at once
            pytest.fail("a closed reader yielded a message")


def test_for_over_a_blocking_consumer_ends_when_another_thread_closes_it(
        shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("iterate-sync")
    with Client(shared_standalone.service_url) as client:
        with client.create_producer(topic) as producer:
            for number in range(3):
                producer.send(f"s{number}".encode())
        assert producer.closed
        consumer = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        got: list[bytes] = []

        def loop() -> None:
            message: Message[bytes]
            for message in consumer:
                got.append(message.data())
                consumer.acknowledge(message)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        eventually_sync(lambda: len(got) == 3, "three messages received", until=bool)
        consumer.close()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the loop did not end when the consumer closed"
    assert got == [b"s0", b"s1", b"s2"]


def test_for_over_a_blocking_reader_and_with_closes_it(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("iterate-sync-reader")
    with Client(shared_standalone.service_url) as client:
        with client.create_producer(topic) as producer:
            producer.send(b"one")
            producer.send(b"two")
        with client.create_reader(topic, MessageId.earliest) as reader:
            got = []
            for message in reader:
                got.append(message.data())
                if len(got) == 2:
                    break
        assert reader.closed
        assert list(reader) == []  # closed: the loop ends at once
        with client.subscribe(topic, "w", initial_position=InitialPosition.Earliest) as consumer:
            assert consumer.receive(timeout=30) is not None
        assert consumer.closed
    assert got == [b"one", b"two"]


@pytest.mark.parametrize("scheme", ["herald", "herald+ssl"])
async def test_the_first_connection_to_a_refused_address_fails_at_once(scheme: str) -> None:
    """Nothing listens on the service URL: creating a producer, a consumer or a reader raises
    ConnectionError_ naming the address at once, long before the operation timeout (an hour here,
    so the old client, which retried until that timeout, trips the test's guard instead). Over TLS
    the client first fetches the server's certificate: that refusal is the same answer."""
    address = f"127.0.0.1:{free_port()}"
    await _fails_at_once(f"{scheme}://{address}", f"could not connect to {address}: the connection failed "
                                                  r"at once \(connection refused")


@pytest.mark.parametrize("scheme", ["herald", "herald+ssl"])
async def test_the_first_connection_to_a_host_that_does_not_resolve_fails_at_once(scheme: str) -> None:
    """A mistyped host name: the resolver's "no such name" is an answer too (the .invalid domain
    never resolves, RFC 2606). A resolver that fails for now would be retried."""
    address = f"no-such-host.invalid:{free_port()}"
    await _fails_at_once(f"{scheme}://{address}", f"could not connect to {address}: the connection failed at once "
                                                  r"\(the host no-such-host\.invalid is not known")


async def _fails_at_once(url: str, error: str) -> None:
    async with AsyncClient(url, operation_timeout=3600) as client:
        for making in (lambda: client.create_producer("t"), lambda: client.subscribe("t", "s"),
                       lambda: client.create_reader("t", MessageId.earliest)):
            started = time.perf_counter()
            async with asyncio.timeout(60):
                with pytest.raises(ConnectionError_, match=error):
                    await making()
            print(f"AsyncClient failed in {time.perf_counter() - started:.3f}s")


def test_the_blocking_client_fails_at_once_too() -> None:
    address = f"127.0.0.1:{free_port()}"
    with Client(f"herald://{address}", operation_timeout=3600) as client:
        started = time.perf_counter()
        with pytest.raises(ConnectionError_, match=f"could not connect to {address}") as raised:
            client.create_producer("t")
        print(f"Client refused in {time.perf_counter() - started:.3f}s: {raised.value}")
        assert not raised.value.retryable
