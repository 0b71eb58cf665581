"""Issue 20 item 5: how a cluster scales. 1 KB messages, continuous sending (max pending 1,000 per
producer), every acknowledgement after fdatasync on Qa storage nodes; producers and consumers are
`herald perf` processes (one per group of topics), so every process's CPU can be counted apart.

Cases, each on fresh processes (in this order unless --cases says otherwise):
  standalone  `herald standalone`: one topic, one producer, then one consumer of it (earliest)
  cluster     a 3/2/2 local cluster (3 storage nodes, E=3 Qw=2 Qa=2) with 1 broker: the same
  brokers-1   that cluster, 1 broker: --topics topics spread over --producers perf processes
  brokers-2   the same with 2 brokers: the topics placed over both by lookup (checked: each topic
              is looked up and the owners are counted)

For every case: msg/s and MB/s (after --warmup), CPU seconds per 1,000 messages of every process
(from /proc/<pid>/stat before and after the run: utime + stime), peak RSS of every server process,
and how busy the machine was (the share of all cores' time, from /proc/stat). The machine's limits
(fdatasync/s, sequential and 256 KiB synced write MB/s) are measured in the same run.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock .venv/bin/python bench/cluster_scaling.py
    ... --services /tmp/old/services --label before     # run other code (servers and clients)

Appends one line per case to bench/results/cluster_scaling.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc.aio
from harness import HERALD, Standalone, append_result, machine_limits, peak_rss_mib
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.local_cluster import ClusterSettings, LocalCluster

TICK = os.sysconf("SC_CLK_TCK")
SIZE = 1024


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process (its threads included), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK  # fields 14 and 15 of stat(5)


def machine_busy() -> tuple[float, float]:
    """(busy, total) seconds of every core since boot, from /proc/stat (busy: not idle nor iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(values[:8])  # guest time is counted in user already
    return (total - values[3] - values[4]) / TICK, total / TICK


class Run:
    """`herald perf` processes run together against servers whose CPU is counted with theirs."""

    def __init__(self, servers: dict[str, int], env: dict[str, str]) -> None:
        self.servers = servers
        self.env = env

    def perf(self, command: str, groups: list[list[str]], url: str, extra: list[str]) -> dict[str, Any]:
        before = {name: cpu_times(pid) for name, pid in self.servers.items()}
        busy0, total0 = machine_busy()
        started = time.perf_counter()
        procs = [subprocess.Popen([str(HERALD), "perf", command, *topics, "--url", url, "--json",
                                   "--report-interval", "2", *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
                 for topics in groups]
        summaries = []
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"herald perf {command} exited {proc.returncode}:\n{err[-3000:]}")
            summaries.append(json.loads(out.strip().splitlines()[-1]))
        wall = time.perf_counter() - started
        busy1, total1 = machine_busy()
        after = {name: cpu_times(pid) for name, pid in self.servers.items()}
        stream = "produce" if command == "produce" else "consume"
        measured = sum(s[stream]["messages"] for s in summaries)
        total_messages = measured + sum(s.get("warmup_messages", 0) for s in summaries)
        rate = sum(s[stream]["msg_per_s"] for s in summaries)
        cpu = {name: after[name][0] + after[name][1] - before[name][0] - before[name][1] for name in self.servers}
        system = {name: after[name][1] - before[name][1] for name in self.servers}
        return {
            "msg_s": round(rate), "mb_s": round(rate * SIZE / 1e6, 1), "messages": total_messages,
            "producers" if command == "produce" else "consumers": len(groups),
            "latency_ms": summaries[0][stream]["latency_ms"], "errors": sum(s["errors"] for s in summaries),
            "wall_s": round(wall, 2),
            "cpu_s_per_1k": {name: round(seconds * 1000 / max(total_messages, 1), 4) for name, seconds in cpu.items()},
            "cpu_s": {name: round(seconds, 2) for name, seconds in cpu.items()},
            "cpu_system_s": {name: round(seconds, 2) for name, seconds in system.items()},
            "machine_busy": round((busy1 - busy0) / max(total1 - total0, 1e-9), 3),
        }


@contextmanager
def clients_cpu() -> Iterator[dict[str, float]]:
    """CPU seconds of the perf processes reaped inside the block (RUSAGE_CHILDREN grows by theirs)."""
    out: dict[str, float] = {}
    before = os.times()
    yield out
    after = os.times()
    out["clients"] = (after.children_user - before.children_user) + (after.children_system - before.children_system)


async def owners(lookup_address: str, topics: list[str]) -> dict[str, str]:
    """The broker each topic is assigned to, as lookup answers (following one redirect)."""
    answer: dict[str, str] = {}
    async with grpc.aio.insecure_channel(lookup_address) as channel:
        stub = lookup_pb2_grpc.LookupServiceStub(channel)
        for topic in topics:
            reply = await stub.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic), timeout=10)
            answer[topic] = reply.broker_address
    return answer


def produce_consume(run: Run, url: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    timing = ["--duration", str(args.duration), "--warmup", str(args.warmup)]
    with clients_cpu() as used:
        produced = run.perf("produce", [[topic]], url, ["--size", str(SIZE), "--max-pending", "1000", *timing])
    produced["cpu_s_per_1k"]["clients"] = round(used["clients"] * 1000 / produced["messages"], 4)
    with clients_cpu() as used:
        consumed = run.perf("consume", [[topic]], url, ["--count", str(produced["messages"]),
                                                        "--initial-position", "earliest", "--subscription", "bench"])
    consumed["cpu_s_per_1k"]["clients"] = round(used["clients"] * 1000 / consumed["messages"], 4)
    # The consume run has no warm-up: its rate is over every message, the backlog read from the start.
    return {"produce": produced, "consume": consumed}


def spread(run: Run, url: str, topics: list[str], args: argparse.Namespace) -> dict[str, Any]:
    groups = [topics[i::args.producers] for i in range(args.producers)]
    with clients_cpu() as used:
        produced = run.perf("produce", groups, url, ["--size", str(SIZE), "--max-pending", "1000",
                                                     "--duration", str(args.duration), "--warmup", str(args.warmup)])
    produced["cpu_s_per_1k"]["clients"] = round(used["clients"] * 1000 / produced["messages"], 4)
    return {"produce": produced, "topics": len(topics)}


def cluster_case(tmp: Path, brokers: int, env: dict[str, str]) -> LocalCluster:
    cluster = LocalCluster(ClusterSettings(base_dir=str(tmp), brokers=brokers, storage_nodes=3, ensemble_size=3,
                                           write_quorum=2, ack_quorum=2, extra_env=env))
    cluster.start()
    return cluster


def server_pids(cluster: LocalCluster) -> dict[str, int]:
    return {p.name: p.proc.pid for p in cluster.processes if p.proc is not None}


def run_case(case: str, tmp: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    stamp = time.monotonic_ns()
    if case == "standalone":
        with Standalone(tmp / case, env=env) as server:
            run = Run({"standalone": server.pid}, env)
            figures = produce_consume(run, server.service_url, f"cs-{stamp}", args)
            return {**figures, "peak_rss_mib": {"standalone": round(server.peak_rss_mib(), 1)}}
    brokers = 2 if case == "brokers-2" else 1
    cluster = cluster_case(tmp / case, brokers, env)
    try:
        run = Run(server_pids(cluster), env)
        if case == "cluster":
            figures = produce_consume(run, cluster.service_url, f"cs-{stamp}", args)
        else:
            topics = [f"cs-{stamp}-{i}" for i in range(args.topics)]
            figures = spread(run, cluster.service_url, topics, args)
            placed = asyncio.run(owners(cluster.lookup.address, topics))
            names = {b.address: b.name for b in cluster.brokers}
            figures["placement"] = dict(Counter(names.get(a, a) for a in placed.values()))
        rss = {name: round(peak_rss_mib(pid), 1) for name, pid in server_pids(cluster).items()}
        return {**figures, "quorums": "3/2/2", "brokers": brokers, "peak_rss_mib": rss}
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="standalone,cluster,brokers-1,brokers-2")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured per produce run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--topics", type=int, default=4, help="topics of the brokers-1 / brokers-2 cases")
    parser.add_argument("--producers", type=int, default=2, help="perf processes sharing those topics")
    parser.add_argument("--services", help="run this services/ tree (servers and clients) instead")
    parser.add_argument("--label", default="")
    parser.add_argument("--no-limits", action="store_true", help="skip measuring the machine's limits")
    args = parser.parse_args()
    env = {**os.environ}
    if args.services:
        env["PYTHONPATH"] = os.pathsep.join([args.services, *env.get("PYTHONPATH", "").split(os.pathsep)])
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        limits = {} if args.no_limits else machine_limits(tmp)
        if limits:
            print(f"machine: {limits}")
        for case in args.cases.split(","):
            figures = run_case(case, tmp, args, env)
            record = append_result("cluster_scaling.jsonl", {"case": case, "size": SIZE, "label": args.label,
                                                             "limits": limits, **figures})
            produce = record["produce"]
            line = f"{case:11} produce {produce['msg_s']:>9,} msg/s {produce['mb_s']:6.1f} MB/s"
            if "consume" in record:
                line += f"  consume {record['consume']['msg_s']:>9,} msg/s"
            line += f"  busy {produce['machine_busy']:.0%}  cpu s/1k {produce['cpu_s_per_1k']}"
            line += f"  rss {record['peak_rss_mib']}" + (f"  placement {record['placement']}"
                                                          if "placement" in record else "")
            print(line, flush=True)


if __name__ == "__main__":
    main()
