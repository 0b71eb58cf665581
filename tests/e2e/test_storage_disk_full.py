"""A local cluster (ledgers 3/2/2) with one storage node whose disk fills up while producers write:
the node refuses adds, the brokers' writers move their ledgers off it (an ensemble change, as for a
dead node), producing goes on, and every acknowledged message is consumed afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.request import urlopen

from herald.client import AsyncClient, InitialPosition
from herald.local_cluster import LocalCluster

COUNT = 3000
TOPICS = ("full-node-a", "full-node-b")


def metric(port: int | None, name: str) -> float:
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and line[len(name)] in " {")


async def produce(url: str, topic: str) -> list[bytes]:
    """Send COUNT messages; every one must be acknowledged (the cluster keeps taking writes)."""
    sent = []
    async with AsyncClient(url) as client:
        producer = await client.create_producer(topic, send_timeout=60)
        for start in range(0, COUNT, 100):
            batch = [f"{topic}-{i}-".encode().ljust(1024, b"x") for i in range(start, start + 100)]
            for future in [await producer.send_async(value) for value in batch]:
                await future
            sent.extend(batch)
    return sent


async def consume(url: str, topic: str, count: int) -> list[bytes]:
    async with AsyncClient(url) as client:
        consumer = await client.subscribe(topic, "check", initial_position=InitialPosition.Earliest)
        values = []
        while len(values) < count and (message := await consumer.receive(timeout=30)) is not None:
            values.append(message.value)
            consumer.acknowledge(message)
        return values


def test_producing_goes_on_when_a_storage_node_is_full_and_nothing_acknowledged_is_lost(
        make_local_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_local_cluster()
    full = cluster.process("storage-0")
    # Restarted with a data cap it reaches after a few hundred KB of entries (its index takes ~40 KB).
    full.stop()
    full.args = [*full.args, "--max-data-bytes", "400000", "--min-free-bytes", "0"]
    full.start()

    async def run() -> None:
        sent = await asyncio.gather(*(produce(cluster.service_url, topic) for topic in TOPICS))
        for topic, values in zip(TOPICS, sent, strict=True):
            assert len(values) == COUNT
            assert await consume(cluster.service_url, topic, COUNT) == values

    asyncio.run(run())
    # The node did fill up and refuse adds, and still serves: its refusals are counted.
    assert metric(full.metrics_port, "herald_storage_full_refused_adds_total") > 0
    assert full.running
