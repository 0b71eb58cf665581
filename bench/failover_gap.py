"""The produce gap when the owner broker dies or lets go: a producer sends continuously to a local
cluster (2 brokers, 3 storage nodes, 3/2/2); the owner is SIGKILLed (`--fault kill`), shut down with
SIGTERM (`--fault sigterm`: a rolling restart's step) or told to unload the topic (`--fault unload`:
`herald admin topics unload`); the gap is the longest time between two consecutive acknowledgements
around the fault. `--client pulsar` uses the official Pulsar client
(PyPI `pulsar-client`) through the brokers' Pulsar ports instead of Herald's, and then reads the
topic back to count what was stored against what was acknowledged (none lost, none twice).
Appends to bench/results/failover_gap.jsonl."""

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
import pulsar
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.client import AsyncClient
from herald.client.admin import SyncAdminClient
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


def produce_pulsar(url: str, topic: str, stop: threading.Event, ack_times: list[float], acked: set[bytes]) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, producer_name="failover-gap", send_timeout_millis=60_000,
                                          block_if_queue_full=True, batching_enabled=False)
        for number in itertools.count():
            if stop.is_set():
                break
            value = b"%d" % number

            def sent(result: pulsar.Result, _id: object, value: bytes = value) -> None:
                if result == pulsar.Result.Ok:
                    ack_times.append(time.monotonic())
                    acked.add(value)

            producer.send_async(value, sent)
            time.sleep(0.001)
        producer.flush()
        producer.close()
    finally:
        client.close()


def stored_values(url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(30_000).data())
        return values
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--heartbeat", type=float, default=1.0, help="broker heartbeat seconds (expiry = 3x)")
    parser.add_argument("--seconds", type=float, default=5.0, help="produce this long before and after the kill")
    parser.add_argument("--client", choices=("herald", "pulsar"), default="herald")
    parser.add_argument("--fault", choices=("kill", "sigterm", "unload"), default="kill")
    args = parser.parse_args()
    acked: set[bytes] = set()
    stored: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(ClusterSettings(base_dir=tmp, heartbeat_interval=args.heartbeat))
        cluster.start()
        try:
            topic = "failover-gap"
            stop = threading.Event()
            ack_times: list[float] = []
            # Every broker in the service URL, as a Pulsar client is given a cluster's: lookups go to
            # whichever answers.
            pulsar_url = "pulsar://" + ",".join(b.pulsar_url.removeprefix("pulsar://") for b in cluster.brokers)
            thread = threading.Thread(target=(
                (lambda: produce_pulsar(pulsar_url, topic, stop, ack_times, acked)) if args.client == "pulsar"
                else (lambda: asyncio.run(produce(cluster.service_url, topic, stop, ack_times)))))
            thread.start()
            time.sleep(args.seconds)
            with grpc.insecure_channel(cluster.lookup.address) as channel:
                owner = lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
                    lookup_pb2.LookupTopicRequest(topic=topic)).broker_address
            killed_at = time.monotonic()
            victim = cluster.broker_at(owner)
            pulsar_url = next(b.pulsar_url for b in cluster.brokers if b is not victim)
            if args.fault == "kill":
                victim.kill()
            elif args.fault == "sigterm":
                victim.stop()
            else:
                with SyncAdminClient(owner) as admin:
                    admin.unload_topic(topic)
            time.sleep(args.seconds)
            deadline = time.monotonic() + 120
            while (not ack_times or ack_times[-1] < killed_at) and time.monotonic() < deadline:
                time.sleep(0.1)
            stop.set()
            thread.join(120)
            if args.client == "pulsar":
                stored = stored_values(pulsar_url, topic)
        finally:
            cluster.stop()
    times = sorted(ack_times)
    gaps = [b - a for a, b in itertools.pairwise(times) if b > killed_at - 1]
    result = {"client": args.client, "fault": args.fault, "heartbeat_s": args.heartbeat, "expiry_s": 3 * args.heartbeat,
              "gap_s": max(gaps) if gaps else None, "acked": len(times)}
    if args.client == "pulsar":
        result["stored"] = len(stored)
        result["acked_missing"] = len(acked - set(stored))
        result["stored_twice"] = len(stored) - len(set(stored))
    fault = {"kill": "SIGKILL of", "sigterm": "SIGTERM of", "unload": "unload of the topic by"}[args.fault]
    print(f"{args.client} client: produce gap after {fault} the owner broker: {result['gap_s']:.2f} s "
          f"(heartbeat {args.heartbeat} s, expiry {3 * args.heartbeat} s, {len(times)} messages acknowledged)")
    if args.client == "pulsar":
        print(f"stored {result['stored']}, acknowledged but missing {result['acked_missing']}, "
              f"stored twice {result['stored_twice']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as handle:
        handle.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), **result}) + "\n")


if __name__ == "__main__":
    main()
