"""Progress of the example jobs while they run: a rich progress bar on a terminal, a plain line every
`interval` seconds otherwise (logs, `kubectl logs`), so a long export or a streaming job never looks
stuck. Batch work is read from Spark's status tracker (tasks of the active stages); a streaming query
from its last progress report."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery


class SparkProgress:
    """`with SparkProgress(spark, "export_topic"):` reports the tasks of Spark's active stages until
    the block ends, then one last line with the time it took."""

    def __init__(self, spark: SparkSession, what: str, *, interval: float = 10.0, stream: TextIO | None = None,
                 terminal: bool | None = None) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._what = what
        self._interval = interval
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = self._stream.isatty() if terminal is None else terminal
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{what}-progress", daemon=True)
        self._started = 0.0
        self.tasks_done = 0

    def tasks(self) -> tuple[int, int]:
        """(completed, total) tasks of the stages running now."""
        done = total = 0
        for stage_id in self._tracker.getActiveStageIds():
            info = self._tracker.getStageInfo(stage_id)
            if info is not None:
                done, total = done + info.numCompletedTasks, total + info.numTasks
        return done, total

    def __enter__(self) -> SparkProgress:
        self._started = time.monotonic()
        if not self._terminal:
            print(f"{self._what}: started", file=self._stream, flush=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        outcome = "failed" if error is not None else "done"
        print(f"{self._what}: {outcome} in {time.monotonic() - self._started:.1f}s", file=self._stream, flush=True)

    def _run(self) -> None:
        if self._terminal:
            self._run_bar()
            return
        while not self._stop.wait(self._interval):
            done, total = self.tasks()
            print(f"{self._what}: {done}/{total} tasks of the running stages, "
                  f"{time.monotonic() - self._started:.0f}s elapsed", file=self._stream, flush=True)

    def _run_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=Console(file=self._stream), transient=True) as bar:
            task = bar.add_task(f"{self._what} tasks", total=None)
            while not self._stop.wait(min(self._interval, 0.5)):
                done, total = self.tasks()
                bar.update(task, completed=done, total=total or None)


def watch_query(query: StreamingQuery, what: str, *, interval: int = 30, stream: TextIO | None = None) -> None:
    """Wait for a streaming query to end, printing a line per `interval` on what its last micro-batch
    did (a streaming job runs until stopped: the lines show that it is alive and keeping up). A failed
    query raises its StreamingQueryException here; a query that ends says so in a last line."""
    out = stream if stream is not None else sys.stderr
    while not query.awaitTermination(interval):
        last = query.lastProgress
        if last is None:
            print(f"{what}: waiting for the first micro-batch", file=out, flush=True)
            continue
        print(f"{what}: batch {last['batchId']}: {last['numInputRows']} rows in, "
              f"{float(last.get('processedRowsPerSecond') or 0.0):.1f} rows/s", file=out, flush=True)
    last = query.lastProgress
    print(f"{what}: stopped" + (f" after batch {last['batchId']}" if last is not None else ""), file=out, flush=True)
