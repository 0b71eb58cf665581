"""The example jobs, run in this session on real topics: the export lays Parquet out by date, the
streaming job counts events per key per minute."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from herald.client import Client
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.spark.helpers import produce

sys.path.insert(0, str(Path(__file__).parents[2] / "spark-jobs" / "jobs"))

import events_per_minute
import export_topic


def test_export_topic_writes_the_range_as_parquet_partitioned_by_date(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    topic = unique_topic("spark-export")
    stored = produce(herald.proxy_url, topic, 300)
    args = export_topic.parse(["--url", herald.proxy_url, "--topic", topic, "--output", str(tmp_path)])
    export_topic.export(spark, args)

    dates = [path.name for path in tmp_path.iterdir() if path.is_dir()]
    assert dates and all(name.startswith("date=20") for name in dates)
    rows = spark.read.parquet(str(tmp_path)).collect()
    assert {row.message_id: row.value for row in rows} == stored


def test_events_per_minute_counts_each_key_per_closed_window(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    topic = unique_topic("spark-events")
    events = [{"key": key, "time": f"2024-05-01T12:{minute:02d}:{second:02d}Z"}
              for minute in range(3) for key in ("a", "b") for second in range(0, 60, 20 if key == "a" else 30)]
    events.append({"key": "late-closer", "time": "2024-05-01T12:10:00Z"})  # moves the watermark past them all
    with Client(herald.proxy_url) as client:
        producer = client.create_producer(topic)
        for event in events:
            producer.send(json.dumps(event).encode())
    args = events_per_minute.parse([
        "--url", herald.proxy_url, "--topic", topic, "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--watermark", "1 minute", "--available-now"])
    events_per_minute.start(spark, args).awaitTermination()
    # The watermark moves at the end of a micro-batch: a second run emits the windows it closed.
    events_per_minute.start(spark, args).awaitTermination()

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    counts = {(row.window_start.minute, row.key): row["count"] for row in rows}
    assert counts == {(minute, key): 3 if key == "a" else 2 for minute in range(3) for key in ("a", "b")}


def test_the_jobs_refuse_missing_arguments() -> None:
    for job in (export_topic, events_per_minute):
        try:
            job.parse(["--topic", "t"])
        except SystemExit as exit_:
            assert exit_.code == 2
        else:
            raise AssertionError(f"{job.__name__} accepted no --url")



def test_a_local_run_keeps_its_state_in_one_partition_per_core_unless_the_user_chose() -> None:
    assert events_per_minute.local_state_partitions("local[*]", configured=False, cores=2) == 2
    assert events_per_minute.local_state_partitions("local[4]", configured=False, cores=4) == 4
    # The user's spark.sql.shuffle.partitions, and any cluster, keep Spark's setting.
    assert events_per_minute.local_state_partitions("local[*]", configured=True, cores=2) is None
    assert events_per_minute.local_state_partitions("k8s://https://api:6443", configured=False, cores=8) is None
