"""The read_compacted option: batch and streaming reads of the compacted view (the latest message
per key) up to the compaction horizon, then the log; a topic never compacted is read whole; a bad
value is refused naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest
from herald.client.admin import SyncAdminClient
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.helpers import eventually_sync, unique_topic
from tests.spark.helpers import produce, read


def test_a_bad_read_compacted_value_is_refused_naming_it(spark: SparkSession, herald: StandaloneProcess) -> None:
    with pytest.raises(PySparkException) as failure:
        read(spark, herald.proxy_url, topic="t", read_compacted="maybe").collect()
    assert "option read_compacted='maybe' is invalid: use true or false" in str(failure.value)


def test_read_compacted_on_a_topic_never_compacted_reads_every_message(
    spark: SparkSession, herald: StandaloneProcess,
) -> None:
    topic = unique_topic("spark-rc-plain")
    with SyncAdminClient(herald.proxy_url) as admin:
        admin.create_topic(topic, partitions=2)
    stored = produce(herald.proxy_url, topic, 300, batching_max_messages=16)
    rows = read(spark, herald.proxy_url, topic=topic, read_compacted="true").collect()
    assert {row.message_id: row.value for row in rows} == stored


# ---- after a compaction (needs the compactor: `herald admin topics compact`) ----

def compact(url: str, topic: str) -> None:
    with SyncAdminClient(url) as admin:
        admin.compact_topic(topic)
        eventually_sync(lambda: admin.compaction_status(topic), f"the compaction of {topic}",
                        until=lambda status: status.status == "SUCCESS")


def test_a_batch_read_with_read_compacted_gives_the_latest_value_per_key_then_the_tail(
    spark: SparkSession, herald: StandaloneProcess,
) -> None:
    topic = unique_topic("spark-rc")
    stored = produce(herald.proxy_url, topic, 500, batching_max_messages=32)  # keys i % 10: latest m490..m499
    compact(herald.proxy_url, topic)
    tail = produce(herald.proxy_url, topic, 5, prefix="tail", batching_enabled=False)
    rows = read(spark, herald.proxy_url, topic=topic, read_compacted="true").collect()
    latest = [f"m{i}".encode() for i in range(490, 500)]
    assert sorted(row.value for row in rows) == sorted(latest + list(tail.values()))
    kept = {row.message_id: row.value for row in rows}
    assert all(stored.get(mid, tail.get(mid)) == value for mid, value in kept.items())  # at their original ids
    everything = read(spark, herald.proxy_url, topic=topic).collect()
    assert len(everything) == 505  # without the option: every message


def test_a_stream_with_read_compacted_reads_the_view_then_the_tail(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    topic = unique_topic("spark-rc-stream")
    produce(herald.proxy_url, topic, 200, batching_enabled=False)
    compact(herald.proxy_url, topic)
    tail = produce(herald.proxy_url, topic, 3, prefix="tail", batching_enabled=False)
    query = (
        spark.readStream.format("herald").option("service_url", herald.proxy_url).option("topic", topic)
        .option("startingOffsets", "earliest").option("read_compacted", "true").load()
        .select("message_id", "value")
        .writeStream.format("parquet").option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    values = sorted(row.value for row in spark.read.parquet(str(tmp_path / "out")).collect())
    assert values == sorted([f"m{i}".encode() for i in range(190, 200)] + list(tail.values()))
