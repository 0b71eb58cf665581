"""Produce then consume N messages of S bytes through `herald standalone` and print msg/s, MB/s,
send latency percentiles and the server's peak resident memory.

Two ways to produce: continuously (the default: send_async in a loop, max pending bounding what is
in flight), or with --window W as the peers' harness does (issue 20): W sends, then await them all,
then the next W; it prints the window latency percentiles (first send to last receipt).
--label stores a note with the line (say, which client code ran: before/after a change).

Starts its own standalone on free ports in a temporary directory unless --service-url is given;
with --proxy the client talks to a `herald proxy` process in front of it instead.
Results are appended to bench/results/produce_consume.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from herald.client import AsyncClient, ConsumerType, InitialPosition
from herald.local_cluster import ClusterSettings, LocalCluster, free_port
from herald.perf.recorder import Recorder

RESULTS = Path(__file__).resolve().parent / "results" / "produce_consume.jsonl"


def start_standalone(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    ports = [free_port() for _ in range(3)]
    log = open(Path(data_dir) / "standalone.log", "wb")  # noqa: SIM115 - owned by the child
    herald = Path(sys.executable).parent / "herald"
    proc = subprocess.Popen(
        [str(herald), "standalone", "--pulsar-port", "-1", "--web-port", "-1",
         "--data-dir", f"{data_dir}/data", "--port", str(ports[0]),
         "--broker-port", str(ports[1]), "--storage-port", str(ports[2]), "--proxy-port", str(free_port()),
         "--metrics-port", str(free_port())],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while "press Ctrl-C" not in (Path(data_dir) / "standalone.log").read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((Path(data_dir) / "standalone.log").read_text())
        time.sleep(0.05)
    return proc, f"herald://127.0.0.1:{ports[0]}"


def start_proxy(data_dir: str, service_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log_path = Path(data_dir) / "proxy.log"
    log = open(log_path, "wb")  # noqa: SIM115 - owned by the child
    herald = Path(sys.executable).parent / "herald"
    proc = subprocess.Popen(
        [str(herald), "proxy", "--lookup-address", service_url.removeprefix("herald://"), "--port", str(port),
         "--metrics-port", "-1"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while "proxy listening on" not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(log_path.read_text())
        time.sleep(0.05)
    return proc, f"herald://127.0.0.1:{port}"


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def produce_windows(producer: Any, messages: int, payload: bytes, window: int) -> tuple[Recorder, float]:
    """Send `messages` in windows of `window`, each awaited whole before the next: the latency of
    every window (µs) goes to the recorder; also returns the median time of a window's send_async
    calls alone (ms), the client's share of the window."""
    windows = Recorder("window")
    sending: list[float] = []
    clock = time.perf_counter
    for start in range(0, messages, window):
        sent_at = clock()
        futures = [await producer.send_async(payload) for _ in range(min(window, messages - start))]
        sending.append(clock() - sent_at)
        await asyncio.gather(*futures)
        windows.record(int((clock() - sent_at) * 1e6), len(futures) * len(payload))
    return windows, statistics.median(sending) * 1000


async def run(service_url: str, messages: int, size: int, max_pending: int, window: int = 0,
              producer_options: dict[str, Any] | None = None) -> dict[str, Any]:
    topic = f"bench-{os.getpid()}-{int(time.time())}"
    payload = b"x" * size
    # Send latencies (µs) in `herald perf`'s HDR histograms, sampled: timing every send would cost
    # this benchmark's figures the callbacks' time.
    latencies = Recorder("send")
    async with AsyncClient(service_url) as client:
        producer = await client.create_producer(topic, max_pending_messages=max_pending, block_if_queue_full=True,
                                                **(producer_options or {}))
        consumer = await client.subscribe(
            topic, "bench", consumer_type=ConsumerType.Exclusive, initial_position=InitialPosition.Earliest
        )
        clock = time.perf_counter
        started = clock()
        sends_ms = 0.0
        if window:
            latencies, sends_ms = await produce_windows(producer, messages, payload, window)
        else:
            for i in range(messages):
                future = await producer.send_async(payload)
                if i % 97 == 0:  # sample latencies without timing every message
                    sent_at = clock()
                    future.add_done_callback(lambda _f, t=sent_at: latencies.record(int((clock() - t) * 1e6), size))
        await producer.flush()
        produce_seconds = clock() - started
        # How full the batches were (messages per stored entry) and each entry's own latency, from
        # its first message queued to its receipt: what a batching rule trades.
        stats = producer.stats()

        started = clock()
        received = 0
        while received < messages:
            message = await consumer.receive(timeout=30)
            if message is None:
                raise RuntimeError(f"consumer stalled after {received} of {messages} messages")
            consumer.acknowledge(message)
            received += 1
        consume_seconds = clock() - started
        await producer.close()
        await consumer.close()
    sent = latencies.summary(produce_seconds).latency
    figures: dict[str, Any] = {"messages": messages, "size": size, "max_pending": max_pending,
                               "messages_per_entry": stats.messages_sent / max(stats.receipts, 1),
                               "entry_p50_ms": stats.send_latency_p50_ms}
    if window:
        figures.update({"window": window, "window_p50_ms": sent.p50 if sent is not None else 0.0,
                        "window_p99_ms": sent.p99 if sent is not None else 0.0, "window_sends_p50_ms": sends_ms})
    return {
        **figures,
        "produce_msg_s": messages / produce_seconds,
        "produce_mb_s": messages * size / produce_seconds / 1e6,
        "consume_msg_s": messages / consume_seconds,
        "consume_mb_s": messages * size / consume_seconds / 1e6,
        "send_p50_ms": sent.p50 if sent is not None else 0.0,
        "send_p99_ms": sent.p99 if sent is not None else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--max-pending", type=int, default=1000, help="producer max pending messages")
    parser.add_argument("--service-url", help="use a running Herald instead of starting standalone")
    parser.add_argument("--cluster", metavar="E/QW/QA",
                        help="start a local cluster (1 broker, E storage nodes) with these quorums instead")
    parser.add_argument("--proxy", action="store_true", help="go through a `herald proxy` process")
    parser.add_argument("--window", type=int, default=0,
                        help="produce in windows of this many sends, each awaited whole (0: continuously)")
    parser.add_argument("--label", default="", help="a note stored with the line")
    parser.add_argument("--batching-max-messages", type=int, default=0, help="the producer's (0: its default)")
    args = parser.parse_args()
    proc = None
    proxy = None
    cluster = None
    with tempfile.TemporaryDirectory() as tmp:
        url = args.service_url
        if args.cluster:
            ensemble, write, ack = (int(part) for part in args.cluster.split("/"))
            cluster = LocalCluster(ClusterSettings(
                base_dir=tmp, brokers=1, storage_nodes=ensemble, ensemble_size=ensemble, write_quorum=write,
                ack_quorum=ack,
            ))
            cluster.start()
            url = cluster.service_url
        elif url is None:
            proc, url = start_standalone(tmp)
        try:
            if args.proxy:
                proxy, url = start_proxy(tmp, url)
            options = {"batching_max_messages": args.batching_max_messages} if args.batching_max_messages else {}
            result = asyncio.run(run(url, args.messages, args.size, args.max_pending, args.window, options))
            result.update({f"producer_{name}": value for name, value in options.items()})
            if args.label:
                result["label"] = args.label
            if proc is not None:
                result["server_peak_rss_mb"] = peak_rss_mb(proc.pid)
            if cluster is not None:
                result["cluster"] = args.cluster
            if proxy is not None:
                result["proxy"] = True
                result["proxy_peak_rss_mb"] = peak_rss_mb(proxy.pid)
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(timeout=30)
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
            if cluster is not None:
                cluster.stop()
    where = f"cluster {args.cluster}" if args.cluster else "standalone"
    where += " through a proxy" if args.proxy else ""
    rss = f", server peak RSS {result['server_peak_rss_mb']:.0f} MB" if "server_peak_rss_mb" in result else ""
    rss += f", proxy peak RSS {result['proxy_peak_rss_mb']:.0f} MB" if "proxy_peak_rss_mb" in result else ""
    if args.window:
        rss += (f", windows of {args.window}: latency p50 {result['window_p50_ms']:.2f} ms "
                f"p99 {result['window_p99_ms']:.2f} ms (its send_async calls {result['window_sends_p50_ms']:.2f} ms)")
    rss += f", {result['messages_per_entry']:.0f} messages per entry (entry p50 {result['entry_p50_ms']:.2f} ms)"
    where += f" [{args.label}]" if args.label else ""
    print(
        f"{where}: {args.messages} x {args.size} B: produce {result['produce_msg_s']:,.0f} msg/s "
        f"({result['produce_mb_s']:.1f} MB/s), consume {result['consume_msg_s']:,.0f} msg/s "
        f"({result['consume_mb_s']:.1f} MB/s), send latency p50 {result['send_p50_ms']:.2f} ms "
        f"p99 {result['send_p99_ms']:.2f} ms{rss}"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as handle:
        handle.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), **result}) + "\n")


if __name__ == "__main__":
    main()
