"""Streaming job: JSON events from a Herald topic -> counts per key per 1-minute event-time window
-> Parquet. An event is {"key": "...", "time": "2024-05-01T12:30:15Z"} (time optional: the
message's event time, else its publish time, is used). A window is written once the watermark
(the latest event time seen minus --watermark) passes its end; the checkpoint makes the output
exactly once across restarts.

    spark-submit spark-jobs/jobs/events_per_minute.py --service-url herald://herald-proxy:6660 \\
        --topic events --output /data/events-per-minute --checkpoint /data/checkpoints/events-per-minute
"""

from __future__ import annotations

import argparse
import sys

from herald_spark import register
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

EVENT = "key string, time timestamp"


def counts(events: DataFrame, watermark: str) -> DataFrame:
    """Herald rows -> (window_start, window_end, key, count), one row per closed window and key."""
    parsed = events.select(
        F.from_json(F.col("value").cast("string"), EVENT).alias("event"), "event_time", "publish_time")
    timed = parsed.select(
        F.coalesce("event.key", F.lit("")).alias("key"),
        F.coalesce("event.time", "event_time", "publish_time").alias("time"))
    return (
        timed.withWatermark("time", watermark)
        .groupBy(F.window("time", "1 minute"), "key").count()
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "key", "count")
    )


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    register(spark)
    reader = (spark.readStream.format("herald").option("service_url", args.service_url)
              .option("topic", args.topic).option("startingOffsets", args.starting_offsets))
    if args.max_messages_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", str(args.max_messages_per_trigger))
    writer = (counts(reader.load(), args.watermark).writeStream.format("parquet").outputMode("append")
              .option("path", args.output).option("checkpointLocation", args.checkpoint)
              .queryName("events_per_minute"))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(
        processingTime=args.trigger_interval)
    return writer.start()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", required=True, help="herald://host:port (the proxy)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="Parquet directory")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--starting-offsets", default="earliest", help="for a new checkpoint (default earliest)")
    parser.add_argument("--watermark", default="2 minutes", help="how late an event may come (default 2 minutes)")
    parser.add_argument("--max-messages-per-trigger", type=int, default=0)
    parser.add_argument("--trigger-interval", default="30 seconds")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    spark = SparkSession.builder.appName("herald-events-per-minute").getOrCreate()
    start(spark, args).awaitTermination()


if __name__ == "__main__":
    main()
