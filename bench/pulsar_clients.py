"""The official Pulsar client (PyPI `pulsar-client`, the C++ client) next to Herald's own client,
against one `herald standalone` in one run: produce N messages of S bytes (batched, asynchronous,
every acknowledgement after fdatasync), then consume and acknowledge them, per client, rounds
interleaved. The machine's limits (fdatasync rate, sequential write) are measured in the same run.
Appends to bench/results/pulsar_clients.jsonl; prints the medians.

    .venv/bin/python bench/pulsar_clients.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
from harness import Standalone, append_result, machine_limits
from herald.client import AsyncClient, ConsumerType, InitialPosition

Run = Callable[[str, int, int], tuple[float, float]]


# ---- the clients ----

def herald_run(url: str, messages: int, size: int) -> tuple[float, float]:
    """(produce msg/s, consume msg/s) with Herald's asyncio client."""
    async def run() -> tuple[float, float]:
        topic = f"bench-herald-{size}-{time.monotonic_ns()}"
        payload = b"x" * size
        async with AsyncClient(url) as client:
            consumer = await client.subscribe(topic, "bench", consumer_type=ConsumerType.Exclusive,
                                              initial_position=InitialPosition.Earliest)
            producer = await client.create_producer(topic, max_pending_messages=1000, block_if_queue_full=True)
            started = time.perf_counter()
            for _ in range(messages):
                await producer.send_async(payload)
            await producer.flush()
            produce = messages / (time.perf_counter() - started)
            started = time.perf_counter()
            for received in range(messages):
                message = await consumer.receive(timeout=30)
                if message is None:
                    raise RuntimeError(f"the consumer stalled after {received} of {messages} messages")
                consumer.acknowledge(message)
            consume = messages / (time.perf_counter() - started)
            await producer.close()
            await consumer.close()
        return produce, consume
    return asyncio.run(run())


def pulsar_run(url: str, messages: int, size: int) -> tuple[float, float]:
    """The official client with a Python callback per send (its wrapper then takes the GIL from the
    C++ client's threads for each acknowledgement)."""
    return _pulsar_run(url, messages, size, callbacks=True)


def pulsar_flush_run(url: str, messages: int, size: int) -> tuple[float, float]:
    """The official client without callbacks: send_async, then flush waits for every receipt."""
    return _pulsar_run(url, messages, size, callbacks=False)


def _pulsar_run(url: str, messages: int, size: int, *, callbacks: bool) -> tuple[float, float]:
    """(produce msg/s, consume msg/s) with the official client, as its documentation shows it:
    send_async with batching, receive and acknowledge one by one."""
    topic = f"persistent://public/default/bench-pulsar-{size}-{time.monotonic_ns()}"
    payload = b"x" * size
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "bench", receiver_queue_size=1000)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                          max_pending_messages=1000, block_if_queue_full=True)
        done = threading.Semaphore(0)
        failures: list[pulsar.Result] = []

        def sent(result: pulsar.Result, _message_id: object) -> None:
            if result != pulsar.Result.Ok:
                failures.append(result)
            done.release()

        started = time.perf_counter()
        for _ in range(messages):
            producer.send_async(payload, sent if callbacks else None)
        producer.flush()  # raises if a send failed
        if callbacks:
            for _ in range(messages):
                done.acquire()
        produce = messages / (time.perf_counter() - started)
        if failures:
            raise RuntimeError(f"{len(failures)} sends failed: {failures[:3]}")
        started = time.perf_counter()
        for _ in range(messages):
            consumer.acknowledge(consumer.receive(timeout_millis=30_000))
        consume = messages / (time.perf_counter() - started)
        producer.close()
        consumer.close()
        return produce, consume
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages-100", type=int, default=100_000, help="messages per run at 100 B")
    parser.add_argument("--messages-1k", type=int, default=50_000, help="messages per run at 1 KB")
    args = parser.parse_args()
    clients: dict[str, Run] = {"herald": herald_run, "pulsar-client": pulsar_run,
                               "pulsar-client/flush": pulsar_flush_run}
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, Standalone(Path(tmp)) as server:
        limits = machine_limits(Path(tmp))
        urls = {"herald": server.service_url, "pulsar-client": server.pulsar_url,
                "pulsar-client/flush": server.pulsar_url}
        for _ in range(args.rounds):
            for size, messages in ((100, args.messages_100), (1024, args.messages_1k)):
                for name, run in clients.items():
                    figures.setdefault((name, size), []).append(run(urls[name], messages, size))
        server_rss = server.peak_rss_mib()
    print(f"machine: fdatasync {limits['fdatasync_per_s']:,.0f}/s, sequential write "
          f"{limits['sequential_write_mb_s']:,.0f} MB/s; server peak RSS {server_rss:.0f} MB; "
          f"medians of {args.rounds} interleaved rounds")
    rows = []
    for (name, size), runs in sorted(figures.items(), key=lambda item: (item[0][1], item[0][0])):
        produce = statistics.median(run[0] for run in runs)
        consume = statistics.median(run[1] for run in runs)
        rows.append({"client": name, "size": size, "produce_msg_s": produce, "consume_msg_s": consume,
                     "produce_mb_s": produce * size / 1e6, "rounds": len(runs)})
        print(f"  {name:20} {size:5} B: produce {produce:9,.0f} msg/s ({produce * size / 1e6:5.1f} MB/s), "
              f"consume {consume:9,.0f} msg/s")
    append_result("pulsar_clients.jsonl", {**limits, "server_peak_rss_mb": server_rss, "results": rows})

if __name__ == "__main__":
    main()
