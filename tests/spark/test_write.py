"""Writing rows to topics: value, key, properties and event time round-trip; the topic comes from
the option or from each row's topic column."""

from __future__ import annotations

import datetime

from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType, TimestampType

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.spark.helpers import read

SCHEMA = StructType([
    StructField("value", BinaryType()),
    StructField("key", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("event_time", TimestampType()),
])


def test_rows_written_read_back_with_their_value_key_properties_and_event_time(
    spark: SparkSession, herald: StandaloneProcess,
) -> None:
    topic = unique_topic("spark-written")
    when = datetime.datetime(2024, 5, 1, 12, 30, 15, 250_000)
    rows = [(f"v{i}".encode(), f"k{i % 3}" if i % 4 else None, {"n": str(i)} if i % 2 else None,
             when + datetime.timedelta(seconds=i) if i % 5 else None) for i in range(500)]
    spark.createDataFrame(rows, SCHEMA).repartition(3).write.format("herald") \
        .option("service_url", herald.proxy_url).option("topic", topic).mode("append").save()

    back = read(spark, herald.proxy_url, topic=topic).collect()
    assert sorted((row.value, row.key, row.properties, row.event_time) for row in back) == sorted(
        rows, key=lambda row: row[0])


def test_each_row_goes_to_the_topic_its_topic_column_names(spark: SparkSession, herald: StandaloneProcess) -> None:
    blue, green = unique_topic("spark-blue"), unique_topic("spark-green")
    frame = spark.createDataFrame([(blue if i % 2 else green, f"{i}") for i in range(40)], "topic string, value string")
    frame.write.format("herald").option("service_url", herald.proxy_url).mode("append").save()

    for topic, parity in ((blue, 1), (green, 0)):
        values = {row.value.decode() for row in read(spark, herald.proxy_url, topic=topic).collect()}
        assert values == {str(i) for i in range(40) if i % 2 == parity}
