"""`herald perf` against a fresh `herald standalone`, as a user runs it: produce then consume N
messages at 100 B and 1 KB through Herald's protocol and Pulsar's (the official pulsar-client),
then end-to-end latency at a fixed rate through each. The machine's limits (fdatasync rate,
sequential write with fdatasync) are measured in the same run. Appends one line per run to
bench/results/perf.jsonl and prints a table.

    .venv/bin/python bench/perf.py [--messages-100 200000] [--messages-1k 100000] [--e2e-rate 5000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pulsar_clients import fdatasync_rate, peak_rss_mb, sequential_write_mb_s, start_standalone

RESULTS = Path(__file__).resolve().parent / "results" / "perf.jsonl"
HERALD = Path(sys.executable).parent / "herald"


def perf(*args: str) -> dict[str, Any]:
    """Run `herald perf ... --json`; its summary object."""
    result = subprocess.run([str(HERALD), "perf", *args, "--json", "--report-interval", "5"],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"herald perf {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages-100", type=int, default=200_000)
    parser.add_argument("--messages-1k", type=int, default=100_000)
    parser.add_argument("--e2e-rate", type=float, default=5000.0, help="msg/s of the end-to-end runs")
    parser.add_argument("--e2e-duration", type=float, default=10.0)
    parser.add_argument("--label", default="", help="a note stored with each line")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    at = time.strftime("%Y-%m-%dT%H:%M:%S")
    with tempfile.TemporaryDirectory() as tmp:
        limits = {"fdatasync_per_s": round(fdatasync_rate(tmp)),
                  "sequential_write_mb_s": round(sequential_write_mb_s(tmp))}
        proc, herald_url, pulsar_url = start_standalone(tmp)
        urls = ["--url", herald_url, "--pulsar-url", pulsar_url]
        try:
            for size, messages in ((100, args.messages_100), (1024, args.messages_1k)):
                for protocol in ("herald", "pulsar"):
                    topic = f"perf-{protocol}-{size}-{time.monotonic_ns()}"
                    produced = perf("produce", topic, *urls, "--protocol", protocol, "--count", str(messages),
                                    "--size", str(size))
                    consumed = perf("consume", topic, *urls, "--protocol", protocol, "--count", str(messages),
                                    "--initial-position", "earliest")
                    rows.append({"test": "produce-consume", "protocol": protocol, "size": size, "messages": messages,
                                 "produce": produced["produce"], "consume": consumed["consume"]})
            for protocol in ("herald", "pulsar"):
                e2e = perf("end-to-end", f"perf-e2e-{protocol}-{time.monotonic_ns()}", *urls, "--protocol", protocol,
                           "--rate", str(args.e2e_rate), "--duration", str(args.e2e_duration), "--warmup", "2",
                           "--size", "100")
                rows.append({"test": "end-to-end", "protocol": protocol, "size": 100, "rate": args.e2e_rate,
                             "send": e2e["send"], "end_to_end": e2e["end_to_end"]})
            server_rss = peak_rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"machine: fdatasync {limits['fdatasync_per_s']:,}/s, sequential write {limits['sequential_write_mb_s']:,} "
          f"MB/s; server peak RSS {server_rss:.0f} MB")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as handle:
        for row in rows:
            line = {"at": at, **({"label": args.label} if args.label else {}), **row, "machine": limits,
                    "server_peak_rss_mb": round(server_rss)}
            handle.write(json.dumps(line) + "\n")
            if row["test"] == "produce-consume":
                p, c = row["produce"], row["consume"]
                print(f"{row['protocol']:>6} {row['size']:>5} B: produce {p['msg_per_s']:>10,.0f} msg/s "
                      f"{p['mb_per_s']:7.1f} MB/s send p50 {p['latency_ms']['p50']:.2f} "
                      f"p99 {p['latency_ms']['p99']:.2f} ms"
                      f" | consume {c['msg_per_s']:>10,.0f} msg/s {c['mb_per_s']:7.1f} MB/s")
            else:
                s, e = row["send"], row["end_to_end"]["latency_ms"]
                print(f"{row['protocol']:>6} end-to-end at {row['rate']:,.0f} msg/s: latency ms p50 {e['p50']:.2f} "
                      f"p95 {e['p95']:.2f} p99 {e['p99']:.2f} p99.9 {e['p99_9']:.2f} max {e['max']:.2f}; "
                      f"send p50 {s['latency_ms']['p50']:.2f} p99 {s['latency_ms']['p99']:.2f}")


if __name__ == "__main__":
    main()
