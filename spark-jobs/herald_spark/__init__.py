"""Herald's PySpark data source (format `herald`): batch and streaming reads, and writes.

    from herald_spark import register
    register(spark)
    df = (spark.read.format("herald").option("service_url", "herald://herald-proxy:6660")
          .option("topic", "orders").load())

It talks to Herald through herald.client only (the proxy from outside the cluster) and knows
nothing of the services (import-linter keeps it off them). Users' guide: docs/spark.md.

`source` is the `herald` format (batch reader, stream reader, writer), planning on the driver: the
topic partitions (a list or a pattern, through the admin API, and the partitions of each);
`options` checks every option; `offsets` defines offsets (per partition, the id of the first
message not yet read; a range is [start, end)); `trigger_limit` cuts micro-batches for
maxMessagesPerTrigger from the ledger list. Workers read a range with herald.client.reader_pull
(the broker's Pull and GetLastMessageId: no subscription, entries as stored) and unpack them into
Arrow record batches in `rows`, bounding decompression as every consumer does; `reading` tells
trimmed data (failOnDataLoss) from empty ranges by the ledger list. `writing` produces a task's
rows and waits for every receipt. The jobs are in spark-jobs/jobs/, their Kubernetes manifests in
spark-jobs/k8s/."""

from __future__ import annotations

from typing import TYPE_CHECKING

from herald_spark.source import HeraldDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["HeraldDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make format `herald` known to this session."""
    spark.dataSource.register(HeraldDataSource)
