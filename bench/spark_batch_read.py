"""Messages per second the `herald` Spark source reads in a batch: a `herald standalone` gets N
messages of --size bytes on a topic of --partitions partitions, then Spark (local[--cores]) reads
them all through the proxy into the noop sink; the clock runs from the read's start (planning
included, Spark's own start-up not) to its end. Appends to bench/results/spark_batch_read.jsonl."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from harness import Standalone, append_result
from herald.client import AsyncClient
from herald.client.admin import AdminClient
from herald_spark import register
from pyspark.sql import SparkSession


async def fill(url: str, topic: str, partitions: int, messages: int, size: int) -> None:
    async with AdminClient(url) as admin:
        await admin.create_topic(topic, partitions=partitions)
    async with AsyncClient(url) as client:
        producer = await client.create_producer(topic, block_if_queue_full=True, batching_max_messages=1000,
                                                max_pending_messages_across_partitions=50_000)
        value = b"x" * size
        last = None
        for _ in range(messages):
            last = await producer.send_async(value)
        await producer.flush()
        assert last is not None
        await last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="Spark local[N]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        standalone = Standalone(base, proxy=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        standalone.start()
        spark = None
        try:
            topic = "persistent://public/default/bench-spark"
            began = time.perf_counter()
            asyncio.run(fill(standalone.service_url, topic, args.partitions, args.messages, args.size))
            produced = time.perf_counter() - began
            spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("herald-bench")
                     .config("spark.ui.enabled", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            proxy = standalone.proxy_url

            def read() -> tuple[float, int]:
                started = time.perf_counter()
                frame = spark.read.format("herald").option("service_url", proxy).option("topic", topic).load()
                frame.write.format("noop").mode("overwrite").save()
                return time.perf_counter() - started, frame.count()

            read()  # warm-up: Python workers started, modules imported
            elapsed, counted = read()
            assert counted == args.messages, f"read {counted} messages of {args.messages}"
        finally:
            if spark is not None:
                spark.stop()
            standalone.stop()
    result = {"bench": "spark_batch_read", "messages": args.messages, "size": args.size,
              "partitions": args.partitions, "spark_cores": args.cores, "seconds": round(elapsed, 3),
              "messages_per_second": round(args.messages / elapsed, 1),
              "mb_per_second": round(args.messages * args.size / elapsed / 1e6, 2),
              "produce_seconds": round(produced, 3)}
    print(json.dumps(append_result("spark_batch_read.jsonl", result)))


if __name__ == "__main__":
    main()
