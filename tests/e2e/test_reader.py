"""The reader against a real `herald standalone`, through the client API (asyncio and blocking):
starting at the earliest, the latest or a message id, that message included or not (inside a batch
too); has_message_available on an empty topic, mid-way and at the end; seek to an id, a time or an
end; a reader acknowledges nothing and its non-durable subscription goes with it; a reconnect
resumes after the last message read; listeners; partitioned topics refused; bad start ids."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from typing import Any

import pytest
from herald.client import (
    AsyncClient,
    AsyncReader,
    Client,
    ConsumerClosedError,
    InvalidArgumentError,
    Message,
    MessageId,
    NotAllowedError,
    Reader,
    StringSchema,
)
from herald.client.admin import AdminClient
from herald.common.errors import NotFoundError

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_topic

EARLIEST, LATEST = MessageId.earliest, MessageId.latest


async def publish(client: AsyncClient, topic: str, *values: bytes) -> list[MessageId]:
    """One unbatched entry per value."""
    producer = await client.create_producer(topic, batching_enabled=False)
    ids = [await producer.send(value) for value in values]
    await producer.close()
    return ids


async def publish_batch(client: AsyncClient, topic: str, *values: bytes) -> list[MessageId]:
    """One entry holding every value as a batch."""
    producer = await client.create_producer(topic, batching_max_publish_delay=60)
    futures = [await producer.send_async(value) for value in values]
    await producer.flush()
    await producer.close()
    ids = [future.result() for future in futures]
    assert len({(i.ledger_id, i.entry_id) for i in ids}) == 1 and [i.batch_index for i in ids] == list(range(len(ids)))
    return ids


async def read(reader: AsyncReader[Any], count: int) -> list[bytes]:
    got = []
    for _ in range(count):
        message = await reader.read_next(timeout=10)
        assert message is not None, f"only {len(got)} of {count} messages read"
        got.append(message.data())
    return got


async def read_all(reader: AsyncReader[Any]) -> list[bytes]:
    """What the reader reads until nothing comes for a moment."""
    got = []
    while (message := await reader.read_next(timeout=0.3)) is not None:
        got.append(message.data())
    return got


# ---- where it starts ----

async def test_a_reader_starts_at_the_earliest_the_latest_or_a_message_id_included_or_not(
    client: AsyncClient,
) -> None:
    topic = unique_topic("reader")
    ids = await publish(client, topic, b"a", b"b", b"c")
    earliest = await client.create_reader(topic, EARLIEST)
    latest = await client.create_reader(topic, LATEST)
    inclusive = await client.create_reader(topic, ids[1], start_message_id_inclusive=True)
    exclusive = await client.create_reader(topic, ids[1])
    assert await read(earliest, 3) == [b"a", b"b", b"c"]
    assert await read(inclusive, 2) == [b"b", b"c"]
    assert await read(exclusive, 1) == [b"c"]
    await publish(client, topic, b"d")
    for reader in (earliest, latest, inclusive, exclusive):
        assert await read_all(reader) == [b"d"]


async def test_a_start_inside_a_batch_reads_from_that_message_or_the_next(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    ids = await publish_batch(client, topic, b"x0", b"x1", b"x2", b"x3")
    inclusive = await client.create_reader(topic, ids[1], start_message_id_inclusive=True)
    exclusive = await client.create_reader(topic, ids[1])
    at_end = await client.create_reader(topic, ids[3])
    assert await read_all(inclusive) == [b"x1", b"x2", b"x3"]
    assert await read_all(exclusive) == [b"x2", b"x3"]
    assert not await at_end.has_message_available()
    assert await read_all(at_end) == []
    await publish(client, topic, b"y")
    assert await at_end.has_message_available()
    assert await read_all(at_end) == [b"y"]


async def test_the_latest_included_is_the_last_message(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    empty = await client.create_reader(topic, LATEST, start_message_id_inclusive=True)
    await publish(client, topic, b"a", b"b")
    last = await client.create_reader(topic, LATEST, start_message_id_inclusive=True)
    await publish_batch(client, topic, b"c0", b"c1", b"c2")
    last_of_batch = await client.create_reader(topic, LATEST, start_message_id_inclusive=True)
    assert await read_all(empty) == [b"a", b"b", b"c0", b"c1", b"c2"]  # an empty topic: from its first
    assert await read_all(last) == [b"b", b"c0", b"c1", b"c2"]
    assert await read_all(last_of_batch) == [b"c2"]


async def test_a_start_id_of_another_partition_or_no_message_id_is_refused(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("reader")
    await admin.create_topic(topic, partitions=2)
    ids = await publish(client, topic, b"a", b"b")
    by_partition = {message_id.partition: message_id for message_id in ids}
    reader = await client.create_reader(f"{topic}-partition-1", by_partition[1], start_message_id_inclusive=True)
    assert await read_all(reader) == [b"a" if ids[0].partition == 1 else b"b"]
    with pytest.raises(InvalidArgumentError, match="is a message of partition 0, but the reader reads"):
        await client.create_reader(f"{topic}-partition-1", by_partition[0])
    with pytest.raises(InvalidArgumentError, match="is a message of partition 0, but the reader reads"):
        await client.create_reader(unique_topic("reader"), by_partition[0])
    for bad in ("1:2", None, (1, 2)):
        with pytest.raises(InvalidArgumentError, match="start_message_id must be a MessageId"):
            await client.create_reader(unique_topic("reader"), bad)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="invalid reader option"):
        await client.create_reader(unique_topic("reader"), EARLIEST, subscription_name="s")
    with pytest.raises(InvalidArgumentError, match="receiver_queue_size"):
        await client.create_reader(unique_topic("reader"), EARLIEST, receiver_queue_size=0)
    assert client._readers == {reader}  # nothing left of the refused ones


async def test_a_reader_of_a_partitioned_topic_is_refused(client: AsyncClient, admin: AdminClient) -> None:
    topic = unique_topic("reader")
    await admin.create_topic(topic, partitions=3)
    with pytest.raises(NotAllowedError, match="has 3 partitions: a reader reads one topic; create a reader for each"):
        await client.create_reader(topic, EARLIEST)
    assert not client._readers


async def test_a_reader_of_an_unknown_namespace_fails(client: AsyncClient) -> None:
    with pytest.raises(NotFoundError):
        await client.create_reader("persistent://public/no-such-namespace/t", EARLIEST)
    assert not client._readers


# ---- has_message_available ----

async def test_has_message_available_on_an_empty_topic_mid_way_and_at_the_end(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    reader = await client.create_reader(topic, EARLIEST)
    assert not await reader.has_message_available()
    await publish(client, topic, b"a", b"b", b"c")
    assert await reader.has_message_available()
    assert await read(reader, 1) == [b"a"]
    assert await reader.has_message_available()
    assert await read(reader, 2) == [b"b", b"c"]
    assert not await reader.has_message_available()
    await publish_batch(client, topic, b"d0", b"d1")
    assert await reader.has_message_available()
    assert await read(reader, 1) == [b"d0"]
    assert await reader.has_message_available()  # the rest of the batch
    assert await read(reader, 1) == [b"d1"]
    assert not await reader.has_message_available()


async def test_has_message_available_from_the_latest_or_a_start_id(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    ids = await publish(client, topic, b"a", b"b", b"c")
    latest = await client.create_reader(topic, LATEST)
    last_included = await client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    last_excluded = await client.create_reader(topic, ids[2])
    middle_excluded = await client.create_reader(topic, ids[1])
    assert not await latest.has_message_available()
    assert await last_included.has_message_available()
    assert not await last_excluded.has_message_available()
    assert await middle_excluded.has_message_available()
    assert await read(last_included, 1) == [b"c"]
    assert not await last_included.has_message_available()
    await publish(client, topic, b"d")
    for reader in (latest, last_included, last_excluded, middle_excluded):
        assert await reader.has_message_available()


# ---- seek ----

async def test_seek_moves_the_reader_to_a_message_id_a_time_or_an_end(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    before = await publish(client, topic, b"a", b"b")
    middle = int(time.time() * 1000) + 1
    await asyncio.sleep(0.005)  # past `middle`: the next messages are published after it
    await publish(client, topic, b"c", b"d")
    reader = await client.create_reader(topic, EARLIEST, schema=StringSchema())
    assert [message.value for message in [await reader.read_next(10) for _ in range(4)] if message] == [
        "a", "b", "c", "d"]
    await reader.seek(before[1])
    assert await reader.has_message_available()
    assert await read(reader, 3) == [b"b", b"c", b"d"]
    await reader.seek(middle)
    assert await reader.has_message_available()
    assert await read_all(reader) == [b"c", b"d"]
    await reader.seek(datetime.datetime.fromtimestamp(middle / 1000, tz=datetime.UTC))
    assert await read_all(reader) == [b"c", b"d"]
    await reader.seek(EARLIEST)
    assert await read_all(reader) == [b"a", b"b", b"c", b"d"]
    await reader.seek(LATEST)
    assert not await reader.has_message_available()
    assert await reader.read_next(timeout=0.2) is None
    with pytest.raises(InvalidArgumentError, match="seek takes a MessageId"):
        await reader.seek("start")  # type: ignore[arg-type]


async def test_seek_inside_a_batch_reads_from_that_message(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    ids = await publish_batch(client, topic, b"x0", b"x1", b"x2")
    reader = await client.create_reader(topic, EARLIEST)
    assert await read(reader, 3) == [b"x0", b"x1", b"x2"]
    await reader.seek(ids[2])
    assert await reader.has_message_available()
    assert await read_all(reader) == [b"x2"]


# ---- what a reader is ----

async def test_a_reader_acknowledges_nothing_and_its_subscription_goes_with_it(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("reader")
    await publish(client, topic, b"a", b"b")
    reader = await client.create_reader(topic, EARLIEST, reader_name="my-reader")
    assert reader.subscription.startswith("reader-") and reader.reader_name == "my-reader"
    assert reader.topic == topic and reader.is_connected
    assert await read(reader, 2) == [b"a", b"b"]
    assert reader._consumer.stats().acks_sent == 0
    assert await admin.list_subscriptions(topic) == [reader.subscription]
    again = await client.create_reader(topic, EARLIEST)  # reads everything again: nothing was consumed
    assert await read(again, 2) == [b"a", b"b"]
    await reader.close()
    await reader.close()  # twice: nothing
    await again.close()
    await eventually(lambda: _equals(admin.list_subscriptions(topic), []), "the readers' subscriptions to go")


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_a_reader_resumes_after_the_last_message_it_read_when_it_reconnects(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("reader")
    await publish(client, topic, b"a", b"b")
    await publish_batch(client, topic, b"c0", b"c1", b"c2")
    reader = await client.create_reader(topic, EARLIEST)
    assert await read(reader, 4) == [b"a", b"b", b"c0", b"c1"]
    reconnects = reader._consumer.stats().reconnects
    await admin.unload_topic(topic)  # the broker drops the reader's subscription with its connection
    await eventually(lambda: reader._consumer.stats().reconnects > reconnects and reader.is_connected, "a reconnect")
    assert await read_all(reader) == [b"c2"]
    await publish(client, topic, b"d")
    assert await read_all(reader) == [b"d"]


async def test_a_reader_listener_gets_every_message_and_read_next_is_refused(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    got: list[tuple[object, bytes]] = []

    async def listener(reader: AsyncReader[bytes], message: Message[bytes]) -> None:
        got.append((reader, message.data()))

    reader = await client.create_reader(topic, EARLIEST, reader_listener=listener)
    with pytest.raises(NotAllowedError, match="reader_listener"):
        await reader.read_next()
    await publish(client, topic, b"a", b"b")
    await eventually(lambda: len(got) == 2, "both messages to the listener")
    assert got == [(reader, b"a"), (reader, b"b")]


async def test_a_closed_reader_fails_a_waiting_read_and_refuses_calls(client: AsyncClient) -> None:
    reader = await client.create_reader(unique_topic("reader"), EARLIEST)
    waiting = asyncio.ensure_future(reader.read_next())
    await asyncio.sleep(0)
    await reader.close()
    assert reader.closed and not client._readers
    with pytest.raises(ConsumerClosedError):
        await waiting
    for coroutine in (reader.read_next(0), reader.has_message_available(), reader.seek(EARLIEST)):
        with pytest.raises(ConsumerClosedError, match="reader closed"):
            await coroutine


async def test_closing_the_client_closes_its_readers(shared_standalone: StandaloneProcess) -> None:
    async with AsyncClient(shared_standalone.service_url) as client:
        reader = await client.create_reader(unique_topic("reader"), EARLIEST)
    assert reader.closed


# ---- the blocking facade ----

def test_the_blocking_reader_offers_every_call(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("reader")
    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(value) for value in (b"a", b"b", b"c")]
        with client.create_reader(topic, ids[0], start_message_id_inclusive=True, reader_name="r") as reader:
            assert isinstance(reader, Reader)
            assert (reader.topic, reader.reader_name, reader.is_connected) == (topic, "r", True)
            assert reader.subscription.startswith("reader-")
            assert reader.has_message_available()
            messages = [reader.read_next(timeout=10) for _ in range(3)]
            assert [m.data() for m in messages if m] == [b"a", b"b", b"c"]
            assert not reader.has_message_available()
            assert reader.read_next(timeout=0.1) is None
            reader.seek(ids[1])
            message = reader.read_next(timeout=10)
            assert message is not None and message.data() == b"b"
        assert reader.closed
        with pytest.raises(ConsumerClosedError):
            reader.read_next(0)
        with pytest.raises(NotAllowedError):
            client.create_reader(topic, EARLIEST, reader_listener=lambda r, m: None).read_next(0)
        with pytest.raises(InvalidArgumentError, match="plain function"):
            client.create_reader(topic, EARLIEST, reader_listener=_coroutine_listener)


async def _coroutine_listener(reader: Any, message: Any) -> None:
    """A coroutine function: the blocking Reader refuses it as a listener."""


def test_a_blocking_reader_listener_runs_on_its_own_thread_with_the_blocking_reader(
    shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("reader")
    got: list[tuple[object, bytes, str]] = []
    done = threading.Event()

    def listener(reader: Reader[bytes], message: Message[bytes]) -> None:
        got.append((reader, message.data(), threading.current_thread().name))
        if len(got) == 2:
            done.set()

    with Client(shared_standalone.service_url) as client:
        reader = client.create_reader(topic, EARLIEST, reader_listener=listener)
        producer = client.create_producer(topic)
        producer.send(b"a")
        producer.send(b"b")
        assert done.wait(20), "the listener did not get both messages"
    assert [(who, data) for who, data, _ in got] == [(reader, b"a"), (reader, b"b")]
    assert all(name.startswith("herald-reader-listener") for _, _, name in got)
