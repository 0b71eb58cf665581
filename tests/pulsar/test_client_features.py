"""The official client's own features over Herald, written from Pulsar's documented behaviour: the
ack timeout, the client-driven dead-letter topic, delayed delivery, partition routing modes, the
asyncio API, and Herald's and Pulsar's clients sharing one subscription."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator

import pulsar
import pulsar.asyncio
import pytest
from herald.client import Client, ConsumerType
from herald.client.admin import SyncAdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

RECEIVE_MS = 10_000


@pytest.fixture
def admin(server: StandaloneProcess) -> Iterator[SyncAdminClient]:
    with SyncAdminClient(server.service_url) as made:
        yield made


def test_an_unacknowledged_message_comes_back_after_the_ack_timeout(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-ack-timeout")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                unacked_messages_timeout_ms=10_000)  # the client's minimum
    producer = client.create_producer(topic)
    producer.send(b"forgotten")
    first = consumer.receive(timeout_millis=RECEIVE_MS)
    again = consumer.receive(timeout_millis=30_000)  # not acknowledged: redelivered after the timeout
    assert (again.data(), again.message_id()) == (first.data(), first.message_id())
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_a_message_nacked_past_max_redeliveries_goes_to_the_dead_letter_topic(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-dlq")
    dead_letter_topic = f"{topic}-DLQ"
    policy = pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dead_letter_topic)
    dead = client.subscribe(dead_letter_topic, "dead", initial_position=pulsar.InitialPosition.Earliest)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, dead_letter_policy=policy,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    producer.send(b"poison", properties={"why": "test"})
    for attempt in range(3):  # the first delivery and two redeliveries
        message = consumer.receive(timeout_millis=RECEIVE_MS)
        assert (message.data(), message.redelivery_count()) == (b"poison", attempt)
        consumer.negative_acknowledge(message)
    letter = dead.receive(timeout_millis=RECEIVE_MS)
    assert letter.data() == b"poison"
    assert letter.properties()["why"] == "test"
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1_000)  # gone from the subscription


def test_delayed_messages_wait_for_their_time_on_a_shared_subscription(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-delayed")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    sent_at = time.time()
    producer.send(b"later", deliver_after=datetime.timedelta(seconds=2))
    producer.send(b"now")
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"now"
    later = consumer.receive(timeout_millis=RECEIVE_MS)
    assert later.data() == b"later"
    assert time.time() - sent_at >= 2.0  # not delivered before its time (a lower bound: no timing race)


@pytest.mark.parametrize("mode", [pulsar.PartitionsRoutingMode.RoundRobinDistribution,
                                  pulsar.PartitionsRoutingMode.UseSinglePartition],
                         ids=["round-robin", "single-partition"])
def test_routing_modes_spread_or_pin_unkeyed_messages(
    client: pulsar.Client, admin: SyncAdminClient, mode: pulsar.PartitionsRoutingMode,
) -> None:
    topic = unique_topic("pulsar-routing")
    admin.create_topic(topic, partitions=4)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, message_routing_mode=mode, batching_enabled=False)
    for i in range(40):
        producer.send(b"%d" % i)
    partitions = {consumer.receive(timeout_millis=RECEIVE_MS).message_id().partition() for _ in range(40)}
    assert len(partitions) == (4 if mode == pulsar.PartitionsRoutingMode.RoundRobinDistribution else 1)


def test_keyed_messages_stay_on_one_partition(client: pulsar.Client, admin: SyncAdminClient) -> None:
    topic = unique_topic("pulsar-keyed")
    admin.create_topic(topic, partitions=4)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(b"%d" % i, partition_key=f"key-{i % 3}")
    seen: dict[str, set[int]] = {}
    for _ in range(30):
        message = consumer.receive(timeout_millis=RECEIVE_MS)
        seen.setdefault(message.partition_key(), set()).add(message.message_id().partition())
    assert all(len(partitions) == 1 for partitions in seen.values()), seen


def test_the_asyncio_api_produces_and_consumes(server: StandaloneProcess) -> None:
    async def run() -> list[bytes]:
        client = pulsar.asyncio.Client(server.pulsar_url)
        try:
            topic = unique_topic("pulsar-asyncio")
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(topic)
            await asyncio.gather(*(producer.send(b"%d" % i) for i in range(20)))
            received = []
            for _ in range(20):
                message = await consumer.receive()
                await consumer.acknowledge(message)
                received.append(message.data())
            await producer.close()
            await consumer.close()
            return received
        finally:
            await client.close()

    assert sorted(asyncio.run(run()), key=int) == [b"%d" % i for i in range(20)]


def test_herald_and_pulsar_consumers_share_one_subscription(server: StandaloneProcess, client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-mixed")
    with Client(server.service_url) as herald:
        herald_consumer = herald.subscribe(topic, "shared", consumer_type=ConsumerType.Shared, receiver_queue_size=5)
        pulsar_consumer = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared,
                                           receiver_queue_size=5)
        pulsar_producer = client.create_producer(topic, batching_enabled=False)
        herald_producer = herald.create_producer(topic, batching_enabled=False)
        for i in range(20):
            (pulsar_producer if i % 2 else herald_producer).send(b"%d" % i)
        got: list[bytes] = []
        by_pulsar = by_herald = 0
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            message = herald_consumer.receive(timeout=0.2)
            if message is not None:
                herald_consumer.acknowledge(message)
                got.append(message.data())
                by_herald += 1
            try:
                other = pulsar_consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            pulsar_consumer.acknowledge(other)
            got.append(other.data())
            by_pulsar += 1
        herald_consumer.close()
    assert sorted(got, key=int) == [b"%d" % i for i in range(20)]
    assert by_herald and by_pulsar
