"""What bench/scale_topics.py and bench/scale_partitions.py share: the standalone's CPU time and
memory read from /proc, many operations at a bounded concurrency, and the lookup service's topic
lookup rate with many lookups in flight at once.

The client side must not be what is measured: one AsyncClient (its connection pool shares one
channel per broker) drives every producer and consumer, small receive queues keep its memory low,
and the figures reported are the standalone's (RSS, CPU time), or rates bounded by what the
broker answers.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc.aio
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc

T = TypeVar("T")
R = TypeVar("R")

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def idle_cpu_percent(pid: int, seconds: float) -> float:
    """CPU% (of one core) the process uses over `seconds` while this side does nothing."""
    before, started = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - started)


def connections_for(streams: int) -> int:
    """Connections per broker for a client opening `streams` streams at once: a broker takes at
    most max_streams_per_connection (4,096) on one connection; past that a new stream waits for
    one to end, and a producer or consumer times out registering."""
    return 1 + streams // 3000


async def bounded(work: Callable[[T], Awaitable[R]], items: Iterable[T], concurrency: int) -> list[R]:
    """`work` on each item, `concurrency` at a time; results in the items' order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(item: T) -> R:
        async with gate:
            return await work(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def lookup_rate(address: str, topics: Sequence[str], seconds: float, in_flight: int = 128,
                      channels: int = 4) -> float:
    """LookupTopic answers per second over `seconds`, `in_flight` lookups outstanding at a time over
    `channels` connections, each for a topic drawn at random from `topics` (loaded ones: the rate of
    answering, not of loading)."""
    opened = [grpc.aio.insecure_channel(address) for _ in range(channels)]
    stubs = [lookup_pb2_grpc.LookupServiceStub(channel) for channel in opened]
    done = 0
    stop = time.monotonic() + seconds

    async def worker(index: int) -> None:
        nonlocal done
        stub = stubs[index % len(stubs)]
        rnd = random.Random(index)
        while time.monotonic() < stop:
            reply = await stub.LookupTopic(lookup_pb2.LookupTopicRequest(topic=rnd.choice(topics)), timeout=30)
            if not reply.broker_address:
                raise RuntimeError(f"lookup named no broker: {reply}")
            done += 1

    try:
        started = time.monotonic()
        await asyncio.gather(*(worker(i) for i in range(in_flight)))
        return done / (time.monotonic() - started)
    finally:
        for channel in opened:
            await channel.close()
