"""Pulsar-format entries end to end (issue 18, items 1 to 3): entries as Pulsar's producers write
them (batched and not, keys, properties, event times, SNAPPY and ZLIB compressed) are sent on
Herald's own Produce stream, stored as they came, and read by Herald's AsyncClient and `herald
admin` peek with every value, key, property, event time, sequence id and batch index intact."""

from __future__ import annotations

import uuid
from typing import Any

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.cli.admin.render import decoded_entries
from herald.client import AsyncClient
from herald.client.admin import AdminClient
from herald.client.config import InitialPosition
from herald.common.codec.entry import open_entry

from tests.e2e.test_consumer import drain
from tests.unit.test_entry_formats import pulsar_batch, pulsar_single
from tests.wire import WireClient


def topic_name() -> str:
    return f"pulsar-entries-{uuid.uuid4().hex[:8]}"


async def send_all(wire: WireClient, topic: str, name: str) -> list[Any]:
    """Four Pulsar entries on one raw stream: a batch, a SNAPPY batch, a plain message with its key
    and properties, a ZLIB plain message."""
    producer = await wire.producer(topic, name)
    sends = [
        (pulsar_batch(name, 0, [
            (b"b0", pulsar.SingleMessageMetadata(partition_key="k0", event_time=1000,
                                                 properties=[pulsar.KeyValue(key="p", value="0")])),
            (b"b1", pulsar.SingleMessageMetadata(partition_key="k1")),
        ]), 0, 2),
        (pulsar_batch(name, 2, [
            (b"s" * 300, pulsar.SingleMessageMetadata(partition_key="snappy", event_time=2000)),
            (b"t" * 300, pulsar.SingleMessageMetadata(properties=[pulsar.KeyValue(key="codec", value="snappy")])),
        ], pulsar.SNAPPY), 2, 2),
        (pulsar_single(name, 4, b"plain", partition_key="pk", event_time=3000,
                       properties=[pulsar.KeyValue(key="x", value="y")]), 4, 1),
        (pulsar_single(name, 5, b"z" * 500, pulsar.ZLIB, partition_key="zk"), 5, 1),
    ]
    replies = [await producer.send_entry(data, sequence_id, count) for data, sequence_id, count in sends]
    await producer.close()
    return replies


async def test_pulsar_entries_sent_on_the_produce_stream_are_read_by_herald_s_client(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = topic_name()
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    replies = await send_all(wire, topic, "pulsar-producer")
    assert all(reply.HasField("receipt") and reply.receipt.entry_id >= 0 for reply in replies), replies
    messages = await drain(consumer, 6)
    assert [(m.value, m.key, m.properties, m.event_time, m.sequence_id, m.batch_index) for m in messages] == [
        (b"b0", "k0", {"p": "0"}, 1000, 0, 0),
        (b"b1", "k1", {}, None, 1, 1),
        (b"s" * 300, "snappy", {}, 2000, 2, 0),
        (b"t" * 300, None, {"codec": "snappy"}, None, 3, 1),
        (b"plain", "pk", {"x": "y"}, 3000, 4, -1),
        (b"z" * 500, "zk", {}, None, 5, -1),
    ]
    assert {m.producer_name for m in messages} == {"pulsar-producer"}
    assert [m.message_id.entry_id for m in messages] == [replies[0].receipt.entry_id] * 2 + [
        replies[1].receipt.entry_id] * 2 + [replies[2].receipt.entry_id, replies[3].receipt.entry_id]
    for message in messages:
        consumer.acknowledge(message)
    await consumer.close()


async def test_pulsar_entries_are_stored_as_they_came_and_peeked_decoded(
    client: AsyncClient, admin: AdminClient, wire: WireClient,
) -> None:
    topic = topic_name()
    consumer = await client.subscribe(topic, "kept", initial_position=InitialPosition.Earliest)
    await consumer.close()  # the subscription holds the entries for peeking
    await send_all(wire, topic, "peeked")
    entries = await admin.peek_messages(topic, "kept", 4)
    assert [open_entry(e.data).pulsar is not None for e in entries] == [True] * 4  # Pulsar's format, kept
    decoded = decoded_entries(entries)
    assert [[(m["value"], m["key"], m["sequence_id"]) for m in e["messages"]] for e in decoded] == [
        [("b0", "k0", 0), ("b1", "k1", 1)], [("s" * 300, "snappy", 2), ("t" * 300, None, 3)],
        [("plain", "pk", 4)], [("z" * 500, "zk", 5)]]
    assert {e["producer_name"] for e in decoded} == {"peeked"}


async def test_a_resent_pulsar_batch_is_deduplicated_by_its_sequence_ids(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = topic_name()
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    await send_all(wire, topic, "again")
    producer, registered = await wire.register(topic, "again")
    # A Pulsar producer's SEND names its batch's first sequence id; the batch's metadata the count.
    assert registered.last_sequence_id == 5
    resent = await producer.send_entry(pulsar_batch("again", 0, [(b"b0", pulsar.SingleMessageMetadata())] * 2), 0, 2)
    assert (resent.receipt.ledger_id, resent.receipt.entry_id) == (-1, -1)
    fresh = await producer.send_entry(pulsar_single("again", 6, b"new"), 6, 1)
    assert fresh.receipt.entry_id >= 0
    await producer.close()
    assert [m.value for m in await drain(consumer, 7)][-1] == b"new"
    await consumer.close()
