"""Herald's PySpark data source (format `herald`): batch and streaming reads, and writes.

    from herald_spark import register
    register(spark)
    df = spark.read.format("herald").option("service_url", "herald://herald-proxy:6650") \
        .option("topic", "orders").load()

It talks to Herald through herald.client only (the proxy from outside the cluster) and knows
nothing of the services. See docs/spark.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from herald_spark.source import HeraldDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["HeraldDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make format `herald` known to this session."""
    spark.dataSource.register(HeraldDataSource)
