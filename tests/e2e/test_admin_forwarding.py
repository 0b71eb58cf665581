"""Every broker serves the admin API: with two brokers as processes, topic and subscription calls
made to the broker that does not own the topic are forwarded to the owner (once), and a partitioned
topic's stats gather partitions served by both brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc.aio
import pytest
from herald.api.v1 import admin_pb2, admin_pb2_grpc, lookup_pb2, lookup_pb2_grpc
from herald.broker.grpc.admin_forwarding import FORWARDED_BY
from herald.client import AsyncClient, InitialPosition
from herald.client.admin import AdminClient
from herald.common.errors import PreconditionFailedError
from herald.local_cluster import LocalCluster

TOPIC = "persistent://public/default/forwarded"
PARTED = "persistent://public/default/forwarded-parted"


async def owner_of(lookup_address: str, topic: str) -> str:
    async with grpc.aio.insecure_channel(lookup_address) as channel:
        reply = await lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=topic), timeout=30)
        return str(reply.broker_address)


async def forwarding(cluster: LocalCluster) -> None:
    addresses = [broker.address for broker in cluster.brokers]
    async with AsyncClient(cluster.service_url) as client:
        producer = await client.create_producer(TOPIC)
        for i in range(5):
            await producer.send(b"%d" % i)
        owner = await owner_of(cluster.lookup.address, TOPIC)
        [other] = [address for address in addresses if address != owner]

        async with AdminClient(other) as admin:
            stats = await admin.topic_stats(TOPIC)  # answered by the owner
            assert (stats.msg_in_counter, len(stats.producers)) == (5, 1)
            await admin.create_subscription(TOPIC, "made-elsewhere", InitialPosition.Earliest)
            async with AdminClient(owner) as at_owner:
                assert await at_owner.list_subscriptions(TOPIC) == ["made-elsewhere"]
            assert len(await admin.peek_messages(TOPIC, "made-elsewhere", 5)) == 5

            # A call already forwarded once is answered where it lands: NOT_OWNER here.
            async with grpc.aio.insecure_channel(other) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await admin_pb2_grpc.AdminServiceStub(channel).GetTopicStats(
                        admin_pb2.TopicStatsRequest(topic=TOPIC), metadata=((FORWARDED_BY, "test"),), timeout=30)
            assert refused.value.details().startswith(f"6:topic {TOPIC} is owned by broker")

            # A partitioned topic's partitions land on both brokers; its stats sum them all.
            await admin.create_topic(PARTED, partitions=4)
            partitions = [f"{PARTED}-partition-{i}" for i in range(4)]
            owners = {await owner_of(cluster.lookup.address, p) for p in partitions}
            assert owners == set(addresses)
            for partition in partitions:
                partition_producer = await client.create_producer(partition)
                await partition_producer.send(b"x")
            summed = await admin.topic_stats(PARTED)
            assert (summed.partitions, summed.msg_in_counter) == (4, 4)
            assert [p.topic for p in summed.partition_stats] == partitions

            # Deleting it deletes the partitions other brokers serve too (forwarded to them).
            with pytest.raises(PreconditionFailedError, match="Topic has active producers/consumers"):
                await admin.delete_topic(PARTED)
            await admin.delete_topic(PARTED, force=True)
            assert await admin.get_partitions(PARTED) == 0
            assert PARTED not in await admin.list_topics("public/default")


def test_admin_calls_are_forwarded_to_the_topics_owner(make_local_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_local_cluster(brokers=2, storage_nodes=1, ensemble_size=1, write_quorum=1, ack_quorum=1)
    asyncio.run(forwarding(cluster))
