"""Many topics on one standalone, each with a producer and a consumer (issue 20 item 4): at each
--scales N, the standalone's memory per topic and per subscription, the time to create them, the
lookup service's topic lookups/s (many in flight), the idle standalone's CPU%, and after a restart
the time until every topic is loaded and serving again (a producer and the consumer back on each,
one message through each).

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/scale_topics.py --scales 100 1000 10000

One AsyncClient drives every producer and consumer (one shared channel to the broker), consumers
with small receive queues: the client is not what is measured. Results: bench/results/scale_topics.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Standalone, append_result, machine_limits
from herald.client import AsyncClient, AsyncConsumer, AsyncProducer, ConsumerType, InitialPosition
from scale import bounded, connections_for, idle_cpu_percent, lookup_rate

SUBSCRIPTION = "scale"
CONCURRENCY = 100


async def open_all(client: AsyncClient, topics: list[str], producers: bool, consumers: bool,
                   payload: bytes) -> tuple[list[AsyncProducer[bytes]], list[AsyncConsumer[bytes]]]:
    """On each topic a producer and/or a consumer; one message sent through each producer (and
    received by each consumer when both)."""

    async def one(topic: str) -> tuple[AsyncProducer[bytes] | None, AsyncConsumer[bytes] | None]:
        consumer = await client.subscribe(
            topic, SUBSCRIPTION, ConsumerType.Exclusive, InitialPosition.Earliest,
            receiver_queue_size=10) if consumers else None
        producer = await client.create_producer(topic) if producers else None
        if producer is not None:
            await producer.send(payload)
        if consumer is not None:
            message = await consumer.receive(timeout=60)
            if message is None:
                raise RuntimeError(f"nothing received on {topic}")
            consumer.acknowledge(message)
        return producer, consumer

    made = await bounded(one, topics, CONCURRENCY)
    return [p for p, _ in made if p is not None], [c for _, c in made if c is not None]


async def measure(server: Standalone, n: int, idle_seconds: float, lookup_seconds: float) -> dict[str, Any]:
    topics = [f"persistent://public/default/scale-{i}" for i in range(n)]
    payload = b"x" * 100
    out: dict[str, Any] = {"topics": n}
    async with AsyncClient(server.service_url, connections_per_broker=connections_for(2 * n)) as client:
        await open_all(client, ["persistent://public/default/warm-up"], True, True, payload)
        out["rss_baseline_mib"] = server.rss_mib()

        started = time.perf_counter()
        producers, _ = await open_all(client, topics, True, False, payload)
        out["create_topics_s"] = time.perf_counter() - started
        out["rss_after_topics_mib"] = server.rss_mib()

        started = time.perf_counter()
        _, consumers = await open_all(client, topics, False, True, payload)
        out["subscribe_s"] = time.perf_counter() - started
        out["rss_after_subscriptions_mib"] = server.rss_mib()

        out["idle_cpu_percent"] = await idle_cpu_percent(server.pid, idle_seconds)
        out["rss_idle_mib"] = server.rss_mib()
        out["lookups_per_s"] = await lookup_rate(server.service_url.removeprefix("herald://"), topics, lookup_seconds)
        out["peak_rss_before_restart_mib"] = server.peak_rss_mib()
        del producers, consumers  # closed with the client
    out["per_topic_kib"] = (out["rss_after_topics_mib"] - out["rss_baseline_mib"]) * 1024 / n
    out["per_subscription_kib"] = (out["rss_after_subscriptions_mib"] - out["rss_after_topics_mib"]) * 1024 / n

    server.stop()
    started = time.perf_counter()
    server.start()
    out["restart_to_ready_s"] = time.perf_counter() - started
    async with AsyncClient(server.service_url, connections_per_broker=connections_for(2 * n)) as client:
        await open_all(client, topics, True, True, payload)
        out["restart_to_serving_all_s"] = time.perf_counter() - started
        out["rss_after_reload_mib"] = server.rss_mib()
        out["idle_cpu_percent_after_reload"] = await idle_cpu_percent(server.pid, idle_seconds)
    out["peak_rss_after_restart_mib"] = server.peak_rss_mib()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scales", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--lookup-seconds", type=float, default=5.0)
    parser.add_argument("--label", default="", help="a note stored with each line")
    args = parser.parse_args()
    for n in args.scales:
        with tempfile.TemporaryDirectory() as tmp, Standalone(Path(tmp)) as server:
            limits = machine_limits(Path(tmp))
            figures = asyncio.run(measure(server, n, args.idle_seconds, args.lookup_seconds))
            record = append_result("scale_topics.jsonl", {"label": args.label, "limits": limits, **figures})
            print({k: round(v, 2) if isinstance(v, float) else v for k, v in record.items()}, flush=True)


if __name__ == "__main__":
    main()
