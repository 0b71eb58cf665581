"""Unloading a topic moves it: with two brokers as processes, a producer keeps sending while the
owner is told to unload the topic (raw gRPC admin call); the topic moves to the other broker, and
every acknowledged message is stored once, in order (dedup on)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc.aio
from herald.api.v1 import admin_pb2, admin_pb2_grpc, lookup_pb2, lookup_pb2_grpc
from herald.client import AsyncClient, InitialPosition
from herald.local_cluster import LocalCluster

TOPIC = "persistent://public/default/moving"
MESSAGES = 3000


async def owner_of(lookup_address: str) -> tuple[str, str]:
    async with grpc.aio.insecure_channel(lookup_address) as channel:
        reply = await lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=TOPIC), timeout=30)
        return reply.broker_id, reply.broker_address


async def unload(broker_address: str) -> None:
    async with grpc.aio.insecure_channel(broker_address) as channel:
        await admin_pb2_grpc.AdminServiceStub(channel).UnloadTopic(
            admin_pb2.UnloadTopicRequest(topic=TOPIC), timeout=60)


async def produce_while_unloading(cluster: LocalCluster) -> tuple[list[int], list[bytes], str, str]:
    """Send MESSAGES numbered messages at a steady pace; unload the topic a third of the way in.
    Returns the numbers acknowledged, the topic's content, and the owner before and after."""
    async with AsyncClient(cluster.service_url, operation_timeout=60) as client:
        producer = await client.create_producer(TOPIC, send_timeout=60)
        before, address = await owner_of(cluster.lookup.address)
        sends: list[tuple[int, asyncio.Future[object]]] = []
        for i in range(MESSAGES):
            sends.append((i, await producer.send_async(b"%d" % i)))
            if i % 50 == 49:
                await asyncio.sleep(0.01)  # a steady stream, so the unload lands in the middle of it
            if i == MESSAGES // 3:
                unloading = asyncio.ensure_future(unload(address))
        await unloading
        acked = []
        for i, future in sends:
            try:
                await future
                acked.append(i)
            except Exception:  # an unacknowledged send may or may not be stored
                pass
        await producer.close()
        after, _ = await owner_of(cluster.lookup.address)
        consumer = await client.subscribe(TOPIC, "check", initial_position=InitialPosition.Earliest)
        stored: list[bytes] = []
        while (message := await consumer.receive(timeout=5)) is not None:
            stored.append(message.value)
            consumer.acknowledge(message)
        return acked, stored, before, after


def test_unloading_moves_the_topic_to_the_other_broker_without_loss_or_duplicates(
    make_local_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_local_cluster(storage_nodes=1, ensemble_size=1, write_quorum=1, ack_quorum=1)
    acked, stored, before, after = asyncio.run(produce_while_unloading(cluster))
    assert before != after and {before, after} == {"broker-0", "broker-1"}
    numbers = [int(value) for value in stored]
    assert numbers == sorted(set(numbers)), "stored out of order or twice"
    assert set(acked) <= set(numbers), f"acknowledged but lost: {sorted(set(acked) - set(numbers))[:10]}"
    assert len(acked) == MESSAGES  # the client rode through the move without failing a send
    old_log = cluster.process(before).log_path.read_text()
    assert f"topic {TOPIC} unloaded" in old_log
