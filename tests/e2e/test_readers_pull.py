"""Reading through a real `herald standalone`, over the wire: readers (non-durable subscriptions)
from the earliest, the latest or a message id, GetLastMessageId, Pull with long polling and its
errors, message TTL, a reader not holding back retention (a standalone with short retention, TTL and
check intervals set through HERALD_BROKER_* variables), and terminated topics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import grpc
import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2
from herald.common.codec.entry import decode_entry, encode_entry
from herald.common.errors import InvalidArgumentError, NotAllowedError, NotFoundError
from herald.common.transport.rpc import error_from_rpc

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import eventually, unique_topic
from tests.wire import WireClient, WireConsumer, WireError, make_entry, values_of

TTL_SECONDS = 60


@pytest.fixture(scope="module")
def short_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Messages expire after TTL_SECONDS, checked every 0.1 s; ledgers of 2 entries, kept by no
    retention once consumed, trimmed every 0.1 s."""
    with running_standalone(
        tmp_path_factory.mktemp("short") / "data", message_ttl_seconds=TTL_SECONDS,
        message_expiry_check_interval=0.1, max_entries_per_ledger=2, min_ledger_rollover_seconds=0,
        retention_time_seconds=0, retention_size_bytes=0, retention_check_interval=0.1,
    ) as server:
        yield server


@pytest.fixture
async def short_wire(short_standalone: StandaloneProcess) -> AsyncIterator[WireClient]:
    async with WireClient(short_standalone.port) as client:
        yield client


async def publish(wire: WireClient, topic: str, *values: bytes, publish_time: int | None = None,
                  ) -> list[common_pb2.Position]:
    producer = await wire.producer(topic)
    positions = []
    for value in values:
        reply = await producer.send(value, publish_time=publish_time)
        assert reply.HasField("receipt"), reply
        positions.append(common_pb2.Position(ledger_id=reply.receipt.ledger_id, entry_id=reply.receipt.entry_id))
    await producer.close()
    return positions


async def reader(wire: WireClient, topic: str, name: str, **options: object) -> WireConsumer:
    consumer = await wire.consumer(topic, name, non_durable=True, **options)
    await consumer.flow(100)
    return consumer


def values(entries: list[broker_pb2.DeliveredEntry]) -> list[bytes]:
    return [value for entry in entries for value in values_of(entry)]


async def pull(wire: WireClient, topic: str, **fields: object) -> broker_pb2.PullResponse:
    stub = await wire.broker(topic)
    reply: broker_pb2.PullResponse = await stub.Pull(broker_pb2.PullRequest(topic=topic, **fields))  # type: ignore[arg-type]
    return reply


async def refused(call: Awaitable[Any]) -> Exception:
    """The HeraldError a unary call failed with."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return error_from_rpc(raised.value)


# ---- readers ----

async def test_readers_start_at_the_earliest_the_latest_or_a_message_id(wire: WireClient) -> None:
    topic = unique_topic("read")
    positions = await publish(wire, topic, b"a", b"b", b"c")
    earliest = await reader(wire, topic, "r-early", initial_position=broker_pb2.EARLIEST)
    latest = await reader(wire, topic, "r-late", initial_position=broker_pb2.LATEST)
    inclusive = await reader(wire, topic, "r-incl", start_position=positions[1], start_inclusive=True)
    exclusive = await reader(wire, topic, "r-excl", start_position=positions[1])
    assert values(await earliest.receive(3)) == [b"a", b"b", b"c"]
    assert values(await inclusive.receive(2)) == [b"b", b"c"]
    assert values(await exclusive.receive(1)) == [b"c"]
    await publish(wire, topic, b"d")
    for consumer in (earliest, latest, inclusive, exclusive):
        assert values(await consumer.receive(1)) == [b"d"]
    admin = await wire.admin(topic)
    listed = await admin.ListSubscriptions(admin_pb2.TopicRequest(topic=topic))
    assert sorted(listed.subscriptions) == ["r-early", "r-excl", "r-incl", "r-late"]
    await earliest.close()
    await latest.close()

    async def gone() -> bool:
        listed = await admin.ListSubscriptions(admin_pb2.TopicRequest(topic=topic))
        return sorted(listed.subscriptions) == ["r-excl", "r-incl"]

    await eventually(gone, "the closed readers' subscriptions to go")


async def test_a_reader_cannot_take_a_durable_subscriptions_name(wire: WireClient) -> None:
    topic = unique_topic("read")
    durable = await wire.consumer(topic, "taken")
    with pytest.raises(WireError) as raised:
        await reader(wire, topic, "taken")
    assert raised.value.code == common_pb2.NOT_ALLOWED
    assert "is durable: a reader (non-durable subscription) needs a name of its own" in str(raised.value)
    await durable.close()


async def test_a_reader_does_not_hold_back_retention(short_wire: WireClient) -> None:
    topic = unique_topic("retained")
    first = await publish(short_wire, topic, b"a")
    behind = await short_wire.consumer(topic, "r", non_durable=True, initial_position=broker_pb2.EARLIEST)
    await publish(short_wire, topic, b"b", b"c", b"d", b"e", b"f")  # ledgers of 2: a b | c d | e f

    async def trimmed() -> bool:
        oldest = (await pull(short_wire, topic, max_entries=1)).entries[0]
        return (oldest.ledger_id, oldest.entry_id) != (first[0].ledger_id, first[0].entry_id)

    await eventually(trimmed, "consumed ledgers to be deleted despite the reader")
    await behind.flow(100)  # reads on from the first entry still kept
    got = values(await behind.receive(2))
    assert got[-1] == b"f" and b"a" not in got


# ---- last message id ----

async def test_last_message_id_of_an_empty_a_batched_and_a_single_message_topic(wire: WireClient) -> None:
    topic = unique_topic("read")
    stub = await wire.broker(topic)
    empty = await stub.GetLastMessageId(broker_pb2.GetLastMessageIdRequest(topic=topic))
    assert (empty.last.ledger_id, empty.last.entry_id, empty.last.partition, empty.last.batch_index) == (-1, -1, -1, -1)
    consumer = await wire.consumer(topic, "s", initial_position=broker_pb2.EARLIEST)
    producer = await wire.producer(topic)
    batch = await producer.send(b"a", b"b", b"c")
    reply = await stub.GetLastMessageId(broker_pb2.GetLastMessageIdRequest(topic=topic, subscription="s"))
    assert (reply.last.ledger_id, reply.last.entry_id) == (batch.receipt.ledger_id, batch.receipt.entry_id)
    assert reply.last.batch_index == 2 and reply.last.partition == -1
    assert reply.mark_delete.entry_id == batch.receipt.entry_id - 1
    single = make_entry(producer.name, 10, b"x")
    metadata_off = await producer.send_entry(_unbatched(single), 10)
    reply = await stub.GetLastMessageId(broker_pb2.GetLastMessageIdRequest(topic=topic))
    assert reply.last.entry_id == metadata_off.receipt.entry_id and reply.last.batch_index == -1
    error = await refused(stub.GetLastMessageId(broker_pb2.GetLastMessageIdRequest(topic=topic, subscription="no")))
    assert isinstance(error, NotFoundError) and "subscription 'no' does not exist" in str(error)
    await consumer.close()


def _unbatched(entry: bytes) -> bytes:
    """The same entry sent with batching off (batch index -1)."""
    metadata, payload = decode_entry(entry)
    metadata.batched = False
    return encode_entry(metadata, bytes(payload))


# ---- pull ----

async def test_pull_reads_by_offset_and_says_where_to_go_on(wire: WireClient) -> None:
    topic = unique_topic("read")
    positions = await publish(wire, topic, b"a", b"b", b"c")
    reply = await pull(wire, topic, max_entries=2)
    assert values(list(reply.entries)) == [b"a", b"b"] and not reply.end_of_topic
    reply = await pull(wire, topic, start=reply.next)
    assert values(list(reply.entries)) == [b"c"]
    reply = await pull(wire, topic, start=positions[1], partition=-1)
    assert values(list(reply.entries)) == [b"b", b"c"]


async def test_pull_long_polls_until_a_message_arrives(wire: WireClient) -> None:
    topic = unique_topic("read")
    (first,) = await publish(wire, topic, b"a")
    after = common_pb2.Position(ledger_id=first.ledger_id, entry_id=first.entry_id + 1)
    waiting = asyncio.ensure_future(pull(wire, topic, start=after, timeout_ms=30_000))
    # A pull sent after it to the same place waits out its own short timeout on the broker and
    # comes back empty: by then the first has had every chance to come back, and still waits.
    later = await pull(wire, topic, start=after, timeout_ms=300)
    assert list(later.entries) == [] and later.next == after
    assert not waiting.done()
    await publish(wire, topic, b"b")
    reply = await asyncio.wait_for(waiting, 30)
    assert values(list(reply.entries)) == [b"b"]


async def test_pull_times_out_empty_where_it_started(wire: WireClient) -> None:
    topic = unique_topic("read")
    (first,) = await publish(wire, topic, b"a")
    after = common_pb2.Position(ledger_id=first.ledger_id, entry_id=first.entry_id + 1)
    reply = await pull(wire, topic, start=after, timeout_ms=100)
    assert list(reply.entries) == [] and reply.next == after and not reply.end_of_topic


async def test_pull_refuses_a_queue_out_of_range_and_an_unknown_subscription(wire: WireClient) -> None:
    topic = unique_topic("read")
    await publish(wire, topic, b"a")
    error = await refused(pull(wire, topic, partition=1))
    assert isinstance(error, InvalidArgumentError) and "queue id out of range" in str(error)
    error = await refused(pull(wire, topic, subscription="group"))
    assert isinstance(error, NotFoundError) and "subscription 'group' does not exist" in str(error)
    error = await refused(pull(wire, "non-persistent://public/default/np-pull"))
    assert isinstance(error, NotAllowedError) and "not supported on non-persistent topics" in str(error)


async def test_pull_reads_a_partition_of_a_partitioned_topic(wire: WireClient) -> None:
    topic = unique_topic("parts")
    admin = await wire.admin(topic)
    await admin.CreateTopic(admin_pb2.CreateTopicRequest(topic=topic, partitions=2))
    await publish(wire, f"{topic}-partition-1", b"p1")
    stub = await wire.broker(f"{topic}-partition-1")
    reply = await stub.Pull(broker_pb2.PullRequest(topic=topic, partition=1))
    assert values(list(reply.entries)) == [b"p1"]
    error = await refused(stub.Pull(broker_pb2.PullRequest(topic=topic, partition=2)))
    assert isinstance(error, InvalidArgumentError) and "has 2 queues" in str(error)


# ---- message TTL ----

async def test_old_messages_expire_on_durable_subscriptions(short_wire: WireClient) -> None:
    topic = unique_topic("ttl")
    consumer = await short_wire.consumer(topic, "s", initial_position=broker_pb2.EARLIEST)
    old = int(time.time() * 1000) - 2 * TTL_SECONDS * 1000
    await publish(short_wire, topic, b"old-1", b"old-2", publish_time=old)
    await publish(short_wire, topic, b"young")
    admin = await short_wire.admin(topic)

    async def expired() -> bool:
        stats = await admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic))
        (sub,) = [s for s in stats.subscriptions if s.name == "s"]
        return sub.msg_expired_counter == 2 and sub.backlog_entries == 1

    await eventually(expired, "the two old messages to expire")
    await consumer.flow(100)
    assert values(await consumer.receive(1)) == [b"young"]


# ---- terminated topics ----

async def test_terminated_topic_refuses_producers_and_ends_consumers_and_pulls(wire: WireClient) -> None:
    topic = unique_topic("terminated")
    consumer = await wire.consumer(topic, "s", initial_position=broker_pb2.EARLIEST)
    producer = await wire.producer(topic)
    await producer.send(b"a")
    admin = await wire.admin(topic)
    terminated = await admin.TerminateTopic(admin_pb2.TopicRequest(topic=topic))
    reply = await producer.send(b"late")
    assert reply.send_error.error.code == common_pb2.TOPIC_TERMINATED
    with pytest.raises(WireError) as raised:
        await wire.producer(topic)
    assert raised.value.code == common_pb2.TOPIC_TERMINATED
    await consumer.flow(10)
    (entry,) = await consumer.receive(1)
    assert (entry.ledger_id, entry.entry_id) == (terminated.last.ledger_id, terminated.last.entry_id)
    await consumer.ack(entry)
    await consumer.event("end_of_topic")
    last = await pull(wire, topic, start=terminated.last, timeout_ms=30_000)
    assert values(list(last.entries)) == [b"a"] and last.end_of_topic
    after = await pull(wire, topic, start=last.next, timeout_ms=30_000)  # answered at once
    assert list(after.entries) == [] and after.end_of_topic
    stats = await admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic))
    assert stats.terminated


