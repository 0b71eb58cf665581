"""Subscription resources: made in Herald at their initial position, with their dead-letter policy
kept by the brokers (and applied to consumers that send none), drift reverted by the timer, the
resource's topic given as a Topic resource or a full name, deletion per deletionPolicy."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from herald.api.v1 import broker_pb2
from herald.client.admin import AdminClient
from herald.client.config import InitialPosition
from herald_operator import desired, reconcile

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name, unique_topic
from tests.operator.conftest import Cluster, OperatorStarter
from tests.wire import WireClient


@pytest.fixture
async def wire(herald: StandaloneProcess) -> AsyncIterator[WireClient]:
    async with WireClient(herald.port) as client:
        yield client


async def ready(cluster: Cluster, name: str) -> bool:
    found = await cluster.condition("Subscription", name, "Synced")
    return found is not None and found["status"] == "True"


async def test_subscription_on_a_topic_resource_exists_with_its_dead_letter_policy(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    topic_name, sub_name = unique_name("jobs"), unique_name("workers")
    topic = f"persistent://public/default/{topic_name}"
    # The subscription first: it waits for its Topic resource, saying so.
    await cluster.apply("Subscription", sub_name, {
        "topic": topic_name, "subscriptionName": "workers", "type": "Shared", "initialPosition": "Earliest",
        "deadLetterPolicy": {"maxRedeliverCount": 3, "deadLetterTopic": f"{topic}-dead"}})

    async def waiting() -> bool:
        found = await cluster.condition("Subscription", sub_name, "Synced")
        return found is not None and found["reason"] == "TopicNotFound"
    await eventually(waiting, "TopicNotFound reported")
    await cluster.apply("Topic", topic_name, {"partitions": 2})
    await eventually(lambda: ready(cluster, sub_name), "subscription Synced=True")

    assert await admin.list_subscriptions(topic) == ["workers"]
    policy = await admin.dead_letter_policy(topic, "workers")
    assert (policy.max_redeliver_count, policy.dead_letter_topic) == (3, f"{topic}-dead")
    obj = await cluster.get("Subscription", sub_name)
    assert obj is not None and obj["status"]["topic"] == topic and obj["status"]["phase"] == "Ready"

    # Drift: the policy changed and the subscription deleted through the admin API.
    await admin.set_dead_letter_policy(topic, "workers", 9)
    await admin.delete_subscription(topic, "workers")

    async def reverted() -> bool:
        if "workers" not in await admin.list_subscriptions(topic):
            return False
        return (await admin.dead_letter_policy(topic, "workers")).max_redeliver_count == 3
    await eventually(reverted, "subscription and policy restored")

    await cluster.delete("Subscription", sub_name)

    async def released() -> bool:
        return await cluster.get("Subscription", sub_name) is None
    await eventually(released, "subscription resource released")
    assert await admin.list_subscriptions(topic) == []
    assert (await admin.dead_letter_policy(topic, "workers")).max_redeliver_count == 0


async def test_subscription_with_full_topic_name_and_retain_policy(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    topic = unique_topic("full")
    await admin.create_topic(topic)
    name = unique_name("kept")
    await cluster.apply("Subscription", name, {"topic": topic, "deletionPolicy": "Retain"})
    await eventually(lambda: ready(cluster, name), "subscription Synced=True")
    assert await admin.list_subscriptions(topic) == [name]
    await cluster.delete("Subscription", name)

    async def released() -> bool:
        return await cluster.get("Subscription", name) is None
    await eventually(released, "subscription resource released")
    assert await admin.list_subscriptions(topic) == [name]


async def test_admin_dead_letter_policy_applies_to_consumers_that_send_none(
    herald: StandaloneProcess, admin: AdminClient, wire: WireClient,
) -> None:
    topic = unique_topic("dl")
    await admin.create_topic(topic)
    await admin.create_subscription(topic, "s", InitialPosition.Earliest)
    await admin.set_dead_letter_policy(topic, "s", 2)
    producer = await wire.producer(topic)
    assert (await producer.send(b"poison")).HasField("receipt")
    await producer.close()
    consumer = await wire.consumer(topic, "s", type=broker_pb2.SHARED, initial_position=broker_pb2.EARLIEST)
    await consumer.flow(10)
    entries = await consumer.receive(1)
    await consumer.nack(*entries, delay_ms=0)
    entries = await consumer.receive(1)
    assert entries[0].redelivery_count == 1
    await consumer.nack(*entries, delay_ms=0)  # the second redelivery reaches the policy's count

    async def dead_letters() -> int:
        return int((await admin.topic_stats(topic)).subscriptions[0].dead_letters)

    await eventually(dead_letters, "a dead letter", until=lambda count: count == 1)
    await consumer.close()
    await admin.delete_topic(topic, force=True)


async def test_subscription_reconciling_again_changes_nothing(herald: StandaloneProcess, admin: AdminClient) -> None:
    topic = unique_topic("idem")
    await admin.create_topic(topic, 2)
    wanted = desired.desired_subscription(
        {"topic": topic, "initialPosition": "Earliest", "deadLetterPolicy": {"maxRedeliverCount": 4}}, "sub")
    first = await reconcile.reconcile_subscription(admin, wanted)
    assert len(first.changes) == 2
    again = await reconcile.reconcile_subscription(admin, wanted)
    assert again.changes == [] and again.problems == []
    assert await reconcile.delete_subscription(admin, wanted)
    assert not await reconcile.delete_subscription(admin, wanted)


async def test_subscription_on_a_missing_topic_is_not_ready(admin: AdminClient) -> None:
    wanted = desired.desired_subscription({"topic": unique_topic("none")}, "s")
    with pytest.raises(reconcile.TopicNotReadyError):
        await reconcile.reconcile_subscription(admin, wanted)
