"""The official Pulsar client's read_compacted (is_read_compacted) against a real Herald: a consumer
and a reader with it are served (they were refused before compaction existed), reading a topic
never compacted as usual and, after a compaction, the latest value per key then the tail; SUBSCRIBE
with read_compacted on a Shared subscription is refused with NotAllowedError, as Pulsar's broker does."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2
from herald.client.admin import SyncAdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import eventually_sync, unique_topic
from tests.pulsar.raw import Command, RawConnection

RECEIVE_MS = 10_000


@pytest.fixture
def admin(server: StandaloneProcess) -> Iterator[SyncAdminClient]:
    with SyncAdminClient(server.service_url) as made:
        yield made


def produce(client: pulsar.Client, topic: str, items: list[tuple[str, bytes]], *, batched: bool = False) -> None:
    producer = client.create_producer(topic, batching_enabled=batched, batching_max_publish_delay_ms=50)
    for key, value in items:
        if batched:
            producer.send_async(value, None, partition_key=key)
        else:
            producer.send(value, partition_key=key)
    producer.flush()
    producer.close()


def read(source: pulsar.Consumer | pulsar.Reader, count: int) -> list[tuple[str, bytes]]:
    got = []
    for _ in range(count):
        message = source.read_next(RECEIVE_MS) if isinstance(source, pulsar.Reader) else source.receive(RECEIVE_MS)
        got.append((message.partition_key(), message.data()))
    return got


def latest(items: list[tuple[str, bytes]]) -> dict[str, bytes]:
    table: dict[str, bytes] = {}
    for key, value in items:
        if value:
            table[key] = value
        else:
            table.pop(key, None)
    return table


def test_a_read_compacted_consumer_and_reader_read_a_topic_never_compacted(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-rc")
    items = [("a", b"1"), ("b", b"2"), ("a", b"3")]
    produce(client, topic, items)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover,
                                initial_position=pulsar.InitialPosition.Earliest, is_read_compacted=True)
    assert read(consumer, 3) == items
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert read(reader, 3) == items


def test_read_compacted_on_a_shared_subscription_is_refused(server: StandaloneProcess, client: pulsar.Client) -> None:
    # Sent raw, as any client could send it: the broker refuses. The topic is looked up (owned) first.
    topic = unique_topic("pulsar-rc-shared")
    produce(client, topic, [("a", b"1")])
    subscribe = PulsarApi_pb2.CommandSubscribe(
        topic=topic, subscription="s", subType=PulsarApi_pb2.CommandSubscribe.Shared,
        consumer_id=1, request_id=9, read_compacted=True)
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(Command(type=Command.SUBSCRIBE, subscribe=subscribe))
        answer = raw.receive()
        assert answer.type == Command.ERROR
        assert (answer.error.request_id, answer.error.error) == (9, PulsarApi_pb2.NotAllowedError)
        assert answer.error.message.startswith(
            "read_compacted is only allowed on Exclusive and Failover subscriptions (and readers), not on a "
            "Shared subscription")


# ---- after a compaction (needs the compactor: `herald admin topics compact`) ----

@pytest.mark.parametrize("batched", [False, True], ids=["entries", "batches"])
def test_after_a_compaction_a_read_compacted_reader_sees_the_latest_value_per_key_then_the_tail(
    client: pulsar.Client, admin: SyncAdminClient, batched: bool,
) -> None:
    topic = unique_topic("pulsar-rc-compacted")
    items = [(f"k{i % 8}", f"v{i}".encode()) for i in range(64)] + [("k0", b""), ("k5", b"")]
    produce(client, topic, items, batched=batched)
    admin.compact_topic(topic)
    eventually_sync(lambda: admin.compaction_status(topic), "the compaction",
                    until=lambda status: status.status == "SUCCESS")
    tail = [("k1", b"tail"), ("k0", b"back")]
    produce(client, topic, tail)
    table = latest(items)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    compacted = read(reader, len(table))
    assert dict(compacted) == table and len(compacted) == len(table)
    assert read(reader, len(tail)) == tail
    plain = client.subscribe(topic, "everything", initial_position=pulsar.InitialPosition.Earliest)
    assert read(plain, len(items)) == items  # without read_compacted: every message


def test_a_durable_consumer_gets_compacted_batches_whole_and_its_acks_complete_them(
    client: pulsar.Client, admin: SyncAdminClient,
) -> None:
    # The C++ client acknowledges a batch once it acknowledged each of its messages: a durable
    # subscription's consumer is sent the compacted-out ones too (as Pulsar's broker does), empty.
    topic = unique_topic("pulsar-rc-acks")
    items = [(f"k{i % 6}", f"v{i}".encode()) for i in range(48)]
    produce(client, topic, items, batched=True)
    admin.compact_topic(topic)
    eventually_sync(lambda: admin.compaction_status(topic), "the compaction",
                    until=lambda status: status.status == "SUCCESS")
    table = latest(items)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest, is_read_compacted=True)
    seen: dict[str, bytes] = {}
    while seen != table:
        message = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(message)
        key, value = message.partition_key(), message.data()
        if value:
            seen[key] = value
        else:  # a compacted-out message: as a delete, which the key's latest value (if any) follows
            seen.pop(key, None)
    consumer.close()
    produce(client, topic, [("marker", b"after")])
    again = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest, is_read_compacted=True)
    assert read(again, 1) == [("marker", b"after")]  # nothing of the view came again first
