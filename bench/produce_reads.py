"""What one read of a Produce stream costs the broker's event loop, the old way (broker_servicer's
_unless: a task and an asyncio.wait per read, so the read can end when the producer is closed) and
the new (_Reads: the read in the handler's own task, cancelled by the stoppers), against a bare
await of the read. The stream is a stand-in whose read completes from a loop callback, as
grpc.aio's does; no server. Prints µs per read.

    PYTHONPATH=$PWD/services python bench/produce_reads.py
"""

from __future__ import annotations

import asyncio
import time

from herald.broker.grpc.broker_servicer import _Reads, _unless


class _Stream:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()

    async def read(self) -> int:
        future: asyncio.Future[int] = self.loop.create_future()
        self.loop.call_soon(future.set_result, 1)
        return await future


async def main(reads_per_case: int = 20_000, rounds: int = 3) -> None:
    stream = _Stream()
    closed, writer = asyncio.ensure_future(asyncio.Event().wait()), asyncio.ensure_future(asyncio.Event().wait())
    reads = _Reads(stream, closed, writer)  # type: ignore[arg-type]  # the stand-in has read()
    clock = time.perf_counter_ns
    for _ in range(rounds):
        started = clock()
        for _ in range(reads_per_case):
            await _unless(stream.read(), closed, writer)
        old = (clock() - started) / reads_per_case / 1000
        started = clock()
        for _ in range(reads_per_case):
            await reads.next()
        new = (clock() - started) / reads_per_case / 1000
        started = clock()
        for _ in range(reads_per_case):
            await stream.read()
        bare = (clock() - started) / reads_per_case / 1000
        print(f"per read: _unless {old:.1f} us, _Reads {new:.1f} us, bare await {bare:.1f} us")
    closed.cancel()
    writer.cancel()


if __name__ == "__main__":
    asyncio.run(main())
