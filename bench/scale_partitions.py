"""One partitioned topic with many consumers on one Shared subscription (issue 20 item 4): at each
--scales P:C (partitions:consumers), the time to create the topic and attach a producer and the
consumers, the standalone's memory after each step, produce and consume throughput through the
partitioned topic (the Shared subscription read by C consumers, and by 1 consumer), the idle
standalone's CPU%, and after a restart the time until the producer and consumers serve again.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/scale_partitions.py \
        --scales 10:1 100:10 1000:100

One AsyncClient drives the producer and every consumer. Results: bench/results/scale_partitions.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Standalone, append_result, machine_limits
from herald.client import AsyncClient, AsyncConsumer, ConsumerType, InitialPosition
from herald.client.admin import AdminClient
from scale import bounded, connections_for, idle_cpu_percent

TOPIC = "persistent://public/default/scale-partitioned"


async def consume(consumers: list[AsyncConsumer[bytes]], messages: int) -> float:
    """Seconds until `consumers` together received (and acknowledged) `messages`."""
    received = 0
    started = time.perf_counter()

    async def drain(consumer: AsyncConsumer[bytes]) -> None:
        nonlocal received
        while received < messages:
            message = await consumer.receive(timeout=1)
            if message is not None:
                consumer.acknowledge(message)
                received += 1

    deadline = started + 300
    tasks = [asyncio.ensure_future(drain(c)) for c in consumers]
    try:
        while received < messages:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"consumers stalled at {received} of {messages}")
            await asyncio.sleep(0.05)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return time.perf_counter() - started


async def subscribe(client: AsyncClient, name: str, count: int) -> list[AsyncConsumer[bytes]]:
    return await bounded(
        lambda _i: client.subscribe(TOPIC, name, ConsumerType.Shared, InitialPosition.Earliest,
                                    receiver_queue_size=100, max_total_receiver_queue_size_across_partitions=2000),
        range(count), 10)


def producer_options(partitions: int) -> dict[str, Any]:
    """100 pending per partition at least: at 1,000 partitions a partition's share (50) filled up
    and raised ProducerQueueIsFullError despite block_if_queue_full (noticed: client)."""
    return {"max_pending_messages": 1000, "block_if_queue_full": True,
            "max_pending_messages_across_partitions": max(50_000, 100 * partitions)}


async def measure(server: Standalone, partitions: int, consumers: int, messages: int,
                  idle_seconds: float) -> dict[str, Any]:
    payload = b"x" * 100
    out: dict[str, Any] = {"partitions": partitions, "consumers": consumers, "messages": messages, "size": 100}
    connections = connections_for(partitions * (consumers + 2))  # the consumers, a producer, one more consumer
    async with AsyncClient(server.service_url, connections_per_broker=connections) as client, \
            AdminClient(server.service_url) as admin:
        warm = await client.create_producer("persistent://public/default/warm-up")
        await warm.send(payload)
        out["rss_baseline_mib"] = server.rss_mib()

        started = time.perf_counter()
        await admin.create_topic(TOPIC, partitions)
        producer = await client.create_producer(TOPIC, **producer_options(partitions))
        out["create_and_produce_attach_s"] = time.perf_counter() - started
        out["rss_after_partitions_mib"] = server.rss_mib()

        started = time.perf_counter()
        many = await subscribe(client, "shared", consumers)
        out["subscribe_s"] = time.perf_counter() - started
        one = await subscribe(client, "single", 1)
        out["rss_after_subscriptions_mib"] = server.rss_mib()

        started = time.perf_counter()
        for _ in range(messages):
            await producer.send_async(payload)
        await producer.flush()
        out["produce_msg_s"] = messages / (time.perf_counter() - started)
        out["consume_msg_s"] = messages / await consume(many, messages)
        out["consume_1_consumer_msg_s"] = messages / await consume(one, messages)
        out["rss_after_traffic_mib"] = server.rss_mib()
        out["idle_cpu_percent"] = await idle_cpu_percent(server.pid, idle_seconds)
        out["peak_rss_before_restart_mib"] = server.peak_rss_mib()
    out["per_partition_kib"] = (out["rss_after_partitions_mib"] - out["rss_baseline_mib"]) * 1024 / partitions
    out["per_consumer_partition_kib"] = (
        (out["rss_after_subscriptions_mib"] - out["rss_after_partitions_mib"]) * 1024 / ((consumers + 1) * partitions))
    print("before the restart:", out, flush=True)  # kept if the restart phase fails

    server.stop()
    started = time.perf_counter()
    server.start()
    async with AsyncClient(server.service_url, connections_per_broker=connections) as client:
        producer = await client.create_producer(TOPIC, **producer_options(partitions))
        many = await subscribe(client, "shared", consumers)
        await bounded(lambda _i: producer.send(payload), range(partitions), 100)  # round robin: one each
        await consume(many, partitions)
        out["restart_to_serving_s"] = time.perf_counter() - started
    out["peak_rss_after_restart_mib"] = server.peak_rss_mib()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scales", nargs="+", default=["10:1", "100:10", "1000:100"], help="partitions:consumers")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--label", default="", help="a note stored with each line")
    args = parser.parse_args()
    for scale in args.scales:
        partitions, consumers = (int(part) for part in scale.split(":"))
        with tempfile.TemporaryDirectory() as tmp, Standalone(Path(tmp)) as server:
            limits = machine_limits(Path(tmp))
            figures = asyncio.run(measure(server, partitions, consumers, args.messages, args.idle_seconds))
            record = append_result("scale_partitions.jsonl", {"label": args.label, "limits": limits, **figures})
            print({k: round(v, 2) if isinstance(v, float) else v for k, v in record.items()}, flush=True)


if __name__ == "__main__":
    main()
