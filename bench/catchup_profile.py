"""Where a catch-up read's server CPU goes (issue 20 item 3): fill a topic with --messages messages
of --size bytes, restart the standalone (nothing cached), then read the whole backlog from a new
subscription while the standalone's event loop runs under cProfile (a second run of the same
read without the profiler gives each thread's CPU per message: cProfile slows Python down).

The standalone runs in a child process (this file with --serve), on the same ports across the
restart (the ledgers name its storage node by address). Prints the event loop's top functions by
own time and the CPU per thread; HOT_PATH_DUMP=<dir> keeps the raw profile for pstats.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/catchup_profile.py --messages 300000
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from typing import Any

from harness import free_port, peak_rss_mib
from herald.client import AsyncClient, ConsumerType, InitialPosition
from hot_path_profile import by_stage, cpu_split, thread_cpu

TOPIC = "persistent://public/default/catchup-profile"


def serve(data_dir: str, ports: list[int]) -> None:
    """The child: a standalone; 'start' begins a measured (and, with 'start profile', profiled)
    phase, 'end' ends it and prints its figures, 'stop' stops."""
    from herald.standalone import Standalone, StandaloneSettings

    port, broker_port, storage_port = ports
    settings = StandaloneSettings(data_dir=data_dir, port=port, broker_port=broker_port, proxy_port=-1,
                                  storage_port=storage_port, pulsar_port=-1, metrics_port=-1, web_port=-1,
                                  dlq_worker=False)

    async def main() -> None:
        standalone = Standalone(settings)
        await standalone.start()
        print(f"ready {standalone.service_url}", flush=True)
        profiler: cProfile.Profile | None = None
        mark: tuple[float, dict[int, float]] = (0.0, {})
        while True:
            command = (await asyncio.to_thread(sys.stdin.readline)).strip()
            if command.startswith("start"):
                # CPU time of this thread (the event loop), not wall time: waits are not costs here.
                profiler = cProfile.Profile(time.thread_time) if command.endswith("profile") else None
                mark = (time.perf_counter(), thread_cpu())
                if profiler is not None:
                    profiler.enable()
                print("started", flush=True)
            elif command == "end":
                if profiler is not None:
                    profiler.disable()
                split = cpu_split(mark[1], thread_cpu(), {})
                out: dict[str, Any] = {"wall_s": time.perf_counter() - mark[0], "cpu_s": split}
                if profiler is not None:
                    stats = pstats.Stats(profiler)
                    out["stages"] = by_stage(stats)
                    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
                    top = sorted(table.items(), key=lambda kv: -kv[1][2])[:40]
                    out["top"] = [[f"{k[0].rsplit('/', 3)[-1]}:{k[1]}:{k[2]}", v[1], round(v[2], 4), round(v[3], 4)]
                                  for k, v in top]
                    if os.environ.get("HOT_PATH_DUMP"):
                        profiler.dump_stats(f"{os.environ['HOT_PATH_DUMP']}/catchup-server.prof")
                print("done " + json.dumps(out), flush=True)
            else:
                break
        await standalone.stop()

    asyncio.run(main())


class Server:
    def __init__(self, data_dir: str, ports: list[int]) -> None:
        args = [sys.executable, __file__, "--serve", data_dir, "--ports", ",".join(map(str, ports))]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.expect("ready").split()[1]

    def expect(self, word: str) -> str:
        assert self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            if line.startswith(word):
                return line.strip()
        raise RuntimeError(f"the standalone ended before saying {word!r}")

    def command(self, line: str, expect: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.expect(expect)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=120)


async def subscribe(url: str, names: list[str]) -> None:
    async with AsyncClient(url) as client:
        for name in names:
            consumer = await client.subscribe(TOPIC, name, ConsumerType.Exclusive, InitialPosition.Latest)
            await consumer.close()


async def fill(url: str, messages: int, size: int) -> None:
    payload = b"x" * size
    async with AsyncClient(url) as client:
        producer = await client.create_producer(
            TOPIC, max_pending_messages=20_000, block_if_queue_full=True, batching_max_messages=1000,
            batching_max_bytes=128 * 1024, batching_max_publish_delay=0.005)
        for _ in range(messages):
            await producer.send_async(payload)
        await producer.flush()
        await producer.close()


async def catch_up(server: Server, messages: int, profile: bool, subscription: str = "") -> dict[str, Any]:
    """Read `messages` from a new subscription at Earliest (or `subscription`, made before the fill:
    a tail read from the cache), the server's CPU split per thread, and its profile if asked."""
    async with AsyncClient(server.url) as client:
        consumer = await client.subscribe(TOPIC, subscription or f"catchup-{time.time_ns()}",
                                          ConsumerType.Exclusive, InitialPosition.Earliest)
        await asyncio.to_thread(server.command, "start profile" if profile else "start", "started")
        started, client_cpu = time.perf_counter(), time.process_time()
        received = 0
        last = None
        while received < messages:
            got = await consumer.receive_many(1000, timeout=60)
            if not got:
                raise RuntimeError(f"consumer stalled after {received} of {messages} messages")
            received += len(got)
            last = got[-1]
        seconds = time.perf_counter() - started
        client_us = (time.process_time() - client_cpu) / messages * 1e6
        done = json.loads((await asyncio.to_thread(server.command, "end", "done")).split(" ", 1)[1])
        consumer.acknowledge_cumulative(last)
        await consumer.close()
    server_cpu = sum(done["cpu_s"].values())
    return {"msg_s": round(messages / seconds), "client_us_per_msg": round(client_us, 3),
            "server_us_per_msg": round(server_cpu / messages * 1e6, 3),
            "server_us_per_msg_by_thread": {k: round(v / messages * 1e6, 3) for k, v in done["cpu_s"].items()},
            **{k: v for k, v in done.items() if k in ("stages", "top")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tail", action="store_true",
                        help="profile a tail read instead (subscriptions made before the fill; keep the "
                             "backlog under the entry cache)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, [int(p) for p in args.ports.split(",")])
        return
    ports = [free_port(), free_port(), free_port()]
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(tmp, ports)
        if args.tail:
            asyncio.run(subscribe(server.url, ["tail-0", "tail-1"]))
        asyncio.run(fill(server.url, args.messages, args.size))
        if not args.tail:
            server.stop()
        results: dict[str, Any] = {}
        for profile in (False, True):
            if not args.tail:
                server = Server(tmp, ports)  # restarted: nothing cached
            try:
                results["profiled" if profile else "plain"] = asyncio.run(
                    catch_up(server, args.messages, profile, f"tail-{int(profile)}" if args.tail else ""))
                results["peak_rss_mib"] = round(peak_rss_mib(server.proc.pid), 1)
            finally:
                if not args.tail or profile:
                    server.stop()
    plain, profiled = results["plain"], results["profiled"]
    print(json.dumps({k: v for k, v in plain.items()}, indent=1))
    print(f"profiled: {profiled['msg_s']} msg/s, server {profiled['server_us_per_msg_by_thread']}")
    for name, seconds in sorted(profiled["stages"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:55s} {seconds / args.messages * 1e6:8.3f} µs/msg (profiled)")
    for row in profiled["top"]:
        print("  ", row)


if __name__ == "__main__":
    main()
