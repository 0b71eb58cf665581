"""A topic unloaded (as on a rebalance or a broker's shutdown) closes its producers and consumers
with CLOSE_PRODUCER / CLOSE_CONSUMER; the official client reconnects by itself and carries on:
nothing acknowledged is lost, nothing is stored twice."""

from __future__ import annotations

import pulsar
import pytest
from herald.client.admin import SyncAdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic


def test_producers_and_consumers_carry_on_across_an_unload(server: StandaloneProcess, client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-unload")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, producer_name="steady", batching_enabled=False)
    for i in range(5):
        producer.send(b"before-%d" % i)
    with SyncAdminClient(server.service_url) as admin:
        admin.unload_topic(topic)
        for i in range(5):
            producer.send(b"after-%d" % i)  # sent once the client has reconnected
        received = []
        for _ in range(10):
            message = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(message)
            received.append(message.data())
        assert received == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]
        stats = admin.topic_stats(topic)
        assert [p.producer_name for p in stats.producers] == ["steady"]  # the same producer, back
        assert stats.msg_in_counter == 5  # since the reload: each "after" stored once


def test_a_terminated_topic_refuses_sends_and_its_consumers_stay_connected(
    server: StandaloneProcess, client: pulsar.Client,
) -> None:
    """REACHED_END_OF_TOPIC is not sent to the C++ client (it would close its connection on it):
    its consumer reads everything stored and stays connected; a send is refused with Pulsar's
    TopicTerminated."""
    topic = unique_topic("pulsar-terminated")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"last")
    with SyncAdminClient(server.service_url) as admin:
        admin.terminate_topic(topic)
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"too late")
    assert consumer.receive(timeout_millis=10_000).data() == b"last"
    assert consumer.is_connected()
