"""Spark tests: one local[2] SparkSession and one `herald standalone` for the whole session (Spark
takes seconds to start). The standalone rolls ledgers over every LEDGER_ENTRIES entries, so reads
cross ledgers, and checks retention every 0.2 s, so a topic whose retention is 0 loses its closed
ledgers within a test's patience."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, StandaloneProcess, running_standalone

# Before pyspark starts its JVM: loopback only, and the workers on this venv's interpreter.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", str(VENV_BIN / "python"))

from herald_spark import register
from pyspark.sql import SparkSession

LEDGER_ENTRIES = 10


@pytest.fixture(scope="session")
def herald(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with running_standalone(
        tmp_path_factory.mktemp("spark") / "data", max_entries_per_ledger=LEDGER_ENTRIES,
        min_ledger_rollover_seconds=0, retention_check_interval=0.2,
    ) as server:
        yield server


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    warehouse: Path = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]").appName("herald-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
