"""The standalone's peak resident memory across produce/consume runs (issue 20 item 6: under 300 MB
through every benchmark but the 10,000-topic one). One standalone serves, one after the other, the
runs of bench/produce_consume.py at 100 B and 1 KB (continuous, max pending 1,000) and windows of
500; its RSS after each run and its peak (VmHWM) are reported.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/memory_cap.py --messages 200000

bench/scale_topics.py and bench/scale_partitions.py report their own peaks. Results:
bench/results/memory_cap.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from harness import Standalone, append_result, machine_limits
from produce_consume import run

CAP_MIB = 300.0 * 1e6 / 2**20  # 300 MB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--label", default="", help="a note stored with the line")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, Standalone(Path(tmp)) as server:
        limits = machine_limits(Path(tmp))
        for size, window in ((100, 0), (1024, 0), (100, 500)):
            figures = asyncio.run(run(server.service_url, args.messages, size, 1000, window))
            runs.append({"size": size, "window": window, "produce_msg_s": round(figures["produce_msg_s"]),
                         "consume_msg_s": round(figures["consume_msg_s"]), "rss_after_mib": server.rss_mib(),
                         "peak_rss_mib": server.peak_rss_mib()})
            print(runs[-1], flush=True)
        peak = server.peak_rss_mib()
    record = append_result("memory_cap.jsonl", {"label": args.label, "limits": limits, "messages": args.messages,
                                                "runs": runs, "peak_rss_mib": peak, "cap_mib": CAP_MIB,
                                                "under_cap": peak < CAP_MIB})
    print(record, flush=True)


if __name__ == "__main__":
    main()
