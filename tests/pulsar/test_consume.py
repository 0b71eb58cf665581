"""The official client consuming what Herald's client produced: subscription types, acknowledgement
(individual, cumulative, negative), redelivery, seek, readers, unsubscribe and partitioned topics."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pulsar
import pytest
from herald.client import Client
from herald.client.admin import SyncAdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.pulsar.conftest import receive_until

RECEIVE_MS = 10_000
QUIET_MS = 300  # how long a test listens for a message that must not come


@pytest.fixture
def herald(server: StandaloneProcess) -> Iterator[Client]:
    with Client(server.service_url) as made:
        yield made


@pytest.fixture
def admin(server: StandaloneProcess) -> Iterator[SyncAdminClient]:
    with SyncAdminClient(server.service_url) as made:
        yield made


def produce(herald: Client, topic: str, count: int, *, batched: bool = False, prefix: str = "m") -> list[bytes]:
    """`count` messages sent by Herald's client (as one batch when `batched`), keyed k<i>."""
    values = [f"{prefix}{i}".encode() for i in range(count)]
    producer = herald.create_producer(topic, batching_enabled=batched, batching_max_publish_delay=0.05)
    if batched:
        for i, value in enumerate(values):
            producer.send_async(value, lambda *_: None, key=f"k{i}")
        producer.flush()
    else:
        for i, value in enumerate(values):
            producer.send(value, key=f"k{i}")
    producer.close()
    return values


def receive_all(consumer: pulsar.Consumer, count: int, *, ack: bool = True) -> list[pulsar.Message]:
    received = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=RECEIVE_MS)
        if ack:
            consumer.acknowledge(message)
        received.append(message)
    return received


def nothing_more(consumer: pulsar.Consumer) -> bool:
    try:
        consumer.receive(timeout_millis=QUIET_MS)
    except pulsar.Timeout:
        return True
    return False


def test_batched_messages_arrive_one_by_one_with_their_batch_indexes(
    herald: Client, client: pulsar.Client,
) -> None:
    topic = unique_topic("pulsar-batch")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    values = produce(herald, topic, 20, batched=True)
    received = receive_all(consumer, len(values))
    assert [m.data() for m in received] == values
    assert [m.partition_key() for m in received] == [f"k{i}" for i in range(20)]
    ids = [m.message_id() for m in received]
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) < len(ids)  # several messages per entry
    assert [i.batch_index() for i in ids if i.entry_id() == ids[0].entry_id()] == list(
        range(sum(1 for i in ids if i.entry_id() == ids[0].entry_id())))


def test_acknowledged_messages_are_not_delivered_again_and_unacknowledged_ones_are(
    herald: Client, client: pulsar.Client,
) -> None:
    topic = unique_topic("pulsar-ack")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    values = produce(herald, topic, 6)
    received = receive_all(consumer, 6, ack=False)
    for message in received[:3]:
        consumer.acknowledge(message)
    consumer.close()
    again = client.subscribe(topic, "s")
    assert [m.data() for m in receive_all(again, 3)] == values[3:]
    assert nothing_more(again)


def test_a_negatively_acknowledged_message_comes_back_with_its_redelivery_count(
    herald: Client, client: pulsar.Client,
) -> None:
    topic = unique_topic("pulsar-nack")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest,
                                negative_ack_redelivery_delay_ms=100)
    produce(herald, topic, 1)
    first = consumer.receive(timeout_millis=RECEIVE_MS)
    consumer.negative_acknowledge(first)
    second = consumer.receive(timeout_millis=RECEIVE_MS)
    assert (second.data(), second.redelivery_count()) == (first.data(), 1)
    consumer.acknowledge(second)


def test_cumulative_acknowledgement_acknowledges_everything_before(herald: Client, client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-cumulative")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    values = produce(herald, topic, 10)
    received = receive_all(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(received[6])
    consumer.close()
    again = client.subscribe(topic, "s")
    assert [m.data() for m in receive_all(again, 3)] == values[7:]


def test_a_shared_subscription_spreads_messages_and_delivers_each_once(
    herald: Client, client: pulsar.Client,
) -> None:
    topic = unique_topic("pulsar-shared")
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5,
                                  initial_position=pulsar.InitialPosition.Earliest) for _ in range(2)]
    values = produce(herald, topic, 40)
    first, second = receive_until(consumers, len(values))
    assert sorted(m.data() for m in first + second) == sorted(values)
    assert first and second


def test_failover_hands_the_subscription_to_the_next_consumer(herald: Client, client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-failover")
    first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a",
                             initial_position=pulsar.InitialPosition.Earliest)
    second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    values = produce(herald, topic, 4)
    assert [m.data() for m in receive_all(first, 2)] == values[:2]
    assert nothing_more(second)
    first.close()
    assert [m.data() for m in receive_all(second, 2)] == values[2:]


def test_an_exclusive_subscription_refuses_a_second_consumer(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-exclusive")
    client.subscribe(topic, "s")
    with pytest.raises(pulsar.PulsarException, match=r"(?i)busy|exclusive"):
        client.subscribe(topic, "s")


def test_key_shared_keeps_each_key_on_one_consumer(herald: Client, client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-key-shared")
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared,
                                  initial_position=pulsar.InitialPosition.Earliest) for _ in range(2)]
    producer = herald.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i % 8}" for i in range(48)]
    for i, key in enumerate(keys):
        producer.send(f"{key}/{i}".encode(), key=key)
    producer.close()
    owner: dict[str, int] = {}
    received = receive_until(consumers, len(keys))
    assert sum(map(len, received)) == len(keys)
    for n, messages in enumerate(received):
        for message in messages:
            assert owner.setdefault(message.partition_key(), n) == n, f"{message.partition_key()} moved"
    assert len(owner) == 8


def test_seek_back_to_a_message_id_and_to_a_time(herald: Client, client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-seek")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    values = produce(herald, topic, 5)
    received = receive_all(consumer, 5)
    consumer.seek(received[2].message_id())
    # The broker delivers from the id; the client drops that one message itself (its start id is
    # exclusive unless the consumer was made start_message_id_inclusive), as against Pulsar.
    assert [m.data() for m in receive_all(consumer, 2)] == values[3:]
    consumer.seek(received[0].publish_timestamp())
    assert [m.data() for m in receive_all(consumer, 5)] == values


def test_a_reader_reads_from_the_start_or_from_now(herald: Client, client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-reader")
    values = produce(herald, topic, 3)
    from_start = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [from_start.read_next(RECEIVE_MS).data() for _ in values] == values
    assert not from_start.has_message_available()
    from_now = client.create_reader(topic, pulsar.MessageId.latest)
    later = produce(herald, topic, 2, prefix="later")
    assert [from_now.read_next(RECEIVE_MS).data() for _ in later] == later
    assert from_start.read_next(RECEIVE_MS).data() == later[0]


def test_unsubscribe_deletes_the_subscription(
    herald: Client, client: pulsar.Client, admin: SyncAdminClient,
) -> None:
    topic = unique_topic("pulsar-unsubscribe")
    consumer = client.subscribe(topic, "gone")
    assert admin.list_subscriptions(topic) == ["gone"]
    consumer.unsubscribe()
    assert admin.list_subscriptions(topic) == []


def test_a_partitioned_topic_is_consumed_across_its_partitions(
    herald: Client, make_client: Callable[..., pulsar.Client], admin: SyncAdminClient,
) -> None:
    topic = unique_topic("pulsar-partitioned")
    admin.create_topic(topic, partitions=3)
    client = make_client()
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    values = produce(herald, topic, 30)
    received = receive_all(consumer, len(values))
    assert sorted(m.data() for m in received) == sorted(values)
    assert {m.topic_name() for m in received} == {f"{topic}-partition-{i}" for i in range(3)}
    assert {(m.topic_name(), m.message_id().partition()) for m in received} == {
        (f"{topic}-partition-{i}", i) for i in range(3)}  # ids name their partition
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]


def test_a_regex_consumer_reads_every_matching_topic(herald: Client, client: pulsar.Client) -> None:
    prefix = unique_topic("pulsar-regex")
    topics = [f"{prefix}-{i}" for i in range(3)]
    for topic in topics:
        produce(herald, topic, 1, prefix=topic.rsplit("/", 1)[1])
    consumer = client.subscribe(re.compile(re.escape(prefix) + "-.*"), "s",
                                initial_position=pulsar.InitialPosition.Earliest)
    received = receive_all(consumer, 3)
    assert sorted(m.topic_name() for m in received) == topics


def test_a_multi_topic_consumer_reads_each_topic_it_names(herald: Client, client: pulsar.Client) -> None:
    topics = [unique_topic("pulsar-multi") for _ in range(2)]
    consumer = client.subscribe(topics, "s", initial_position=pulsar.InitialPosition.Earliest)
    for topic in topics:
        produce(herald, topic, 2)
    assert sorted(m.topic_name() for m in receive_all(consumer, 4)) == sorted(topics * 2)
