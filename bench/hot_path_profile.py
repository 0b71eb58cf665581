"""Where each microsecond per message goes: produce then consume N messages of S bytes through a
standalone, with the client in this process and the standalone (lookup, broker, storage) in a child
process, each under cProfile, and print microseconds per message by stage.

Every function's own time (cProfile's tottime) is charged to a stage by its module (client
send_async/accumulator, batch encode, the client's gRPC write, the broker's produce session,
publication, managed ledger, storage client, dispatch, the storage node's server, ledger store,
journal...); time spent in library code (protobuf, grpc.aio, asyncio futures) goes to the Herald
functions that called it, in proportion to the calls' time; what no Herald function called (the event
loop itself, gRPC's polling) is "runtime". The journal's writer thread has a profile of its own
(its fdatasync is wall time there, not CPU).

cProfile slows Python code down (about 2x), so each workload first runs without it: the table's
"µs/msg" columns are each stage's share of its thread's profile scaled to the CPU that thread used
per message in the unprofiled run (from /proc/<pid>/task/<tid>/stat); the profiled µs are kept in
the JSON line. Every acknowledgement after fdatasync (the standalone's defaults).

    flock /work/bench.lock .venv/bin/python bench/hot_path_profile.py --size 100 --messages 200000
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import faulthandler
import json
import os
import pstats
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness import append_result, free_port
from herald.client import AsyncClient, ConsumerType, InitialPosition

PHASES = ("produce", "consume")
TICK = os.sysconf("SC_CLK_TCK")

# (path prefix under herald/, stage): the first that matches a function's file names its stage.
STAGES = (
    ("client/topic_producer", "client: send_async"), ("client/producer.py", "client: send_async"),
    ("client/linger", "client: send_async"), ("client/accumulator", "client: accumulator"),
    ("client/sender", "client: gRPC write + receipts"), ("client/producer_protocol", "client: gRPC write + receipts"),
    ("client/topic_consumer", "client: receive"), ("client/consumer.py", "client: receive"),
    ("client/receive_queue", "client: receive"), ("client/consumer_protocol", "client: consumer stream + unpack"),
    ("client/ack", "client: acknowledge"), ("client/", "client: other"),
    ("common/codec/entry", "codec: entry encode/decode"), ("common/codec/herald_entry", "codec: entry encode/decode"),
    ("broker/grpc/", "broker: gRPC servicer"),
    ("broker/core/producer", "broker: produce session + dedup"),
    ("broker/core/dedup", "broker: produce session + dedup"),
    ("broker/core/publication", "broker: publication"), ("broker/core/topic", "broker: publication"),
    ("broker/core/admission", "broker: publication"), ("broker/core/rates", "broker: publication"),
    ("broker/core/managed_ledger", "broker: managed ledger + pending add"),
    ("broker/core/pending_add", "broker: managed ledger + pending add"),
    ("storage/client/", "broker: storage client (add frames, add streams)"),
    ("broker/core/entry_cache", "broker: read (entry cache, reader)"),
    ("broker/core/ledger_reader", "broker: read (entry cache, reader)"),
    ("broker/core/", "broker: dispatch, cursors, acks"),
    ("storage/node/server", "storage: server (add, read)"), ("storage/node/journal", "storage: journal"),
    ("storage/node/ledger_store", "storage: ledger store"), ("storage/node/ledgers", "storage: ledger store"),
    ("storage/node/entry_log", "storage: entry log + index"), ("storage/node/index", "storage: entry log + index"),
    ("storage/", "storage: other"), ("common/", None), ("", "herald: other"),
)
RUNTIME = "runtime: event loop, gRPC core callbacks"
IDLE = "idle (waiting)"


def stage_of(key: tuple[str, int, str]) -> str | None:
    """The stage of a Herald function, None for library code and common/ (charged to callers)."""
    filename, _, name = key
    if "'poll' of 'select.epoll" in name:
        return IDLE  # the event loop waiting: wall time, no CPU
    if "fdatasync" in name:
        return "storage: fdatasync (wall)"
    if "writev" in name:
        return "storage: journal writev"
    if filename == __file__ or filename.endswith("hot_path_profile.py"):
        return IDLE
    _, found, rest = filename.replace(os.sep, "/").rpartition("/herald/")
    if not found or "/site-packages/" in filename or not rest.endswith(".py"):
        return None
    return next(stage for prefix, stage in STAGES if rest.startswith(prefix))


def by_stage(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time per stage; library functions' time goes to their Herald callers."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    shares: dict[Any, dict[str, float]] = {}
    sys.setrecursionlimit(100_000)

    def share(key: Any, seen: frozenset[Any]) -> dict[str, float]:
        if key in shares:
            return shares[key]
        stage = stage_of(key)
        if stage is not None:
            result = {stage: 1.0}
        else:
            callers = {c: w for c, w in table[key][4].items() if c not in seen and c in table}
            weights = {c: (w[3] or w[2] or w[1] * 1e-9) for c, w in callers.items()}
            total = sum(weights.values())
            result = defaultdict(float)
            if not total:
                result[RUNTIME] = 1.0
            for caller, weight in weights.items():
                for name, part in share(caller, seen | {key}).items():
                    result[name] += part * weight / total if total else 0.0
            result = dict(result)
        shares[key] = result  # memoized even inside a cycle: a cycle's share is approximate
        return result

    seconds: dict[str, float] = defaultdict(float)
    for key, (_cc, _nc, own, _cum, _callers) in table.items():
        for name, part in share(key, frozenset()).items():
            seconds[name] += own * part
    return dict(seconds)


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process."""
    cpu = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[int(task.name)] = (int(fields[11]) + int(fields[12])) / TICK
    return cpu


def cpu_split(before: dict[int, float], after: dict[int, float], named: dict[int, str]) -> dict[str, float]:
    """CPU seconds between two thread_cpu() readings: the main thread, named threads, the rest."""
    split: dict[str, float] = defaultdict(float)
    for tid, seconds in after.items():
        name = "main" if tid == os.getpid() else named.get(tid, "other threads")
        split[name] += seconds - before.get(tid, 0.0)
    return dict(split)


class SwitchingQueue(queue.SimpleQueue[Any]):
    """The journal's queue, calling on_get (on the writer thread) as each blocking get returns: the
    writer's profile follows the phase there."""

    def on_get(self) -> None:
        pass

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        item = super().get(block, timeout)
        self.on_get()
        return item


# ---- the server side (a child process): a standalone under cProfile, phase by phase ----

def serve(data_dir: str, profile: bool) -> None:
    from herald.standalone import Standalone, StandaloneSettings
    from herald.storage.node.journal import Journal

    journals: list[Journal] = []
    named: dict[int, str] = {}
    profiles: dict[str, cProfile.Profile] = {}
    writer_profile: dict[str, Any] = {"phase": "", "wanted": ""}
    run = Journal._run

    def profiled_run(self: Journal) -> None:  # the journal's writer thread, with a profile per phase
        journals.append(self)
        named[threading.get_native_id()] = "journal writer"
        if not profile:
            return run(self)
        current: list[cProfile.Profile | None] = [None]

        def switch() -> None:
            writer_profile["phase"] = writer_profile["wanted"]
            if current[0] is not None:
                current[0].disable()
            phase = writer_profile["phase"]
            current[0] = profiles.setdefault(f"writer {phase}", cProfile.Profile()) if phase else None
            if current[0] is not None:
                current[0].enable()
        self._queue.on_get = lambda: switch() if writer_profile["wanted"] != writer_profile["phase"] else None  # type: ignore[attr-defined]
        return run(self)

    init = Journal.__init__

    def switching_init(self: Journal, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._queue = SwitchingQueue()  # before anything is queued

    Journal.__init__ = switching_init  # type: ignore[method-assign]
    Journal._run = profiled_run  # type: ignore[method-assign]
    settings = StandaloneSettings(data_dir=data_dir, port=free_port(), broker_port=free_port(), proxy_port=-1,
                                  storage_port=free_port(), pulsar_port=-1, metrics_port=-1, web_port=-1,
                                  dlq_worker=False)

    async def main() -> None:
        standalone = Standalone(settings)
        await standalone.start()
        print(f"ready {standalone.service_url}", flush=True)
        loop = asyncio.get_running_loop()
        current: cProfile.Profile | None = None
        mark: tuple[float, dict[int, float], int, int] = (0.0, {}, 0, 0)
        while True:
            command = (await asyncio.to_thread(sys.stdin.readline)).strip()
            if current is not None:
                current.disable()
                current = None
            writer_profile["wanted"] = ""
            if mark[0]:
                split = cpu_split(mark[1], thread_cpu(), named)
                fsyncs = sum(j.fsync_count for j in journals) - mark[2]
                records = sum(j.record_count for j in journals) - mark[3]
                print("done " + json.dumps({"wall_s": time.perf_counter() - mark[0], "cpu_s": split,
                                            "fsyncs": fsyncs, "records": records}), flush=True)
                mark = (0.0, {}, 0, 0)
            if command in PHASES:
                if profile:
                    current = profiles.setdefault(command, cProfile.Profile())
                    writer_profile["wanted"] = command
                mark = (time.perf_counter(), thread_cpu(), sum(j.fsync_count for j in journals),
                        sum(j.record_count for j in journals))
                if current is not None:
                    loop.call_soon(current.enable)
                print("started", flush=True)
            elif command in ("stop", ""):
                break
        await standalone.stop()
        out = {name: by_stage(pstats.Stats(p)) for name, p in profiles.items() if p.getstats()}
        if os.environ.get("HOT_PATH_DUMP"):  # raw profiles, for pstats
            for name, p in profiles.items():
                p.dump_stats(f"{os.environ['HOT_PATH_DUMP']}/server-{name.replace(' ', '-')}.prof")
        print("profiles " + json.dumps(out), flush=True)

    asyncio.run(main())


class Server:
    """The child process: phases begin and end on a line on its stdin, its figures come on stdout."""

    def __init__(self, data_dir: str, profile: bool) -> None:
        args = [sys.executable, __file__, "--serve", data_dir] + ([] if profile else ["--no-profile"])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self._expect("ready").split()[1]

    def _expect(self, word: str) -> str:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the standalone ended before saying {word!r}")
            if line.startswith(word):
                return line.strip()

    def command(self, line: str, expect: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._expect(expect)

    def peak_rss_mib(self) -> float:
        from harness import peak_rss_mib
        return peak_rss_mib(self.proc.pid)


# ---- the client side ----

async def workload(server: Server, messages: int, size: int, max_pending: int, profile: bool) -> dict[str, Any]:
    payload = b"x" * size
    result: dict[str, Any] = {}
    async with AsyncClient(server.url) as client:
        topic = f"profile-{os.getpid()}-{time.time_ns()}"
        producer = await client.create_producer(topic, max_pending_messages=max_pending, block_if_queue_full=True)
        consumer = await client.subscribe(topic, "profile", consumer_type=ConsumerType.Exclusive,
                                          initial_position=InitialPosition.Earliest)
        for phase in PHASES:
            await asyncio.to_thread(server.command, phase, "started")
            profiler = cProfile.Profile() if profile else None
            cpu, started = thread_cpu(), time.perf_counter()
            if profiler is not None:
                profiler.enable()
            if phase == "produce":
                for _ in range(messages):
                    await producer.send_async(payload)
                await producer.flush()
            else:
                for received in range(messages):
                    message = await consumer.receive(timeout=30)
                    if message is None:
                        raise RuntimeError(f"consumer stalled after {received} of {messages} messages")
                    consumer.acknowledge(message)
            if profiler is not None:
                profiler.disable()
            wall = time.perf_counter() - started
            client_cpu = cpu_split(cpu, thread_cpu(), {})
            done = json.loads((await asyncio.to_thread(server.command, "end", "done")).split(" ", 1)[1])
            if profiler is not None and os.environ.get("HOT_PATH_DUMP"):
                profiler.dump_stats(f"{os.environ['HOT_PATH_DUMP']}/client-{phase}.prof")
            result[phase] = {"wall_s": wall, "msg_s": messages / wall, "client_cpu_s": client_cpu,
                             "server": done,
                             "client_profile": by_stage(pstats.Stats(profiler)) if profiler is not None else {}}
        await producer.close()
        await consumer.close()
    return result


def one_run(messages: int, size: int, max_pending: int, profile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(tmp, profile)
        try:
            result = asyncio.run(workload(server, messages, size, max_pending, profile))
            result["server_peak_rss_mib"] = server.peak_rss_mib()
            profiles = json.loads(server.command("stop", "profiles").split(" ", 1)[1])
            server.proc.wait(timeout=60)
        finally:
            if server.proc.poll() is None:
                server.proc.terminate()
                server.proc.wait(timeout=60)
        for phase in PHASES:
            result[phase]["server_profile"] = profiles.get(phase, {})
            result[phase]["writer_profile"] = profiles.get(f"writer {phase}", {})
    return result


def scaled(profile: dict[str, float], cpu_s: float, messages: int) -> dict[str, float]:
    """Each stage's share of a thread's profile, as µs per message of that thread's unprofiled CPU."""
    total = sum(seconds for stage, seconds in profile.items() if stage != IDLE) or 1.0
    return {stage: seconds / total * cpu_s / messages * 1e6 for stage, seconds in profile.items() if stage != IDLE}


def report(size: int, messages: int, plain: dict[str, Any], profiled: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"size": size, "messages": messages, "server_peak_rss_mib": plain["server_peak_rss_mib"]}
    for phase in PHASES:
        run, prof = plain[phase], profiled[phase]
        client_cpu, server_cpu = run["client_cpu_s"], run["server"]["cpu_s"]
        stages = {**scaled(prof["client_profile"], client_cpu.get("main", 0.0), messages),
                  **{f"{name}": us for name, us in scaled(prof["server_profile"], server_cpu.get("main", 0.0),
                                                          messages).items()
                     if name != RUNTIME}}
        stages[f"client {RUNTIME}"] = stages.pop(RUNTIME, 0.0)
        server_runtime = scaled(prof["server_profile"], server_cpu.get("main", 0.0), messages).get(RUNTIME, 0.0)
        stages[f"server {RUNTIME}"] = server_runtime
        out[phase] = {
            "msg_s": run["msg_s"], "mb_s": run["msg_s"] * size / 1e6,
            "client_cpu_us": {k: v / messages * 1e6 for k, v in client_cpu.items()},
            "server_cpu_us": {k: v / messages * 1e6 for k, v in server_cpu.items()},
            "fsyncs": run["server"]["fsyncs"], "journal_records": run["server"]["records"],
            "stages_us": dict(sorted(stages.items())),
            "writer_profiled_us": {k: v / messages * 1e6 for k, v in prof["writer_profile"].items()},
            "profiled_us": {"client": {k: v / messages * 1e6 for k, v in prof["client_profile"].items()},
                            "server": {k: v / messages * 1e6 for k, v in prof["server_profile"].items()}},
        }
    return out


def print_table(result: dict[str, Any]) -> None:
    size = result["size"]
    print(f"\n### {size} B, {result['messages']:,} messages "
          f"(server peak RSS {result['server_peak_rss_mib']:.0f} MiB)\n")
    for phase in PHASES:
        figures = result[phase]
        print(f"{phase}: {figures['msg_s']:,.0f} msg/s ({figures['mb_s']:.1f} MB/s) unprofiled; CPU µs/msg "
              f"client {figures['client_cpu_us']}, server {figures['server_cpu_us']}; "
              f"{figures['fsyncs']} fsyncs for {figures['journal_records']} journal records")
        print("\n| stage | µs/msg |\n|---|---|")
        for stage, us in sorted(figures["stages_us"].items(), key=lambda item: -item[1]):
            if us >= 0.005:
                print(f"| {stage} | {us:.2f} |")
        writer = figures["writer_profiled_us"]
        if writer:
            print("\njournal writer thread (profiled wall µs/msg): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(writer.items(), key=lambda i: -i[1])))
            print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, action="append", help="message size (repeatable; 100 and 1024)")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--max-pending", type=int, default=1000)
    parser.add_argument("--label", default="")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--no-profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: where a stuck run is
    if args.serve:
        serve(args.serve, not args.no_profile)
        return
    for size in args.size or [100, 1024]:
        plain = one_run(args.messages, size, args.max_pending, profile=False)
        profiled = one_run(args.messages, size, args.max_pending, profile=True)
        result = report(size, args.messages, plain, profiled)
        if args.label:
            result["label"] = args.label
        print_table(result)
        append_result("hot_path_profile.jsonl", result)


if __name__ == "__main__":
    main()
