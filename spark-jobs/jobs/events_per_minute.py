"""Streaming job: JSON events from a Herald topic -> counts per key per 1-minute event-time window
-> Parquet. An event is {"key": "...", "time": "2024-05-01T12:30:15Z"} or {"key": "...", "time":
1714566615000}: an ISO-8601 string, or a number of unix time in --event-time-unit (s, ms or us;
default ms, as Herald's event times). time is optional: the message's event time, else its publish
time, is used. A time that lands outside the years 1971-2200 (a unit mix-up: milliseconds read as
seconds land in the year 56,000) fails the job with an error naming --event-time-unit, rather
than counting nonsense. A window is written once the watermark (the latest event time seen minus
--watermark) passes its end; the checkpoint makes the output exactly once across restarts. It
streams until stopped; --available-now processes what the topic holds now, then stops.

    spark-submit spark-jobs/jobs/events_per_minute.py --url herald://herald-proxy:6660 \\
        --topic events --output /data/events-per-minute --checkpoint /data/checkpoints/events-per-minute
"""

from __future__ import annotations

import argparse
import sys

from herald.cli.vocabulary import deprecated_alias
from herald_spark import register
from herald_spark.progress import watch_query
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

# time as text: from_json would read a number as seconds whatever its unit (see event_time).
EVENT = "key string, time string"
# Seconds per unit of a numeric event time.
UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000}
DEFAULT_UNIT = "ms"
# Plausible event times: 1971-01-01 to 2200-01-01 (unix seconds). Outside, the unit is wrong.
EARLIEST, LATEST = 31_536_000, 7_258_118_400
_NUMBER = r"^-?[0-9]+(\.[0-9]+)?$"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def event_time(text: Column, fallback: Column, unit: str) -> Column:
    """The event's time: `text` (an ISO-8601 string, or a number of `unit`s since the epoch), else
    `fallback` (the message's event or publish time). One outside EARLIEST..LATEST fails the query
    (raise_error) with the value, the unit it was read in, and the flag that sets the unit."""
    seconds = F.when(text.rlike(_NUMBER), text.cast("decimal(38,6)") / F.lit(UNITS[unit])).otherwise(
        F.unix_micros(text.try_cast("timestamp")) / F.lit(1_000_000))
    seconds = F.coalesce(seconds, F.unix_micros(fallback) / F.lit(1_000_000))
    refused = F.raise_error(F.format_string(
        "event time %s read in %s (--event-time-unit %s) is not between 1971 and 2200: give the unit of "
        "the events' numeric times with --event-time-unit s|ms|us", F.coalesce(text, fallback.cast("string")),
        F.lit({"s": "seconds", "ms": "milliseconds", "us": "microseconds"}[unit]), F.lit(unit)))
    plausible = seconds.isNull() | seconds.between(EARLIEST, LATEST)
    checked = F.when(plausible, seconds).otherwise(refused.cast("decimal(38,6)"))
    return F.timestamp_micros((checked * F.lit(1_000_000)).cast("long"))


def counts(events: DataFrame, watermark: str, unit: str = DEFAULT_UNIT) -> DataFrame:
    """Herald rows -> (window_start, window_end, key, count), one row per closed window and key."""
    parsed = events.select(
        F.from_json(F.col("value").cast("string"), EVENT).alias("event"), "event_time", "publish_time")
    timed = parsed.select(
        F.coalesce("event.key", F.lit("")).alias("key"),
        event_time(F.col("event.time"), F.coalesce("event_time", "publish_time"), unit).alias("time"))
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
    events = counts(reader.load(), args.watermark, args.event_time_unit)
    writer = (events.writeStream.format("parquet").outputMode("append")
              .option("path", args.output).option("checkpointLocation", args.checkpoint)
              .queryName("events_per_minute"))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(
        processingTime=args.trigger_interval)
    return writer.start()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    url = parser.add_argument("--url", dest="service_url", required=True, help="herald://host:port (the proxy)")
    deprecated_alias(parser, "--service-url", url)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="Parquet directory")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--starting-offsets", default="earliest", help="for a new checkpoint (default earliest)")
    parser.add_argument("--watermark", default="2 minutes", help="how late an event may come (default 2 minutes)")
    parser.add_argument("--max-messages-per-trigger", type=int, default=0)
    parser.add_argument("--trigger-interval", default="30 seconds")
    parser.add_argument("--event-time-unit", choices=sorted(UNITS), default=DEFAULT_UNIT,
                        help="unit of numeric event times in the JSON's time field: s, ms or us (default ms); "
                             "ISO-8601 strings need none")
    parser.add_argument("--available-now", action="store_true",
                        help="process what the topic holds now, write the windows it closes, then stop "
                             "(without it the job streams until stopped)")
    return parser.parse_args(argv)


def local_state_partitions(master: str, configured: bool, cores: int) -> int | None:
    """How many partitions the count's state should have when the user set none: one per core in
    local mode. Each is a task in every micro-batch, and Spark's default (200) is sized for a
    cluster: a local run (a laptop, `make spark-events-per-minute`) would spend most of each batch on
    empty tasks. None: keep Spark's setting. The first run's count stays in the checkpoint."""
    return cores if master.startswith("local") and not configured else None


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    spark = SparkSession.builder.appName("herald-events-per-minute").getOrCreate()
    context = spark.sparkContext
    partitions = local_state_partitions(context.master, context.getConf().contains(SHUFFLE_PARTITIONS),
                                        context.defaultParallelism)
    if partitions is not None:
        spark.conf.set(SHUFFLE_PARTITIONS, str(partitions))
    watch_query(start(spark, args), "events_per_minute")  # a line per 30 s on stderr: alive and keeping up


if __name__ == "__main__":
    main()
