"""Replicated adds through the real StorageClient: adds/s of SIZE-byte entries at E/Qw/Qa on storage node
processes, with --window adds in flight (as the managed ledger pipelines them), then the time to
recover the ledger left open (fence, LAC, length count, close) from a second client.

    .venv/bin/python bench/storage_replication.py                      # 1/1/1 on 1 node vs 3/2/2 on 3 nodes
    .venv/bin/python bench/storage_replication.py --quorums 3/3/2 --count 50000 --window 500
    .venv/bin/python bench/storage_replication.py --nowait     # callbacks (add_entry_nowait), no task per add

Each run appends a line to bench/results/storage_replication.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from herald.metadata.embedded import EmbeddedMetadataStore
from herald.storage.client.storage_client import StorageClient

RESULTS = Path(__file__).parent / "results" / "storage_replication.jsonl"
HERALD = Path(sys.executable).parent / "herald"


def start_nodes(count: int, base: Path) -> tuple[list[subprocess.Popen[str]], list[str]]:
    procs: list[subprocess.Popen[str]] = []
    addresses: list[str] = []
    for i in range(count):
        data = base / f"node{i}"
        command = [str(HERALD), "storage", "--data-dir", str(data), "--port", "0", "--metrics-port", "-1"]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("storage listening on "):
            raise SystemExit(f"storage node {i} did not start: {line!r}")
        addresses.append(line.split()[-1])
    return procs, addresses


async def run(quorums: tuple[int, int, int], nodes: list[str], base: Path, count: int, size: int,
              window: int, nowait: bool) -> dict[str, object]:
    store = EmbeddedMetadataStore(str(base / "metadata.db"))
    await store.start()
    writer = StorageClient(store, nodes)
    recoverer = StorageClient(store, nodes)
    try:
        handle = await writer.create_ledger(*quorums)
        data = os.urandom(size)
        slots = asyncio.Semaphore(window)
        started = time.perf_counter()

        async def add() -> None:
            try:
                await handle.add_entry(data)
            finally:
                slots.release()

        if nowait:
            # The managed ledger's way with one completion point: a callback per add, no task.
            done = asyncio.get_running_loop().create_future()
            completed = 0

            def added(entry_id: int, error: BaseException | None) -> None:
                nonlocal completed
                slots.release()
                completed += 1
                if error is not None and not done.done():
                    done.set_exception(error)
                elif completed == count and not done.done():
                    done.set_result(None)

            for _ in range(count):
                await slots.acquire()
                handle.add_entry_nowait(data, added)
            await done
        else:
            tasks = []
            for _ in range(count):
                await slots.acquire()
                tasks.append(asyncio.create_task(add()))
            await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started

        started = time.perf_counter()
        recovered = await recoverer.open_ledger(handle.ledger_id, recover=True)
        recovery = time.perf_counter() - started
        assert recovered.last_add_confirmed == count - 1, recovered.last_add_confirmed
        return {"adds_s": count / elapsed, "mb_s": count * size / elapsed / 1e6, "recovery_s": recovery}
    finally:
        await writer.close()
        await recoverer.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quorums", nargs="*", default=["1/1/1", "3/2/2"], help="E/Qw/Qa, one node per E")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1000, help="adds in flight")
    parser.add_argument("--nowait", action="store_true", help="add with callbacks (add_entry_nowait), no task per add")
    args = parser.parse_args()
    for spec in args.quorums:
        e, qw, qa = (int(x) for x in spec.split("/"))
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            procs, addresses = start_nodes(e, Path(tmp))
            try:
                figures = asyncio.run(run((e, qw, qa), addresses, Path(tmp), args.count, args.size, args.window,
                                          args.nowait))
            finally:
                for proc in procs:
                    proc.terminate()
                for proc in procs:
                    proc.wait(timeout=30)
        mode = " nowait" if args.nowait else ""
        print(f"{spec}{mode} on {e} node(s): {figures['adds_s']:8.0f} adds/s {figures['mb_s']:6.1f} MB/s "
              f"({args.count} x {args.size} B, {args.window} in flight); recovery of the open ledger "
              f"{figures['recovery_s']:.2f} s")
        record = {"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "quorums": spec, "nodes": e, "count": args.count,
                  "size": args.size, "window": args.window, "nowait": args.nowait, **figures}
        with RESULTS.open("a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
