"""What one open gRPC stream costs a grpc.aio server, Herald aside (issue 20 items 4 and 6): a
broker consumer is one Consume stream (a consumer of P partitions is P streams), so this is the
floor under the broker's memory per consumer. A bare server (a generic bidi handler that reads
until the stream ends, as the broker's handlers do) in its own process; N streams opened over one
channel, one small message each; its RSS before and after: KiB per stream.

    PYTHONPATH=$PWD/services:$PWD/bench flock /work/bench.lock $PY bench/grpc_stream_cost.py --streams 1000 10000

Results: bench/results/grpc_stream_cost.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from typing import Any

import grpc
import grpc.aio
from harness import append_result, peak_rss_mib, rss_mib
from herald.local_cluster import free_port

SERVER = """
import asyncio, sys
import grpc, grpc.aio

async def echo(request_iterator, context):
    async for _ in request_iterator:
        pass
    return
    yield

async def main():
    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(echo)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("bench.Streams", {"Open": handler})])
    server.add_insecure_port("127.0.0.1:" + sys.argv[1])
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


async def open_streams(port: int, n: int, pid: int) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        method = channel.stream_stream("/bench.Streams/Open")
        warm = method()
        await warm.write(b"x")
        await asyncio.sleep(1)
        before = rss_mib(pid)
        calls = []
        started = time.perf_counter()
        for _ in range(n):
            call = method()
            await call.write(b"x")
            calls.append(call)
        opened_s = time.perf_counter() - started
        await asyncio.sleep(2)
        after = rss_mib(pid)
        for call in [warm, *calls]:
            await call.done_writing()
        return {"streams": n, "rss_before_mib": before, "rss_after_mib": after, "open_s": opened_s,
                "per_stream_kib": (after - before) * 1024 / n, "peak_rss_mib": peak_rss_mib(pid)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    for n in args.streams:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
            figures = asyncio.run(open_streams(port, n, server.pid))
            record = append_result("grpc_stream_cost.jsonl", {"label": args.label, "grpc": grpc.__version__,
                                                               **figures})
            print({k: round(v, 2) if isinstance(v, float) else v for k, v in record.items()}, flush=True)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
