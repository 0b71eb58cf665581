"""The jobs' progress in its plain form (stderr is not a terminal: logs, kubectl logs): a batch job's
started / tasks / done lines, and a streaming query's line per micro-batch report."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

from herald.client import Client
from herald_spark.progress import SparkProgress, watch_query
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.spark.helpers import produce

sys.path.insert(0, str(Path(__file__).parents[2] / "spark-jobs" / "jobs"))

import events_per_minute
import export_topic


def test_a_batch_job_prints_plain_progress_lines_from_start_to_done(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    topic = unique_topic("spark-progress")
    produce(herald.proxy_url, topic, 100)
    args = export_topic.parse(["--url", herald.proxy_url, "--topic", topic, "--output", str(tmp_path)])
    out = io.StringIO()
    with SparkProgress(spark, "export_topic", interval=0.05, stream=out, terminal=False) as progress:
        export_topic.export(spark, args)
    lines = out.getvalue().splitlines()
    assert lines[0] == "export_topic: started"
    assert re.fullmatch(r"export_topic: done in \d+\.\ds", lines[-1]), lines
    periodic = re.compile(r"export_topic: \d+/\d+ tasks of the running stages, \d+s elapsed")
    assert all(periodic.fullmatch(line) for line in lines[1:-1]), lines
    assert "\x1b" not in out.getvalue()  # no terminal escapes in the plain form
    assert progress.tasks() == (0, 0)  # nothing left running


def test_a_streaming_job_prints_a_line_per_report_until_it_stops(
    spark: SparkSession, herald: StandaloneProcess, tmp_path: Path,
) -> None:
    topic = unique_topic("spark-progress-stream")
    with Client(herald.proxy_url) as client:
        producer = client.create_producer(topic)
        for second in range(5):
            producer.send(json.dumps({"key": "k", "time": f"2024-05-01T12:00:{second:02d}Z"}).encode())
    args = events_per_minute.parse([
        "--url", herald.proxy_url, "--topic", topic, "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--available-now"])
    out = io.StringIO()
    watch_query(events_per_minute.start(spark, args), "events_per_minute", interval=1, stream=out)
    *reports, last = out.getvalue().splitlines()
    line = re.compile(r"events_per_minute: (waiting for the first micro-batch|batch \d+: \d+ rows in, [\d.]+ rows/s)")
    assert all(line.fullmatch(text) for text in reports), reports
    assert re.fullmatch(r"events_per_minute: stopped after batch \d+", last), last
