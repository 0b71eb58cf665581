"""Where a broker's bytes per topic and per subscription go (issue 20 item 6): an in-process
standalone under tracemalloc; N topics get a producer, then a consumer each; the allocation
difference per phase is printed by source line (herald's files only, per topic / per subscription),
with the event loop's task count by coroutine.

    PYTHONPATH=$PWD/services:$PWD/bench $PY bench/scale_memory.py --topics 300

A diagnostic (the client runs in the same process; only herald/broker, lookup, storage, metadata
and common lines are shown, and grpc's C allocations are not traced): RSS figures come from
bench/scale_topics.py.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import socket
import tempfile
import tracemalloc

from herald.client import AsyncClient, ConsumerType, InitialPosition
from herald.standalone import Standalone, StandaloneSettings
from scale import bounded

SERVER_PARTS = ("herald/broker/", "herald/lookup/", "herald/storage/", "herald/metadata/", "herald/common/",
                "prometheus_client/", "asyncio/")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tasks_by_coroutine() -> collections.Counter[str]:
    return collections.Counter(getattr(task.get_coro(), "__qualname__", type(task.get_coro()).__name__)
                               for task in asyncio.all_tasks())


def owner(trace: tracemalloc.Traceback) -> str:
    """The innermost herald (or grpc) line behind an allocation: who asked for it."""
    for frame in reversed(list(trace)):  # oldest first: walk from the allocation outwards
        name = frame.filename
        if "herald/" in name or "grpc/_cython" in name:
            return f"{name.split('services/')[-1].split('site-packages/')[-1]}:{frame.lineno}"
    frame = trace[-1]
    return f"{frame.filename.split('site-packages/')[-1].split('/lib/')[-1]}:{frame.lineno}"


def show(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int, what: str, top: int) -> None:
    stats = after.compare_to(before, "traceback")
    by_owner: collections.Counter[str] = collections.Counter()
    blocks: collections.Counter[str] = collections.Counter()
    for s in stats:
        by_owner[owner(s.traceback)] += s.size_diff
        blocks[owner(s.traceback)] += s.count_diff
    total = sum(by_owner.values())
    server = {k: v for k, v in by_owner.items() if "herald/client" not in k}
    print(f"\n== {what}: {total / n / 1024:.1f} KiB traced per item in all, "
          f"{sum(server.values()) / n / 1024:.1f} KiB not from herald/client")
    for key, size in sorted(server.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{size / n:9.0f} B {blocks[key] / n:6.1f} blocks  {key}")


async def run(n: int, top: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = StandaloneSettings(
            data_dir=tmp, port=free_port(), broker_port=free_port(), proxy_port=-1, storage_port=free_port(),
            pulsar_port=-1, metrics_port=-1, web_port=-1, dlq_worker=False)
        server = Standalone(settings)
        await server.start()
        try:
            topics = [f"persistent://public/default/mem-{i}" for i in range(n)]
            async with AsyncClient(server.service_url) as client:
                warm = await client.create_producer("persistent://public/default/warm")
                await warm.send(b"x")
                gc.collect()
                tasks0 = tasks_by_coroutine()
                snap0 = tracemalloc.take_snapshot()

                async def produce(topic: str) -> object:
                    producer = await client.create_producer(topic)
                    await producer.send(b"x" * 100)
                    return producer

                producers = await bounded(produce, topics, 50)
                await asyncio.sleep(2)
                gc.collect()
                tasks1 = tasks_by_coroutine()
                snap1 = tracemalloc.take_snapshot()

                async def consume(topic: str) -> object:
                    consumer = await client.subscribe(topic, "mem", ConsumerType.Exclusive, InitialPosition.Earliest,
                                                      receiver_queue_size=10)
                    message = await consumer.receive(timeout=60)
                    assert message is not None
                    consumer.acknowledge(message)
                    return consumer

                consumers = await bounded(consume, topics, 50)
                await asyncio.sleep(2)
                gc.collect()
                tasks2 = tasks_by_coroutine()
                snap2 = tracemalloc.take_snapshot()
                show(snap0, snap1, n, "per topic with a producer", top)
                show(snap1, snap2, n, "per subscription with a consumer", top)
                print("\n== tasks per topic (producer phase)")
                for name, count in (tasks1 - tasks0).most_common(15):
                    print(f"{count / n:6.2f} {name}")
                print("\n== tasks per subscription")
                for name, count in (tasks2 - tasks1).most_common(15):
                    print(f"{count / n:6.2f} {name}")
                del producers, consumers
        finally:
            await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--frames", type=int, default=30)
    args = parser.parse_args()
    tracemalloc.start(args.frames)
    asyncio.run(run(args.topics, args.top))


if __name__ == "__main__":
    main()
