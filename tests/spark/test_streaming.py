"""Structured Streaming reads: a query run with Trigger.AvailableNow, stopped and restarted from its
checkpoint while messages keep coming and the topic grows a partition, puts every message exactly
once into a file sink; maxMessagesPerTrigger bounds each micro-batch."""

from __future__ import annotations

import threading
from pathlib import Path

from herald.client.admin import SyncAdminClient
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.spark.helpers import produce

LIMIT = 300


def run_until_caught_up(spark: SparkSession, url: str, topic: str, base: Path) -> list[int]:
    """One run of the query from its checkpoint; the input rows of each of its micro-batches."""
    query = (
        spark.readStream.format("herald").option("service_url", url).option("topic", topic)
        .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", str(LIMIT)).load()
        .select("message_id", "value", "partition")
        .writeStream.format("parquet").option("path", str(base / "out"))
        .option("checkpointLocation", str(base / "checkpoint")).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return [progress["numInputRows"] for progress in query.recentProgress]


def test_a_stream_restarted_from_its_checkpoint_reads_every_message_exactly_once(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    topic = unique_topic("spark-stream")
    with SyncAdminClient(herald.proxy_url) as admin:
        admin.create_topic(topic, partitions=2)
    stored = produce(herald.proxy_url, topic, 700, prefix="before-", batching_enabled=False)

    def keep_producing() -> None:
        for round_ in range(12):
            stored.update(produce(herald.proxy_url, topic, 100, prefix=f"during-{round_}-", batching_enabled=False))

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        batches = run_until_caught_up(spark, herald.proxy_url, topic, tmp_path)
        with SyncAdminClient(herald.proxy_url) as admin:
            admin.update_partitions(topic, 3)  # the topic grows while the query is stopped
        stored.update(produce(herald.proxy_url, f"{topic}-partition-2", 150, prefix="new-", batching_enabled=False))
        batches += run_until_caught_up(spark, herald.proxy_url, topic, tmp_path)
    finally:
        producer.join()
    batches += run_until_caught_up(spark, herald.proxy_url, topic, tmp_path)

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    ids = [row.message_id for row in rows]
    assert len(ids) == len(set(ids))  # no message twice
    assert {row.message_id: row.value for row in rows} == stored  # none skipped, none invented
    assert {row.partition for row in rows} == {0, 1, 2}
    assert max(batches) <= LIMIT and sum(batches) == len(stored)
