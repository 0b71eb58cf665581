"""The produce gap when the owner broker dies: a producer sends continuously to a local cluster
(2 brokers, 3 storage nodes, 3/2/2); the owner is SIGKILLed; the gap is the longest time between
two consecutive acknowledgements around the kill. Appends to bench/results/failover_gap.jsonl."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import threading
import time
from pathlib import Path

import grpc
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.client import AsyncClient
from herald.local_cluster import ClusterSettings, LocalCluster

RESULTS = Path(__file__).resolve().parent / "results" / "failover_gap.jsonl"


async def produce(url: str, topic: str, stop: threading.Event, ack_times: list[float]) -> None:
    async with AsyncClient(url, keep_alive=1.0, operation_timeout=60.0) as client:
        producer = await client.create_producer(topic, send_timeout=60.0, block_if_queue_full=True)
        while not stop.is_set():
            future = await producer.send_async(b"x" * 100)
            future.add_done_callback(lambda f: ack_times.append(time.monotonic()) if not f.exception() else None)
            await asyncio.sleep(0.001)  # ~1,000 msg/s: a steady stream
        await producer.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--heartbeat", type=float, default=1.0, help="broker heartbeat seconds (expiry = 3x)")
    parser.add_argument("--seconds", type=float, default=5.0, help="produce this long before and after the kill")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(ClusterSettings(base_dir=tmp, heartbeat_interval=args.heartbeat))
        cluster.start()
        try:
            topic = "failover-gap"
            stop = threading.Event()
            ack_times: list[float] = []
            thread = threading.Thread(target=lambda: asyncio.run(produce(cluster.service_url, topic, stop, ack_times)))
            thread.start()
            time.sleep(args.seconds)
            with grpc.insecure_channel(cluster.lookup.address) as channel:
                owner = lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
                    lookup_pb2.LookupTopicRequest(topic=topic)).broker_address
            killed_at = time.monotonic()
            cluster.broker_at(owner).kill()
            time.sleep(args.seconds)
            deadline = time.monotonic() + 120
            while (not ack_times or ack_times[-1] < killed_at) and time.monotonic() < deadline:
                time.sleep(0.1)
            stop.set()
            thread.join(120)
        finally:
            cluster.stop()
    times = sorted(ack_times)
    gaps = [b - a for a, b in itertools.pairwise(times) if b > killed_at - 1]
    result = {"heartbeat_s": args.heartbeat, "expiry_s": 3 * args.heartbeat, "gap_s": max(gaps) if gaps else None,
              "acked": len(times)}
    print(f"produce gap after SIGKILL of the owner broker: {result['gap_s']:.2f} s "
          f"(heartbeat {args.heartbeat} s, expiry {3 * args.heartbeat} s, {len(times)} messages acknowledged)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as handle:
        handle.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), **result}) + "\n")


if __name__ == "__main__":
    main()
