"""read_compacted consumers, readers and pulls against a real `herald standalone`, through the
client API and the wire contract: after a compaction (the admin call, `herald admin topics compact`)
they see exactly the latest value per key up to the horizon, then the live tail, in order; without
read_compacted everything; a new compaction while reading; seeks back into the compacted range;
Shared subscriptions refused by the broker; a topic never compacted read as usual."""

from __future__ import annotations

import pytest
from herald.api.v1 import broker_pb2, common_pb2
from herald.client import (
    AsyncClient,
    AsyncConsumer,
    AsyncReader,
    ConsumerType,
    InitialPosition,
    Message,
    MessageId,
)
from herald.client.admin import AdminClient

from tests.helpers import eventually, unique_topic
from tests.wire import WireClient, WireError

TIMEOUT = 30.0  # bounds each receive; never asserted as a duration
EARLIEST = InitialPosition.Earliest


async def publish(client: AsyncClient, topic: str, items: list[tuple[str, bytes]], *, batched: bool = False) -> None:
    """Each (key, value) in order; an empty value deletes its key."""
    producer = await client.create_producer(topic, batching_enabled=batched, batching_max_publish_delay=60)
    if batched:
        for key, value in items:
            await producer.send_async(value, key=key)
        await producer.flush()
    else:
        for key, value in items:
            await producer.send(value, key=key)
    await producer.close()


async def compact(admin: AdminClient, topic: str) -> None:
    """Compact through the admin call and wait until it succeeded (the compactor's: C1)."""
    await admin.compact_topic(topic)
    await eventually(lambda: admin.compaction_status(topic), f"compaction of {topic}",
                     until=lambda status: status.status == "SUCCESS")


async def drain(source: AsyncConsumer[bytes] | AsyncReader[bytes], count: int) -> list[Message[bytes]]:
    got: list[Message[bytes]] = []
    while len(got) < count:
        if isinstance(source, AsyncReader):
            message = await source.read_next(TIMEOUT)
        else:
            message = await source.receive(TIMEOUT)
        assert message is not None, f"only {len(got)} of {count} messages came: {[m.data() for m in got]}"
        got.append(message)
    return got


def pairs(messages: list[Message[bytes]]) -> list[tuple[str | None, bytes]]:
    return [(m.key, m.data()) for m in messages]


def updates(rounds: int, keys: int) -> list[tuple[str, bytes]]:
    """`rounds` values for each of `keys` keys, interleaved; the last round deletes every third key."""
    items = [(f"k{k}", f"v{r}-{k}".encode()) for r in range(rounds) for k in range(keys)]
    return items + [(f"k{k}", b"") for k in range(0, keys, 3)]


def latest(items: list[tuple[str, bytes]]) -> dict[str, bytes]:
    table: dict[str, bytes] = {}
    for key, value in items:
        if value:
            table[key] = value
        else:
            table.pop(key, None)
    return table


# ---- without a compaction (no compacted view yet): the log, as usual ----

async def test_read_compacted_on_a_topic_never_compacted_reads_every_message(client: AsyncClient) -> None:
    topic = unique_topic("never-compacted")
    items = [("a", b"1"), ("b", b"2"), ("a", b"3")]
    await publish(client, topic, items)
    consumer = await client.subscribe(topic, "s", ConsumerType.Exclusive, EARLIEST, read_compacted=True)
    assert pairs(await drain(consumer, 3)) == items
    reader = await client.create_reader(topic, MessageId.earliest, read_compacted=True)
    assert pairs(await drain(reader, 3)) == items
    pulled = await client.pull(topic, None, max_entries=100, read_compacted=True)
    assert len(pulled.entries) == 3


@pytest.mark.parametrize("sub_type", [broker_pb2.SHARED, broker_pb2.KEY_SHARED])
async def test_the_broker_refuses_read_compacted_on_a_shared_subscription(wire: WireClient, sub_type: int) -> None:
    # The client refuses it first; another client (or an old one) reaches the broker, which refuses too.
    topic = unique_topic("refused")
    with pytest.raises(WireError) as refused:
        await wire.consumer(topic, "s", type=sub_type, read_compacted=True)
    assert refused.value.code == common_pb2.NOT_ALLOWED
    label = "Shared" if sub_type == broker_pb2.SHARED else "Key_Shared"
    assert refused.value.error.message.startswith(
        "read_compacted is only allowed on Exclusive and Failover subscriptions (and readers), not on a "
        f"{label} subscription")


async def test_the_broker_refuses_read_compacted_on_a_non_persistent_topic(wire: WireClient) -> None:
    topic = "non-persistent://public/default/" + unique_topic("np").rsplit("/", 1)[-1]
    with pytest.raises(WireError) as refused:
        await wire.consumer(topic, "s", type=broker_pb2.EXCLUSIVE, read_compacted=True)
    assert refused.value.code == common_pb2.NOT_ALLOWED
    assert refused.value.error.message.startswith("read_compacted needs a persistent topic")


# ---- after a compaction (these need the compactor: `herald admin topics compact`) ----

@pytest.mark.parametrize("batched", [False, True], ids=["entries", "batches"])
async def test_a_read_compacted_reader_sees_exactly_the_latest_value_per_key_then_the_tail(
    client: AsyncClient, admin: AdminClient, batched: bool,
) -> None:
    topic = unique_topic("latest")
    items = updates(rounds=5, keys=30)
    await publish(client, topic, items, batched=batched)
    await compact(admin, topic)
    tail = [("k1", b"tail-1"), ("new", b"tail-2"), ("k1", b""), ("k2", b"tail-3")]
    await publish(client, topic, tail)
    table = latest(items)
    reader = await client.create_reader(topic, MessageId.earliest, read_compacted=True)
    compacted = await drain(reader, len(table))
    assert dict(pairs(compacted)) == table and len(compacted) == len(table)  # each key once, deleted keys gone
    assert pairs(await drain(reader, len(tail))) == tail  # the tail after the horizon: every message
    ids = [m.message_id for m in compacted]
    assert ids == sorted(ids)


async def test_without_read_compacted_a_compacted_topic_delivers_everything(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("everything")
    items = updates(rounds=3, keys=10)
    await publish(client, topic, items)
    await compact(admin, topic)
    consumer = await client.subscribe(topic, "all", ConsumerType.Exclusive, EARLIEST)
    assert pairs(await drain(consumer, len(items))) == items


async def test_a_failover_consumer_acks_on_original_positions_and_resumes_after_them(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("acks")
    items = updates(rounds=4, keys=12)
    await publish(client, topic, items)
    await compact(admin, topic)
    table = latest(items)
    consumer = await client.subscribe(topic, "s", ConsumerType.Failover, EARLIEST, read_compacted=True)
    first = await drain(consumer, 4)
    consumer.acknowledge_cumulative(first[-1])
    await consumer.close()
    again = await client.subscribe(topic, "s", ConsumerType.Failover, EARLIEST, read_compacted=True)
    rest = await drain(again, len(table) - 4)
    assert dict(pairs(first + rest)) == table


async def test_a_new_compaction_while_reading_continues_from_the_read_position(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("recompacted")
    items = updates(rounds=3, keys=20)
    await publish(client, topic, items)
    await compact(admin, topic)
    consumer = await client.subscribe(topic, "s", ConsumerType.Exclusive, EARLIEST, read_compacted=True,
                                      receiver_queue_size=1)
    first = await drain(consumer, 3)
    more = [(f"k{k}", f"late-{k}".encode()) for k in range(20)]
    await publish(client, topic, more)
    await compact(admin, topic)  # a new view, covering `more`, while the consumer is in the old one
    table = latest(items + more)
    seen = dict(pairs(first))
    got = list(first)
    while seen != table:  # what was prefetched from the old view, then each key's latest in the new one
        (message,) = await drain(consumer, 1)
        got.append(message)
        seen[str(message.key)] = message.data()
        assert len(got) <= len(items) + len(more), f"more messages than the topic holds: {pairs(got)}"
    ids = [m.message_id for m in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # in order, nothing repeated
    assert pairs(got[-len(more):]) == more  # the new view: every key's late value


async def test_a_seek_back_into_the_compacted_range_reads_the_view_again(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("seek")
    items = updates(rounds=3, keys=8)
    await publish(client, topic, items)
    await compact(admin, topic)
    table = latest(items)
    consumer = await client.subscribe(topic, "s", ConsumerType.Exclusive, EARLIEST, read_compacted=True)
    assert dict(pairs(await drain(consumer, len(table)))) == table
    await consumer.seek(MessageId.earliest)
    assert dict(pairs(await drain(consumer, len(table)))) == table


async def test_a_compacted_pull_reads_the_view_then_the_log(client: AsyncClient, admin: AdminClient) -> None:
    topic = unique_topic("pull")
    items = updates(rounds=4, keys=6)
    await publish(client, topic, items)
    await compact(admin, topic)
    await publish(client, topic, [("k0", b"after")])
    table = latest(items)
    entries = []
    start: MessageId | None = None
    while True:
        result = await client.pull(topic, start, max_entries=2, read_compacted=True)
        if not result.entries:
            break
        entries += result.entries
        start = result.next
    assert len(entries) == len(table) + 1  # one unbatched entry per key kept, then the tail's


async def test_acknowledging_each_message_of_compacted_batches_leaves_nothing_to_redeliver(
    client: AsyncClient, admin: AdminClient,
) -> None:
    # A compacted batch keeps its compacted-out messages in place: the consumer counts them acknowledged.
    topic = unique_topic("batch-acks")
    items = updates(rounds=4, keys=10)
    await publish(client, topic, items, batched=True)
    await compact(admin, topic)
    table = latest(items)
    consumer = await client.subscribe(topic, "s", ConsumerType.Exclusive, EARLIEST, read_compacted=True,
                                      ack_group_time=0)
    for message in await drain(consumer, len(table)):
        consumer.acknowledge(message)
    await consumer.close()
    await publish(client, topic, [("marker", b"after")])
    again = await client.subscribe(topic, "s", ConsumerType.Exclusive, EARLIEST, read_compacted=True)
    assert pairs(await drain(again, 1)) == [("marker", b"after")]  # nothing of the view came again first
