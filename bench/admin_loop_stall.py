"""How long admin calls on a topic with many partitions hold a standalone's event loop: a probe
thread asks the broker's gRPC health service every 5 ms (served on the same event loop as
everything else) and records how long each answer took, while `--callers` clients ask for the
topic's route (lookup's GetTopicRoute, which assigns an owner per partition) and then its stats
(every partition's, loading each the first time) `--rounds` times each. The worst answer time is
the worst stall a client saw; the idle phase shows what the machine gives with nothing running.
Lease losses (the broker silent past heartbeat x 3) are counted from the log.

    python bench/admin_loop_stall.py --partitions 1000 --callers 8

Appends to bench/results/admin_loop_stall.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import Standalone
from herald.api.v1 import admin_pb2, admin_pb2_grpc, lookup_pb2, lookup_pb2_grpc

RESULTS = Path(__file__).resolve().parent / "results" / "admin_loop_stall.jsonl"
PROBE_INTERVAL = 0.005


class Probe:
    """Health checks in a loop on a thread of its own; `window()` gives the answer times since."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.times: list[tuple[float, float]] = []  # (sent at, seconds to answer)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    stub.Check(health_pb2.HealthCheckRequest(), timeout=600)
                except grpc.RpcError as exc:
                    print(f"probe failed: {exc.code()}", file=sys.stderr)
                self.times.append((sent, time.monotonic() - sent))
                time.sleep(PROBE_INTERVAL)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=600)

    def window(self, since: float) -> dict[str, float]:
        answers = sorted(took for sent, took in self.times if sent >= since)
        if not answers:
            return {"probes": 0}
        return {"probes": len(answers), "worst_ms": round(answers[-1] * 1000, 1),
                "p99_ms": round(answers[int(0.99 * (len(answers) - 1))] * 1000, 1),
                "median_ms": round(statistics.median(answers) * 1000, 1)}


def lease_losses(server: Standalone) -> int:
    """How often the standalone's broker lost its lease (and dropped every topic) during the run."""
    return server.log.read_text(errors="replace").count("expired: dropping all topics")


async def run_phase(name: str, call: Any, callers: int, rounds: int, probe: Probe) -> dict[str, Any]:
    """`callers` clients making `call()` `rounds` times each, side by side; the probe's view."""
    started = time.monotonic()
    failures: list[str] = []

    async def caller() -> None:
        for _ in range(rounds):
            try:
                await call()
            except grpc.aio.AioRpcError as exc:
                failures.append(f"{exc.code().name}: {(exc.details() or '')[:120]}")

    await asyncio.gather(*(caller() for _ in range(callers)))
    took = time.monotonic() - started
    result = {"phase": name, "seconds": round(took, 2), "failures": len(failures), **probe.window(started)}
    print(f"{name:>12}: {took:7.2f} s, worst answer {result.get('worst_ms')} ms, p99 {result.get('p99_ms')} ms"
          + (f", {len(failures)} failed (e.g. {failures[0]})" if failures else ""))
    return result


async def measure(server: Standalone, args: argparse.Namespace, probe: Probe) -> list[dict[str, Any]]:
    topic = "persistent://public/default/many-partitions"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as lookup_channel:
        lookup = lookup_pb2_grpc.LookupServiceStub(lookup_channel)
        owner = await lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic + "-probe"))
        async with grpc.aio.insecure_channel(owner.broker_address) as broker_channel:
            admin = admin_pb2_grpc.AdminServiceStub(broker_channel)
            idle_since = time.monotonic()
            await asyncio.sleep(3)
            results = [{"phase": "idle", **probe.window(idle_since)}]
            print(f"{'idle':>12}: worst answer {results[0].get('worst_ms')} ms")
            await admin.CreateTopic(admin_pb2.CreateTopicRequest(topic=topic, partitions=args.partitions), timeout=60)

            async def route() -> None:
                await lookup.GetTopicRoute(lookup_pb2.TopicRouteRequest(topic=topic), timeout=args.timeout)

            async def stats() -> None:
                await admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic), timeout=args.timeout)

            results.append(await run_phase("routes", route, args.callers, args.rounds, probe))
            results.append(await run_phase("stats", stats, args.callers, args.rounds, probe))
            return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000, help="partitions of the topic (the default cap)")
    parser.add_argument("--callers", type=int, default=8, help="clients calling side by side")
    parser.add_argument("--rounds", type=int, default=3, help="calls per client per phase")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="broker heartbeat seconds (lease: 3 of them)")
    parser.add_argument("--timeout", type=float, default=300.0, help="deadline of each admin call, seconds")
    parser.add_argument("--label", default="", help="a name for this run in the results (e.g. before / after)")
    parser.add_argument("--keep-log", type=Path, help="copy the standalone's log here")
    args = parser.parse_args()
    env = dict(os.environ, HERALD_BROKER_MAX_PARTITIONS_PER_TOPIC=str(args.partitions),
               HERALD_LOOKUP_HEARTBEAT_INTERVAL=str(args.heartbeat))
    with tempfile.TemporaryDirectory() as tmp:
        server = Standalone(Path(tmp), env=env)
        server.start()
        try:
            with Probe(f"127.0.0.1:{server.broker_port}") as probe:
                phases = asyncio.run(measure(server, args, probe))
        finally:
            server.stop()
        losses = lease_losses(server)
        if args.keep_log is not None:
            shutil.copy(server.log, args.keep_log)
    print(f"lease losses: {losses} (heartbeat {args.heartbeat:g} s, lease {3 * args.heartbeat:g} s)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as handle:
        handle.write(json.dumps({
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"), "label": args.label, "partitions": args.partitions,
            "callers": args.callers, "rounds": args.rounds, "heartbeat_s": args.heartbeat,
            "lease_losses": losses, "phases": phases}) + "\n")


if __name__ == "__main__":
    main()
