"""Batch job: a range of a Herald topic -> Parquet, partitioned by the messages' publish date
(date=YYYY-MM-DD directories, UTC). The range is given as offsets (earliest / latest / JSON of
message ids per partition, see docs/spark.md); the count and the last message id read of each
partition are printed. While it runs it shows its progress on stderr (a bar on a terminal, a line
every 10 seconds otherwise).

    spark-submit spark-jobs/jobs/export_topic.py --url herald://herald-proxy:6660 \\
        --topic orders --output /data/orders
"""

from __future__ import annotations

import argparse
import json
import sys

from herald.cli.vocabulary import deprecated_alias
from herald_spark import register
from herald_spark.progress import SparkProgress
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def export(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """Write the range; returns what was read (cached for the summary)."""
    register(spark)
    frame = (spark.read.format("herald").option("service_url", args.service_url).option("topic", args.topic)
             .option("startingOffsets", args.starting_offsets).option("endingOffsets", args.ending_offsets)
             .option("failOnDataLoss", str(args.fail_on_data_loss).lower()).load()
             .withColumn("date", F.date_format(F.col("publish_time"), "yyyy-MM-dd"))).cache()
    frame.write.mode(args.mode).partitionBy("date").parquet(args.output)
    return frame


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    url = parser.add_argument("--url", dest="service_url", required=True, help="herald://host:port (the proxy)")
    deprecated_alias(parser, "--service-url", url)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="Parquet directory")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--ending-offsets", default="latest")
    parser.add_argument("--mode", default="append", choices=["append", "overwrite", "error", "ignore"])
    parser.add_argument("--fail-on-data-loss", default=True, action=argparse.BooleanOptionalAction)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    spark = SparkSession.builder.appName("herald-export-topic").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    with SparkProgress(spark, "export_topic"):  # a bar on a terminal, a line every 10 s in logs
        frame = export(spark, args)
    parts = F.split("message_id", ":")
    order = F.struct(parts[0].cast("long"), parts[1].cast("long"), parts[3].cast("int"), F.col("message_id"))
    summary = frame.groupBy("topic").agg(F.count("*").alias("messages"), F.max(order).alias("last")).collect()
    print(json.dumps({row.topic: {"messages": row.messages, "last_message_id": row.last.message_id}
                      for row in summary}))
    spark.stop()


if __name__ == "__main__":
    main()
