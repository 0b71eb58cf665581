"""Throughput of one storage node: adds of SIZE-byte entries through one pipelined AddEntries stream.

Starts a storage node process on a temporary data dir, streams --count adds (all ledger 1, entry
ids 0..count-1) as fast as the node takes them, and prints adds/s and MB/s, the journal fsyncs the
node did (group commit: many adds share one fsync), and read throughput of the entries back.

    .venv/bin/python bench/storage_add.py --count 20000 --size 100
    .venv/bin/python bench/storage_add.py --count 5000 --size 100000
    .venv/bin/python bench/storage_add.py --count 200000 --size 100 --batch 500
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator

import grpc.aio
from herald.api.v1 import storage_pb2, storage_pb2_grpc
from herald.common.transport.rpc import channel_options

# The node: serves until SIGTERM, then reports its journal's group commit figures.
NODE = """
import asyncio, signal, sys, time
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings

async def main():
    server = StorageServer(StorageSettings(data_dir=sys.argv[1], port=0, metrics_port=-1,
                                           checkpoint_interval=float(sys.argv[2])))
    await server.start()
    started = time.perf_counter()
    print(f"storage listening on {server.address}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    journal = server.store.journal
    print(f"node journal: {journal.record_count} records in {journal.fsync_count} fsyncs "
          f"({journal.record_count / max(journal.fsync_count, 1):.1f} per fsync, "
          f"{journal.fsync_count / (time.perf_counter() - started):.0f} fdatasyncs/s over the node's life); "
          f"{server.store.checkpoint_count} checkpoints", flush=True)
    await server.stop()

asyncio.run(main())
"""


async def bench(address: str, count: int, size: int, batch: int, ledger: int) -> None:
    async with grpc.aio.insecure_channel(address, options=channel_options()) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        payload = os.urandom(size)
        sent = [0.0] * count  # when each add was handed to gRPC: its latency ends at its answer
        latencies: list[float] = []

        async def requests() -> AsyncIterator[storage_pb2.AddRequest]:
            for i in range(count):
                sent[i] = time.perf_counter()
                yield storage_pb2.AddRequest(request_id=i, ledger_id=ledger, entry_id=i, data=payload,
                                             last_add_confirmed=i - 1)

        async def batches() -> AsyncIterator[storage_pb2.AddBatchRequest]:
            adds = requests()
            while chunk := [a async for a in _take(adds, batch)]:
                yield storage_pb2.AddBatchRequest(adds=chunk)

        started = time.perf_counter()
        acked = 0
        if batch > 1:
            async for results in stub.AddEntryBatches(batches()):
                now = time.perf_counter()
                for response in results.responses:
                    _check(response)
                    latencies.append(now - sent[response.request_id])
                    acked += 1
        else:
            async for response in stub.AddEntries(requests()):
                _check(response)
                latencies.append(time.perf_counter() - sent[response.request_id])
                acked += 1
        elapsed = time.perf_counter() - started
        rpc = f"AddEntryBatches x{batch}" if batch > 1 else "AddEntries"
        print(f"add  {size:>7} B x {acked} ({rpc}): {acked / elapsed:>8.0f} adds/s "
              f"{acked * size / elapsed / 1e6:7.1f} MB/s  ({elapsed:.2f} s)")
        latencies.sort()
        print(f"add latency (pipelined, sent to answered): p50 {latencies[len(latencies) // 2] * 1e3:.2f} ms  "
              f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.2f} ms  max {latencies[-1] * 1e3:.2f} ms")

        started = time.perf_counter()
        read = 0
        async for chunk in stub.ReadEntries(storage_pb2.ReadRequest(ledger_id=ledger, first_entry_id=0,
                                                                    last_entry_id=count - 1)):
            read += len(chunk.entries)
        elapsed = time.perf_counter() - started
        print(f"read {size:>7} B x {read}: {read / elapsed:>9.0f} entries/s {read * size / elapsed / 1e6:7.1f} MB/s")


async def _take(source: AsyncIterator[storage_pb2.AddRequest], n: int) -> AsyncIterator[storage_pb2.AddRequest]:
    for _ in range(n):
        try:
            yield await anext(source)
        except StopAsyncIteration:
            return


def _check(response: storage_pb2.AddResponse) -> None:
    if response.HasField("error"):
        raise SystemExit(f"add {response.entry_id} failed: {response.error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1, help="adds per message (>1: AddEntryBatches)")
    parser.add_argument("--checkpoint-interval", type=float, default=10.0, help="the node's, seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as data:
        node = subprocess.Popen([sys.executable, "-c", NODE, data, str(args.checkpoint_interval)],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert node.stdout is not None
            line = node.stdout.readline()
            if not line.startswith("storage listening on "):
                raise SystemExit(f"storage node did not start: {line!r}")
            asyncio.run(bench(line.split()[-1], args.count, args.size, args.batch, ledger=1))
            node.terminate()
            print(node.stdout.read().strip())
        finally:
            node.terminate()
            node.wait(timeout=30)


if __name__ == "__main__":
    main()
