"""Where a produce window's time goes: windows of W sends awaited whole (produce_consume.py
--window), one producer, a standalone, every ack after fdatasync; each stage boundary of each
window's entry timed (bench/stage_trace.py: the client's marks here, the standalone's from its
sitecustomize hook), then a table of each mark's offset from the window's first send and the
step from the mark before it, median and p90 over the windows.

    PYTHONPATH=$PWD/services:$PWD/bench python bench/window_trace.py --windows 2000 --size 100

With one window in flight at a time, a window's marks follow its causal chain (CHAIN): each the
first of its name after the mark before it; a mark off the chain (SIDE) the first after its anchor.
Appends a line to bench/results/window_trace.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import stage_trace
from harness import Standalone, append_result
from herald.client import AsyncClient

BENCH = Path(__file__).resolve().parent


async def produce(url: str, windows: int, window: int, size: int) -> None:
    payload = b"x" * size
    mark = stage_trace.mark
    async with AsyncClient(url) as client:
        producer = await client.create_producer(f"trace-{os.getpid()}-{int(time.time())}",
                                                max_pending_messages=1000, block_if_queue_full=True)
        for n in range(windows + 50):  # the first 50 warm up
            if n == 50:
                stage_trace.EVENTS.clear()
            mark("w.start")
            futures = [await producer.send_async(payload) for _ in range(window)]
            mark("w.sends_done")
            await asyncio.gather(*futures)
            mark("w.await_returned")
        await producer.close()


# The stage boundaries of one window, in causal order, each with what happens before it.
CHAIN = (
    ("w.start", "the application's first send_async"),
    ("c.batch_closed", "client: 500 send_async (the 500th closes the batch and ships it)"),
    ("w.sends_done", "client: the last send_async returns"),
    ("c.next_request", "client: the application's gather(), then the stream's writer task wakes"),
    ("c.request_taken", "client: the ProduceRequest built"),
    ("s.publish", "gRPC: client write, loopback, broker read and parse"),
    ("s.check", "broker: ProducerSession.publish -> Topic.submit"),
    ("s.checked", "broker: publish checks (entry crc32c, metadata)"),
    ("s.ml_add", "broker: dedup, managed ledger add"),
    ("s.local_add", "broker: ledger handle -> the local add stream"),
    ("s.journal_append", "storage: the add stream's task wakes, begin_add, journal queue"),
    ("w.write_start", "journal: the writer thread wakes (thread hand-off)"),
    ("w.fsync_start", "journal: record headers, writev"),
    ("w.fsync_done", "journal: fdatasync"),
    ("s.loop_completion", "journal -> loop: call_soon_threadsafe wake-up"),
    ("s.add_answered", "storage: index, futures; the add stream answers"),
    ("s.receipt_succeed", "broker: ledger handle, managed ledger, topic completions"),
    ("s.receipts_taken", "broker: the receipts task wakes"),
    ("s.reply_write", "broker: ProduceResponse built"),
    ("c.receipt_read", "gRPC: broker write, loopback, client read and parse"),
    ("c.futures_resolved", "client: 500 message ids and future.set_result"),
    ("w.await_returned", "client: gather's 500 done callbacks, the application resumes"),
)
# Marks off the chain: (mark, the chain mark it follows, what happens between them).
SIDE = (
    ("c.grpc_write_done", "c.request_taken", "client: await call.write() returns"),
    ("s.published", "s.check", "broker: the whole ProducerSession.publish call"),
    ("w.batch_done", "w.fsync_done", "journal: entry log write (after the answer was posted)"),
    ("s.reply_written", "s.reply_write", "broker: await context.write() returns"),
)


def windows_of(events: list[tuple[str, int]]) -> list[dict[str, int]]:
    """Each whole window's marks: each chain mark the first of its name after the one before it,
    each side mark the first after its anchor."""
    events.sort(key=lambda e: e[1])
    starts = [t for name, t in events if name == "w.start"]
    by_name: dict[str, list[int]] = {}
    for name, t in events:
        by_name.setdefault(name, []).append(t)
    found = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else None
        marks = {"w.start": start}
        previous = start
        for name, _ in CHAIN[1:]:
            t = _first_after(by_name.get(name, []), previous)
            if t is None or (end is not None and name == "w.await_returned" and t > end):
                break
            marks[name] = previous = t
        else:
            for name, anchor, _ in SIDE:
                t = _first_after(by_name.get(name, []), marks[anchor])
                if t is not None:
                    marks[name] = t
            found.append(marks)
    return found


def _first_after(times: list[int], after: int) -> int | None:
    i = bisect.bisect_left(times, after)
    return times[i] if i < len(times) else None


def table(found: list[dict[str, int]]) -> list[dict[str, Any]]:
    def pct(values: list[float], q: float) -> float:
        values.sort()
        return round(values[min(len(values) - 1, int(len(values) * q))], 1)

    rows = []
    steps = [(name, CHAIN[i - 1][0] if i else name, what) for i, (name, what) in enumerate(CHAIN)]
    for name, anchor, what in [*steps, *SIDE]:
        have = [w for w in found if name in w and anchor in w]
        if not have:
            continue
        step = [(w[name] - w[anchor]) / 1000 for w in have]
        offset = [(w[name] - w["w.start"]) / 1000 for w in have]
        rows.append({"mark": name, "from": anchor, "what": what, "offset_p50_us": pct(offset, 0.5),
                     "step_p50_us": pct(step, 0.5), "step_p90_us": pct(step, 0.9)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="window-trace-") as tmp:
        trace_file = Path(tmp) / "server-trace.json"
        env = dict(os.environ, HERALD_BENCH_TRACE=str(trace_file),
                   PYTHONPATH=os.pathsep.join([str(BENCH / "trace_site"), str(BENCH),
                                               os.environ.get("PYTHONPATH", "")]))
        server = Standalone(Path(tmp), env=env)
        server.start()
        try:
            stage_trace.install_client_hooks()
            asyncio.run(produce(server.service_url, args.windows, args.window, args.size))
            peak = server.peak_rss_mib()
        finally:
            server.stop()
        events = list(stage_trace.EVENTS) + stage_trace.load(str(trace_file))
    found = windows_of(events)
    rows = table(found)
    print(f"{len(found)} windows of {args.window} x {args.size} B; standalone peak RSS {peak:.0f} MiB")
    print("| mark | from | offset p50 µs | step p50 µs | step p90 µs | what |\n|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['mark']} | {row['from']} | {row['offset_p50_us']} | {row['step_p50_us']} | "
              f"{row['step_p90_us']} | {row['what']} |")
    append_result("window_trace.jsonl", {"label": args.label, "window": args.window, "size": args.size,
                                          "windows": len(found), "peak_rss_mib": round(peak, 1), "stages": rows})


if __name__ == "__main__":
    main()
