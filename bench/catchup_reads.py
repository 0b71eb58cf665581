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
5. The control: the probe beside a process that only burns a core for --tail-seconds (what
   sharing 2 cores costs the probe, with no extra work for Herald).
The standalone's peak RSS is recorded. PYTHONPATH selects the code under test (the standalone is
started from the same tree); --label names it in the result line.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/catchup_reads.py --messages 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from harness import Standalone, append_result, machine_limits
from herald.client import AsyncClient, ConsumerType, InitialPosition

TOPIC = "persistent://public/default/catchup"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _fill(url: str, messages: int, size: int, hot: int, hot_subs: int,
                server_pid: int) -> tuple[float, dict[str, float]]:
    """Produce the backlog; returns the tail-read rate (msg/s) of the hot part and the CPU time
    (µs per message) the server and this client spent reading it."""
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
        started, server_cpu, client_cpu = time.perf_counter(), cpu_seconds(server_pid), time.process_time()
        for consumer in consumers:
            await _drain(consumer, hot)
        seconds = time.perf_counter() - started
        read = hot * hot_subs
        cpu = {"server_us_per_msg": round((cpu_seconds(server_pid) - server_cpu) / read * 1e6, 3),
               "client_us_per_msg": round((time.process_time() - client_cpu) / read * 1e6, 3)}
        for consumer in consumers:
            await consumer.close()
    return read / seconds, cpu


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


def catch_up(url: str, count: int, server_pid: int) -> tuple[float, dict[str, float]]:
    """A new subscription from Earliest reads `count` messages (in its own process): msg/s, and
    the CPU time (µs per message) the server and this client spent."""
    async def run() -> tuple[float, dict[str, float]]:
        async with AsyncClient(url) as client:
            consumer = await client.subscribe(TOPIC, f"catchup-{time.time_ns()}", ConsumerType.Exclusive,
                                              InitialPosition.Earliest)
            started, server_cpu, client_cpu = time.perf_counter(), cpu_seconds(server_pid), time.process_time()
            await _drain(consumer, count)
            seconds = time.perf_counter() - started
            cpu = {"server_us_per_msg": round((cpu_seconds(server_pid) - server_cpu) / count * 1e6, 3),
                   "client_us_per_msg": round((time.process_time() - client_cpu) / count * 1e6, 3)}
            await consumer.close()
        return count / seconds, cpu
    return asyncio.run(run())


def tail_probe(url: str, rate: int, stop: Any) -> list[tuple[float, float]]:
    """A producer at `rate` msg/s (batching off: each send its own entry) and a consumer at the end
    of the topic, until `stop` (a multiprocessing Event) is set: (wall-clock send time, delivery
    latency ms) of each message, latency being receive time - send time, both in this process."""
    async def run() -> list[tuple[float, float]]:
        async with AsyncClient(url) as client:
            consumer = await client.subscribe(TOPIC, f"tail-{time.time_ns()}", ConsumerType.Exclusive,
                                              InitialPosition.Latest)
            producer = await client.create_producer(TOPIC, batching_enabled=False)
            samples: list[tuple[float, float]] = []
            outstanding = 0
            sending = True
            drained = asyncio.Event()  # every probe message sent has come back

            async def receive() -> None:
                nonlocal outstanding
                while True:
                    message = await consumer.receive()
                    assert message is not None
                    data = message.data()
                    if data.startswith(b"T"):
                        sent_ns, wall = data[1:].split(b" ")
                        samples.append((float(wall), (time.perf_counter_ns() - int(sent_ns)) / 1e6))
                        outstanding -= 1
                        if outstanding == 0 and not sending:
                            drained.set()
                    consumer.acknowledge(message)

            receiver = asyncio.create_task(receive())
            interval = 1 / rate
            began = time.perf_counter()
            sent = 0
            while not stop.is_set():
                await producer.send_async(b"T%d %f" % (time.perf_counter_ns(), time.time()))
                sent += 1
                outstanding += 1
                await asyncio.sleep(max(0.0, began + sent * interval - time.perf_counter()))
            sending = False
            if outstanding > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(drained.wait(), 30)
            if receiver.done():
                receiver.result()  # the receiver failed: say why
            receiver.cancel()
            await producer.close()
            await consumer.close()
            return samples
    return asyncio.run(run())


def burn(seconds: float) -> None:
    """Keep one core busy, doing nothing with Herald (the control: what CPU contention alone costs)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


def latency(samples: list[tuple[float, float]], since: float, until: float) -> dict[str, float]:
    """Percentiles (ms) of the probe's messages sent between two wall-clock times."""
    values = sorted(ms for wall, ms in samples if since <= wall <= until)
    if not values:
        return {"count": 0}
    def at(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 3)
    return {"count": len(values), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": round(values[-1], 3)}


def probed(pool: ProcessPoolExecutor, manager: Any, url: str, rate: int,
           during: Callable[[], object]) -> tuple[object, dict[str, float]]:
    """Run `during` while the tail probe runs; its result and the probe's latency over that time."""
    stop = manager.Event()
    probe = pool.submit(tail_probe, url, rate, stop)
    time.sleep(2.0)  # the probe has subscribed and is producing
    since = time.time()
    result = during()
    until = time.time()
    stop.set()
    return result, latency(probe.result(), since, until)


def measure(directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    with Standalone(directory) as server:
        started = time.perf_counter()
        tail_rate, tail_cpu = asyncio.run(_fill(server.service_url, args.messages, args.size, args.hot_messages,
                                                args.hot_subs, server.pid))
        fill_seconds = time.perf_counter() - started
        fill_peak = server.peak_rss_mib()
        server.restart()  # nothing cached from here on
        url = server.service_url
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager, ProcessPoolExecutor(2, mp_context=context) as pool:
            pool.submit(burn, 0.1).result()  # both workers started before anything is timed
            _, idle = probed(pool, manager, url, args.tail_rate, lambda: time.sleep(args.tail_seconds))
            catchup, busy = probed(pool, manager, url, args.tail_rate,
                                   lambda: pool.submit(catch_up, url, args.messages, server.pid).result())
            _, control = probed(pool, manager, url, args.tail_rate,
                                lambda: pool.submit(burn, args.tail_seconds).result())
            # The idle figure again: on a shared machine the first one alone may be an outlier.
            _, idle_after = probed(pool, manager, url, args.tail_rate, lambda: time.sleep(args.tail_seconds))
        catchup_rate, catchup_cpu = catchup  # type: ignore[misc]
        return {
            "messages": args.messages, "size": args.size, "label": args.label,
            "fill_msg_s": round(args.messages / fill_seconds),
            "tail_read_msg_s": round(tail_rate), "catchup_msg_s": round(catchup_rate),
            "catchup_vs_tail": round(catchup_rate / tail_rate, 3),
            "tail_read_cpu": tail_cpu, "catchup_cpu": catchup_cpu,
            "tail_idle": idle, "tail_idle_after": idle_after, "tail_during_catchup": busy,
            "tail_during_cpu_burn": control,
            "tail_p99_ratio": round(busy["p99_ms"] / min(idle["p99_ms"], idle_after["p99_ms"]), 2),
            "cpu_burn_p99_ratio": round(control["p99_ms"] / min(idle["p99_ms"], idle_after["p99_ms"]), 2),
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
    parser.add_argument("--tail-seconds", type=float, default=10.0,
                        help="how long the tail probe runs on the idle topic, and beside a CPU burner")
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
