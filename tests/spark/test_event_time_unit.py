"""events_per_minute reads numeric event times in the unit it is told (--event-time-unit, default ms)
and refuses a unit that puts events outside 1971-2200 instead of counting them in the year 56,000."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from herald.client import Client
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

sys.path.insert(0, str(Path(__file__).parents[2] / "spark-jobs" / "jobs"))

import events_per_minute

# 2024-05-01T12:00:00Z, 12:01 and 12:10 (the last closes the first two windows), in milliseconds.
NOON_MS = 1_714_564_800_000
EVENTS = [{"key": "a", "time": NOON_MS + 15_000}, {"key": "a", "time": NOON_MS + 45_000},
          {"key": "b", "time": NOON_MS + 75_000}, {"key": "closer", "time": NOON_MS + 600_000}]


def run(spark: SparkSession, herald: StandaloneProcess, tmp_path: Path, *flags: str) -> list[tuple[str, str, int]]:
    topic = unique_topic("spark-units")
    with Client(herald.proxy_url) as client:
        producer = client.create_producer(topic)
        for event in EVENTS:
            producer.send(json.dumps(event).encode())
    args = events_per_minute.parse([
        "--url", herald.proxy_url, "--topic", topic, "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--watermark", "1 minute", "--available-now", *flags])
    for _ in range(2):  # the watermark moves at the end of a micro-batch: the second run writes what it closed
        events_per_minute.start(spark, args).awaitTermination()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    return sorted((row.window_start.isoformat(), row.key, row["count"]) for row in rows)


def test_unix_milliseconds_are_read_as_milliseconds_by_default(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    assert run(spark, herald, tmp_path) == [("2024-05-01T12:00:00", "a", 2), ("2024-05-01T12:01:00", "b", 1)]


def test_milliseconds_read_as_seconds_fail_the_job_naming_the_unit_flag(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    with pytest.raises(Exception, match=r"read in seconds \(--event-time-unit s\) is not between 1971 and 2200") \
            as failed:
        run(spark, herald, tmp_path, "--event-time-unit", "s")
    assert str(NOON_MS + 15_000) in str(failed.value) or str(NOON_MS) in str(failed.value)
