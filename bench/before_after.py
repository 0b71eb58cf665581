"""Client code before and after a change, side by side in one run: bench/produce_consume.py in each
mode (windows of W awaited, the peers' harness, and continuous sending) at 100 B and 1 KB, once per
round with the old code and once with the new, rounds interleaved so both see the same machine
(which goes first alternates: the run after another pays for its predecessor's writeback). The
machine's fdatasync rate and sequential write bandwidth are measured first, in the same run.
The old code is a copy of the services tree (`git archive <commit> services | tar -x -C DIR`),
switched in through PYTHONPATH; every line goes to bench/results/produce_consume.jsonl with its label,
and the medians are printed as a Markdown table.

    git archive HEAD~1 services | tar -x -C /tmp/old
    .venv/bin/python bench/before_after.py --old /tmp/old/services --rounds 3 [--modes continuous]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import append_result, machine_limits

HERE = Path(__file__).resolve().parent
SERVICES = HERE.parent / "services"
RESULTS = HERE / "results" / "produce_consume.jsonl"
# (mode, size, messages): window modes first, as issue 20 states its goal with them.
CASES = (("window", 100, 100_000), ("window", 1024, 100_000), ("continuous", 100, 200_000),
         ("continuous", 1024, 100_000))


def run(services: Path, label: str, mode: str, size: int, messages: int, window: int) -> dict[str, Any]:
    """One produce_consume.py run with the code in `services`; its result line."""
    env = dict(os.environ)
    rest = [part for part in env.get("PYTHONPATH", "").split(os.pathsep) if part and Path(part) != SERVICES]
    env["PYTHONPATH"] = os.pathsep.join([str(services), *rest])
    args = [sys.executable, str(HERE / "produce_consume.py"), "--messages", str(messages), "--size", str(size),
            "--label", label]
    if mode == "window":
        args += ["--window", str(window)]
    before = RESULTS.read_text().count("\n") if RESULTS.exists() else 0
    subprocess.run(args, env=env, check=True, timeout=900)
    line = RESULTS.read_text().splitlines()[before]
    result: dict[str, Any] = json.loads(line)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="the old code's services directory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--tag", default="", help="prefix of the labels (before/after) of this run's lines")
    parser.add_argument("--modes", nargs="+", choices=("window", "continuous"), default=["window", "continuous"],
                        help="which modes to run (a consume-side change: continuous alone)")
    args = parser.parse_args()
    cases = [case for case in CASES if case[0] in args.modes]
    with tempfile.TemporaryDirectory() as tmp:
        measured = machine_limits(Path(tmp))
    limits = (f"fdatasync {measured['fdatasync_per_s']:,.0f}/s, sequential write with fdatasync "
              f"{measured['sequential_write_mb_s']:,.0f} MB/s, 256 KiB synced writes "
              f"{measured['synced_256k_write_mb_s']:,.0f} MB/s, {measured['cpus']} CPUs")
    figures: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    tag = f"{args.tag} " if args.tag else ""
    codes = [(f"{tag}before", args.old), (f"{tag}after", SERVICES)]
    for round_ in range(args.rounds):
        for mode, size, messages in cases:
            for label, services in codes if round_ % 2 == 0 else codes[::-1]:
                result = run(services, label, mode, size, messages, args.window)
                figures.setdefault((mode, size, label), []).append(result)
    print(f"\nmedians of {args.rounds} rounds (windows of {args.window} awaited; continuous: max pending 1000); "
          f"the machine: {limits}\n")
    print("| mode | size | code | produce msg/s | produce MB/s | window p50 ms | window p99 ms | send p50 ms "
          "| msgs/entry | consume msg/s | consume MB/s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary: list[dict[str, Any]] = []
    for (mode, size, label), runs in sorted(figures.items(), key=lambda item: (CASES.index(
            next(case for case in CASES if case[:2] == item[0][:2])), item[0][2].endswith("after"))):
        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(float(run.get(key, 0.0)) for run in runs)

        print(f"| {mode} | {size} B | {label} | {median('produce_msg_s'):,.0f} | {median('produce_mb_s'):.1f} | "
              f"{median('window_p50_ms'):.2f} | {median('window_p99_ms'):.2f} | {median('send_p50_ms'):.2f} | "
              f"{median('messages_per_entry'):.0f} | {median('consume_msg_s'):,.0f} | {median('consume_mb_s'):.1f} | "
              f"{max(float(run.get('server_peak_rss_mb', 0.0)) for run in runs):.0f} |")
        summary.append({"mode": mode, "size": size, "code": label, "rounds": len(runs),
                        **{f"median_{key}": median(key) for key in (
                            "produce_msg_s", "produce_mb_s", "consume_msg_s", "consume_mb_s", "window_p50_ms",
                            "messages_per_entry")},
                        "max_server_peak_rss_mb": max(float(run.get("server_peak_rss_mb", 0.0)) for run in runs)})
    append_result("produce_consume.jsonl", {"label": f"{tag}before/after medians", "machine_limits": measured,
                                            "medians": summary})


if __name__ == "__main__":
    main()
