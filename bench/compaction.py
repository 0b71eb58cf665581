"""Topic compaction's throughput on a standalone: produce `--messages` messages over `--keys` keys
(a tenth of them deletes: empty values) in batches, compact the topic, and report the compaction's
run time, messages read per second (phase one), keys written per second, and the topic's size
against the compacted ledger's (internal stats; the compacted bytes from
herald_broker_compaction_bytes_written_total). A probe thread asks the broker's gRPC health
service every 5 ms during the run: its worst answer is the longest the compaction held the
broker's event loop. The machine's fdatasync rate is measured in the same run.

    python bench/compaction.py --messages 1000000 --keys 10000

Appends to bench/results/compaction.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from admin_loop_stall import Probe
from herald.client import AsyncClient
from herald.client.admin import AdminClient
from herald.local_cluster import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "compaction.jsonl"
TOPIC = "persistent://public/default/compaction-bench"


def fdatasync_rate(directory: Path, seconds: float = 2.0) -> float:
    """4 KiB writes each followed by fdatasync, per second."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            os.write(fd, b"\0" * 4096)
            os.fdatasync(fd)
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()


class Standalone:
    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.port, self.broker_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log = directory / "standalone.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        herald = shutil.which("herald", path=str(Path(sys.executable).parent)) or "herald"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [herald, "standalone", "--pulsar-port", "-1", "--web-port", "-1",
                 "--data-dir", str(self.directory / "data"), "--port", str(self.port),
                 "--broker-port", str(self.broker_port), "--storage-port", str(free_port()),
                 "--proxy-port", str(free_port()), "--metrics-port", str(self.metrics_port), "--no-dlq-worker"],
                stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + 60
        while "press Ctrl-C to stop" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"standalone did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0

    def peak_rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0


async def produce(url: str, messages: int, keys: int, batch: int) -> tuple[float, int]:
    """Returns (seconds, live keys)."""
    rng = random.Random(19)
    live: set[str] = set()
    started = time.perf_counter()
    async with AsyncClient(url) as client:
        producer = await client.create_producer(TOPIC, batching_max_messages=batch, block_if_queue_full=True,
                                                max_pending_messages=20_000, batching_max_publish_delay=0.01)
        futures = []
        for n in range(messages):
            key = f"key-{rng.randrange(keys)}"
            delete = rng.random() < 0.1
            (live.discard if delete else live.add)(key)
            futures.append(await producer.send_async(b"" if delete else b"value-%08d" % n, key=key))
            if len(futures) >= 50_000:
                await asyncio.gather(*futures)
                futures.clear()
        await asyncio.gather(*futures)
        await producer.close()
    return time.perf_counter() - started, len(live)


async def measure(server: Standalone, args: argparse.Namespace, probe: Probe) -> dict[str, Any]:
    url = f"herald://127.0.0.1:{server.port}"
    idle_since = time.monotonic()
    await asyncio.sleep(2)
    idle = probe.window(idle_since)
    produce_seconds, live_keys = await produce(url, args.messages, args.keys, args.batch)
    print(f"produced {args.messages} messages over {args.keys} keys in {produce_seconds:.1f} s")
    async with AdminClient(url) as admin:
        stats = await admin.internal_stats(TOPIC)
        started = time.monotonic()
        await admin.compact_topic(TOPIC)
        status = await admin.compaction_status(TOPIC)
        while status.status == "RUNNING":  # polled: the admin API has no completion event
            await asyncio.sleep(0.05)
            status = await admin.compaction_status(TOPIC)
        if status.status != "SUCCESS":
            raise RuntimeError(f"compaction ended {status.status}: {status.last_error}")
    run_seconds = status.finished_at - status.started_at
    compacted_bytes = server.metric("herald_broker_compaction_bytes_written_total")
    result = {
        "messages": args.messages, "keys": args.keys, "batch": args.batch, "live_keys": live_keys,
        "produce_seconds": round(produce_seconds, 2), "run_seconds": round(run_seconds, 2),
        "messages_read_per_second": round(args.messages / run_seconds),
        "keys_written_per_second": round(live_keys / run_seconds),
        "topic_bytes": stats.total_size, "topic_entries": stats.number_of_entries,
        "compacted_bytes": int(compacted_bytes), "compacted_entries": status.compacted_entries,
        "size_ratio": round(compacted_bytes / stats.total_size, 4) if stats.total_size else None,
        "loop_idle": idle, "loop": probe.window(started), "peak_rss_mib": round(server.peak_rss_mib()),
    }
    print(f"compaction: {run_seconds:.2f} s, {result['messages_read_per_second']} messages/s read, "
          f"{result['keys_written_per_second']} keys/s written; topic {stats.total_size / 1e6:.1f} MB "
          f"({stats.number_of_entries} entries) -> compacted {compacted_bytes / 1e6:.2f} MB "
          f"({status.compacted_entries} entries); worst loop stall {result['loop'].get('worst_ms')} ms "
          f"(idle: {idle.get('worst_ms')} ms); "
          f"peak RSS {result['peak_rss_mib']} MiB")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000, help="the producer's batching_max_messages")
    parser.add_argument("--debug-slow", action="store_true", help="log the standalone's slow callbacks (slower)")
    parser.add_argument("--keep-log", type=Path, help="copy the standalone's log here")
    parser.add_argument("--label", default="", help="a name for this run in the results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        fsyncs = fdatasync_rate(directory)
        print(f"fdatasync: {fsyncs:.0f}/s")
        env = dict(os.environ)
        if args.debug_slow:  # asyncio debug mode: every callback holding the loop past 20 ms is logged
            env["PYTHONASYNCIODEBUG"] = "1"
        server = Standalone(directory, env)
        server.start()
        try:
            with Probe(f"127.0.0.1:{server.broker_port}") as probe:
                result = asyncio.run(measure(server, args, probe))
        finally:
            server.stop()
            if args.keep_log is not None:
                shutil.copy(server.log, args.keep_log)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as handle:
        handle.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "label": args.label,
                                 "fdatasync_per_second": round(fsyncs), **result}) + "\n")


if __name__ == "__main__":
    main()
