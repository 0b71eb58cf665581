"""Storage nodes register in the metadata store: brokers find a node started later without a restart
(storage.membership, storage.node.registration, storage.client.node_registry)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable

from herald.client import AsyncClient
from herald.local_cluster import ClusterProcess, LocalCluster


def entries_written(node: ClusterProcess) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("herald_storage_write_entries_total"))


async def produce(url: str, topic: str, count: int) -> None:
    async with AsyncClient(url) as client:
        producer = await client.create_producer(topic)
        for future in [await producer.send_async(b"%d" % i) for i in range(count)]:
            await future


def test_a_storage_node_started_later_holds_new_ledgers_without_a_broker_restart(
    make_local_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_local_cluster(brokers=1, storage_nodes=2, ensemble_size=2, write_quorum=2, ack_quorum=2)
    broker_starts = cluster.brokers[0].starts
    asyncio.run(produce(cluster.service_url, "before", 5))
    late = cluster.add_storage_node()
    assert late.address not in " ".join(cluster.brokers[0].args)  # not in the broker's static list
    # Each new topic's ledger takes 2 of the 3 registered nodes at random: poll with new topics.
    deadline, topics = time.monotonic() + 60, 0
    while entries_written(late) == 0:
        assert time.monotonic() < deadline, "no ledger was placed on the storage node started later"
        asyncio.run(produce(cluster.service_url, f"after-{topics}", 5))
        topics += 1
    assert cluster.brokers[0].starts == broker_starts and cluster.brokers[0].running
