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
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from admin_loop_stall import Probe
from harness import Standalone, append_result, fdatasync_rate
from herald.client import AsyncClient
from herald.client.admin import AdminClient

TOPIC = "persistent://public/default/compaction-bench"


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
    url = server.service_url
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
        server = Standalone(directory, env=env)
        server.start()
        try:
            with Probe(f"127.0.0.1:{server.broker_port}") as probe:
                result = asyncio.run(measure(server, args, probe))
        finally:
            server.stop()
            if args.keep_log is not None:
                shutil.copy(server.log, args.keep_log)
    append_result("compaction.jsonl", {"label": args.label, "fdatasync_per_second": round(fsyncs), **result})

if __name__ == "__main__":
    main()
