"""The official client across a broker's death in a local cluster (2 brokers, 3 storage nodes,
3/2/2): a producer sending all along reconnects to the new owner by itself, and deduplication by
producer name and sequence id keeps its resends from being stored twice: every acknowledged
message is stored, none twice, in send order. A consumer carries on from its subscription."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
import pulsar
import pytest
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.client.admin import SyncAdminClient
from herald.local_cluster import LocalCluster

from tests.helpers import unique_topic
from tests.pulsar.conftest import QUIET


def service_url(cluster: LocalCluster) -> str:
    """Every broker, as a cluster's Pulsar clients are given it: lookups go to whichever answers."""
    return "pulsar://" + ",".join(broker.pulsar_url.removeprefix("pulsar://") for broker in cluster.brokers)


def owner_of(cluster: LocalCluster, topic: str) -> str:
    with grpc.insecure_channel(cluster.lookup.address) as channel:
        return str(lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=topic), timeout=10).broker_address)


def produce_through(cluster: LocalCluster, topic: str, fault: Callable[[str], None]) -> None:
    """Send all along with the official client; once 200 are acknowledged, `fault(owner address)`;
    then 300 more must be acknowledged, none may fail, and the subscription must hold every
    acknowledged message once, in send order."""
    client = pulsar.Client(service_url(cluster), operation_timeout_seconds=60, logger=QUIET)
    acked: list[bytes] = []
    failed: list[pulsar.Result] = []
    stop = threading.Event()
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, producer_name="rider", send_timeout_millis=60_000,
                                          batching_enabled=False, block_if_queue_full=True)

        def send_all_along() -> None:
            number = 0
            while not stop.is_set():
                value = b"%06d" % number

                def sent(result: pulsar.Result, _id: object, value: bytes = value) -> None:
                    (acked.append(value) if result == pulsar.Result.Ok else failed.append(result))

                producer.send_async(value, sent)
                number += 1
                time.sleep(0.002)
            producer.flush()

        sender = threading.Thread(target=send_all_along)
        sender.start()
        deadline = time.monotonic() + 30
        while len(acked) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        fault(owner_of(cluster, topic))
        faulted_at = len(acked)
        deadline = time.monotonic() + 60
        while len(acked) < faulted_at + 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        sender.join(90)
        assert len(acked) >= faulted_at + 300, f"the producer did not recover: {len(acked)} acknowledged, {failed[:3]}"
        assert not failed
        received: list[bytes] = []
        while True:
            try:
                message = consumer.receive(timeout_millis=3_000)
            except pulsar.Timeout:
                break
            consumer.acknowledge(message)
            received.append(message.data())
        assert len(received) == len(set(received)), "a message was stored twice"
        assert set(acked) <= set(received), "an acknowledged message was lost"
        assert received == sorted(received), "messages out of send order"
    finally:
        stop.set()
        client.close()


def test_a_producer_rides_out_its_broker_s_death_and_stores_each_message_once(local_cluster: LocalCluster) -> None:
    produce_through(local_cluster, unique_topic("pulsar-failover"),
                    lambda owner: local_cluster.broker_at(owner).kill())


@pytest.mark.parametrize("fault", ["unload", "sigterm"])
def test_a_graceful_move_of_the_topic_fails_no_send_and_loses_nothing(local_cluster: LocalCluster, fault: str) -> None:
    """Issue 21 item 5: `herald admin topics unload`, or the owner's SIGTERM (a rolling restart's
    step), while the official client sends: the topic moves to the other broker, every send is
    acknowledged, every acknowledged message is stored once, in order."""
    topic = unique_topic(f"pulsar-{fault}")
    moved_from: list[str] = []

    def move(owner: str) -> None:
        moved_from.append(owner)
        if fault == "unload":
            with SyncAdminClient(owner) as admin:
                admin.unload_topic(topic)
        else:
            local_cluster.broker_at(owner).stop()

    produce_through(local_cluster, topic, move)
    assert owner_of(local_cluster, topic) not in moved_from
