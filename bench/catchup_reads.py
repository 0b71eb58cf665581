"""Reads that miss the cache (issue 20 item 3): a backlog read by a new subscription after a broker
restart, against the rate of reads served from the entry cache, and what it costs tail consumers.

1. Fill one topic with --messages messages of --size bytes (big batches, every add durable).
   The last --hot-messages of them are produced after --hot-subs subscriptions were made at the
   end of the log, so they sit in the entry cache: consuming them is the tail-read rate.
2. Restart the standalone: nothing is cached any more.
3. A tail probe (its own process: a producer at --tail-rate msg/s and a consumer reading the end)
   runs on the idle topic for --tail-seconds: p99 delivery latency (send to receive).
4. The same probe again, while a new subscription from Earliest reads the whole backlog (its own
   process too): the catch-up rate, and the probe's p99 during it.
The standalone's peak RSS is recorded. PYTHONPATH selects the code under test (the standalone is
started from the same tree); --label names it in the result line.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/catchup_reads.py --messages 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import tempfile
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from harness import Standalone, append_result, machine_limits
from herald.client import AsyncClient, ConsumerType, InitialPosition
from herald.perf.recorder import Recorder

TOPIC = "persistent://public/default/catchup"


async def _fill(url: str, messages: int, size: int, hot: int, hot_subs: int) -> float:
    """Produce the backlog; returns the tail-read rate (msg/s) of the hot part."""
    payload = b"x" * size
    async with AsyncClient(url) as client:
        producer = await client.create_producer(
            TOPIC, max_pending_messages=20_000, block_if_queue_full=True, batching_max_messages=1000,
            batching_max_bytes=128 * 1024, batching_max_publish_delay=0.005)
        for _ in range(messages - hot):
            await producer.send_async(payload)
        await producer.flush()
        consumers = [await client.subscribe(TOPIC, f"hot-{i}", ConsumerType.Exclusive, InitialPosition.Latest)
                     for i in range(hot_subs)]
        for _ in range(hot):
            await producer.send_async(payload)
        await producer.flush()
        await producer.close()
        started = time.perf_counter()
        for consumer in consumers:
            await _drain(consumer, hot)
        seconds = time.perf_counter() - started
        for consumer in consumers:
            await consumer.close()
    return hot * hot_subs / seconds


async def _drain(consumer: Any, count: int) -> None:
    received = 0
    last = None
    while received < count:
        got = await consumer.receive_many(1000, timeout=60)
        if not got:
            raise RuntimeError(f"consumer stalled after {received} of {count} messages")
        received += len(got)
        last = got[-1]
    consumer.acknowledge_cumulative(last)


def catch_up(url: str, count: int) -> float:
    """A new subscription from Earliest reads `count` messages: msg/s (in its own process)."""
    async def run() -> float:
        async with AsyncClient(url) as client:
            consumer = await client.subscribe(TOPIC, f"catchup-{time.time_ns()}", ConsumerType.Exclusive,
                                              InitialPosition.Earliest)
            started = time.perf_counter()
            await _drain(consumer, count)
            seconds = time.perf_counter() - started
            await consumer.close()
        return count / seconds
    return asyncio.run(run())


def tail_probe(url: str, seconds: float, rate: int, start_after: float) -> dict[str, float]:
    """A producer at `rate` msg/s (batching off: each send its own entry) and a consumer at the
    end of the topic; delivery latency = receive time - send time (both in this process), ms."""
    async def run() -> dict[str, float]:
        async with AsyncClient(url) as client:
            consumer = await client.subscribe(TOPIC, f"tail-{time.time_ns()}", ConsumerType.Exclusive,
                                              InitialPosition.Latest)
            producer = await client.create_producer(TOPIC, batching_enabled=False)
            recorder = Recorder("delivery")
            expected = 0
            sending = True
            drained = asyncio.Event()  # every probe message sent has come back

            async def receive() -> None:
                nonlocal expected
                while True:
                    message = await consumer.receive()
                    assert message is not None
                    if message.data().startswith(b"T"):
                        sent = int(message.data()[1:])
                        recorder.record(max(1, (time.perf_counter_ns() - sent) // 1000), 1)
                        expected -= 1
                        if expected == 0 and not sending:
                            drained.set()
                    consumer.acknowledge(message)

            receiver = asyncio.create_task(receive())
            await asyncio.sleep(start_after)
            interval = 1 / rate
            began = time.perf_counter()
            sent_count = 0
            while time.perf_counter() - began < seconds:
                await producer.send_async(b"T%d" % time.perf_counter_ns())
                sent_count += 1
                expected += 1
                await asyncio.sleep(max(0.0, began + sent_count * interval - time.perf_counter()))
            sending = False
            if expected > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(drained.wait(), 30)
            if receiver.done():
                receiver.result()  # the receiver failed: say why
            receiver.cancel()
            await producer.close()
            await consumer.close()
            summary = recorder.summary(seconds).latency
            assert summary is not None
            return {"p50_ms": summary.p50, "p99_ms": summary.p99, "max_ms": summary.max, "sent": sent_count,
                    "lost": expected}
    return asyncio.run(run())


def measure(directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    with Standalone(directory) as server:
        started = time.perf_counter()
        tail_rate = asyncio.run(_fill(server.service_url, args.messages, args.size, args.hot_messages, args.hot_subs))
        fill_seconds = time.perf_counter() - started
        fill_peak = server.peak_rss_mib()
        server.restart()  # nothing cached from here on
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
        with pool:
            idle = pool.submit(tail_probe, server.service_url, args.tail_seconds, args.tail_rate, 1.0).result()
            # The probe starts producing a second after it subscribed; the catch-up reader starts then too.
            probe: Future[dict[str, float]] = pool.submit(tail_probe, server.service_url, args.tail_seconds,
                                                          args.tail_rate, 1.0)
            time.sleep(1.0)
            catchup_rate = pool.submit(catch_up, server.service_url, args.messages).result()
            busy = probe.result()
        return {
            "messages": args.messages, "size": args.size, "label": args.label,
            "fill_msg_s": round(args.messages / fill_seconds),
            "tail_read_msg_s": round(tail_rate), "catchup_msg_s": round(catchup_rate),
            "catchup_vs_tail": round(catchup_rate / tail_rate, 3),
            "tail_idle": idle, "tail_during_catchup": busy,
            "tail_p99_ratio": round(busy["p99_ms"] / idle["p99_ms"], 2),
            "peak_rss_mib_fill": round(fill_peak, 1), "peak_rss_mib_catchup": round(server.peak_rss_mib(), 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--hot-messages", type=int, default=0,
                        help="messages read hot for the tail-read rate (default: 30 MB worth, under the cache)")
    parser.add_argument("--hot-subs", type=int, default=3, help="subscriptions reading the hot part in turn")
    parser.add_argument("--tail-rate", type=int, default=200, help="the tail probe's producer, msg/s")
    parser.add_argument("--tail-seconds", type=float, default=10.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--no-limits", action="store_true", help="skip measuring the machine's limits")
    args = parser.parse_args()
    if not args.hot_messages:
        args.hot_messages = min(args.messages // 2, 30_000_000 // args.size)
    with tempfile.TemporaryDirectory() as tmp:
        limits = {} if args.no_limits else machine_limits(Path(tmp))
        result = measure(Path(tmp), args)
    print(append_result("catchup_reads.jsonl", {**result, "limits": limits}))


if __name__ == "__main__":
    main()
