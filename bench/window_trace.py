"""Where a produce window's time goes: windows of W sends awaited whole (produce_consume.py
--window), one producer, a standalone, every ack after fdatasync; each stage boundary of each
window's entry timed (bench/stage_trace.py: the client's marks here, the standalone's from its
sitecustomize hook), then a table of each mark's offset from the window's first send and the
step from the mark before it, median and p90 over the windows.

    PYTHONPATH=$PWD/services:$PWD/bench python bench/window_trace.py --windows 2000 --size 100

With one window in flight at a time, a window's marks are the first of each name between its
first send and its await's return. Appends a line to bench/results/window_trace.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
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


def windows_of(events: list[tuple[str, int]]) -> list[dict[str, int]]:
    events.sort(key=lambda e: e[1])
    found: list[dict[str, int]] = []
    current: dict[str, int] | None = None
    for name, t in events:
        if name == "w.start":
            current = {name: t}
        elif current is not None:
            current.setdefault(name, t)
            if name == "w.await_returned":
                found.append(current)
                current = None
    return found


def table(found: list[dict[str, int]]) -> list[dict[str, Any]]:
    names = {name for w in found for name in w}
    complete = [w for w in found if all(name in w for name in names)]
    order = sorted(names, key=lambda name: statistics.median(w[name] - w["w.start"] for w in complete))
    rows = []
    for i, name in enumerate(order):
        offsets = sorted((w[name] - w["w.start"]) / 1000 for w in complete)
        steps = sorted((w[name] - w[order[i - 1]]) / 1000 for w in complete) if i else [0.0] * len(complete)
        rows.append({"mark": name, "offset_p50_us": offsets[len(offsets) // 2],
                     "step_p50_us": steps[len(steps) // 2], "step_p90_us": steps[int(len(steps) * 0.9)]})
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
    print(f"{'mark':24} {'offset p50':>11} {'step p50':>9} {'step p90':>9}  (us)")
    for row in rows:
        print(f"{row['mark']:24} {row['offset_p50_us']:11.1f} {row['step_p50_us']:9.1f} {row['step_p90_us']:9.1f}")
    append_result("window_trace.jsonl", {"label": args.label, "window": args.window, "size": args.size,
                                          "windows": len(found), "peak_rss_mib": round(peak, 1), "stages": rows})


if __name__ == "__main__":
    main()
