"""What a broker consumer costs without a gRPC stream of its own (issue 20 items 4 and 6): C
consumers on one Shared subscription of a P-partition topic are C x P broker consumers; Herald's
own client opens a gRPC stream for each (bench/scale_partitions.py), the official Pulsar client
multiplexes them all over one TCP connection (the broker's Pulsar front end). Broker RSS per
broker consumer through the Pulsar protocol, beside bench/grpc_stream_cost.py's cost of a bare
gRPC stream, says how much of the gRPC-client figure is the stream and how much the broker.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/scale_pulsar_consumers.py \
        --scales 100:10 1000:10

Results: bench/results/scale_pulsar_consumers.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import pulsar
from harness import Standalone, append_result, machine_limits
from herald.client.admin import AdminClient

TOPIC = "persistent://public/default/pulsar-partitioned"


def measure(server: Standalone, partitions: int, consumers: int) -> dict[str, Any]:
    out: dict[str, Any] = {"partitions": partitions, "consumers": consumers, "protocol": "pulsar"}

    async def create() -> None:
        async with AdminClient(server.service_url) as admin:
            await admin.create_topic(TOPIC, partitions)

    asyncio.run(create())
    # A subscribe to P partitions makes P lookups at once: room for them all; the client logs errors only.
    client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=120,
                           concurrent_lookup_requests=max(50_000, 10 * partitions),
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(TOPIC)
        producer.send(b"warm")
        out["rss_before_consumers_mib"] = server.rss_mib()
        started = time.perf_counter()
        made = [client.subscribe(TOPIC, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10,
                                 max_total_receiver_queue_size_across_partitions=1000) for _ in range(consumers)]
        out["subscribe_s"] = time.perf_counter() - started
        time.sleep(2)
        out["rss_after_consumers_mib"] = server.rss_mib()
        out["peak_rss_mib"] = server.peak_rss_mib()
        out["broker_consumers"] = partitions * consumers
        out["per_broker_consumer_kib"] = (
            (out["rss_after_consumers_mib"] - out["rss_before_consumers_mib"]) * 1024 / (partitions * consumers))
        for consumer in made:
            consumer.close()
    finally:
        client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scales", nargs="+", default=["100:10", "1000:10"], help="partitions:consumers")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    for scale in args.scales:
        partitions, consumers = (int(part) for part in scale.split(":"))
        with tempfile.TemporaryDirectory() as tmp, Standalone(Path(tmp)) as server:
            limits = machine_limits(Path(tmp))
            figures = measure(server, partitions, consumers)
            record = append_result("scale_pulsar_consumers.jsonl", {"label": args.label, "limits": limits, **figures})
            print({k: round(v, 2) if isinstance(v, float) else v for k, v in record.items()}, flush=True)


if __name__ == "__main__":
    main()
