"""Batch reads through the proxy: every message exactly once with its content and offsets, ranges
given as message ids (cut inside producer batches), several topics and patterns."""

from __future__ import annotations

import datetime

from herald.client.admin import SyncAdminClient
from herald.common.codec.message_id import MessageId
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.spark.helpers import produce, read


def test_a_batch_read_of_10000_messages_gives_each_once_with_its_content_and_id(
    spark: SparkSession, herald: StandaloneProcess,
) -> None:
    topic = unique_topic("spark-batch")
    with SyncAdminClient(herald.proxy_url) as admin:
        admin.create_topic(topic, partitions=3)
    stored = produce(herald.proxy_url, topic, 10_000, batching_max_messages=100)

    frame = read(spark, herald.proxy_url, topic=topic)
    assert frame.rdd.getNumPartitions() == 3  # one Spark partition per topic partition
    rows = frame.collect()

    assert len(rows) == 10_000
    assert {row.message_id: row.value for row in rows} == stored
    for row in rows:
        index = int(row.value[1:])
        message_id = MessageId.from_str(row.message_id)
        assert row.topic == f"{topic}-partition-{message_id.partition}"
        assert row.partition == message_id.partition
        assert row.key == str(index % 10)
        assert row.properties == ({"odd": "yes"} if index % 2 else None)
        expected_event = (datetime.datetime.fromtimestamp((1_700_000_000_000 + index) / 1000, datetime.UTC)
                          if index % 3 == 0 else None)
        assert row.event_time == (None if expected_event is None else expected_event.replace(tzinfo=None))
        assert row.publish_time is not None and row.producer_name


def test_a_range_of_message_ids_reads_exactly_the_messages_from_its_start_to_before_its_end(
    spark: SparkSession, herald: StandaloneProcess,
) -> None:
    topic = unique_topic("spark-range")
    stored = produce(herald.proxy_url, topic, 2_000, batching_max_messages=64)
    ids = sorted(stored, key=MessageId.from_str)
    start, end = ids[100], ids[1_234]  # inside batches: the batch index cuts them
    assert MessageId.from_str(start).batch_index > 0 and MessageId.from_str(end).batch_index > 0

    rows = read(spark, herald.proxy_url, topic=topic, startingOffsets=f'{{"{topic}": "{start}"}}',
                endingOffsets=f'{{"{topic}": "{end}"}}').collect()

    assert sorted((row.message_id for row in rows), key=MessageId.from_str) == ids[100:1_234]


def test_topics_and_topics_pattern_read_every_partition_of_every_topic_named(
    spark: SparkSession, herald: StandaloneProcess,
) -> None:
    first, second = unique_topic("spark-listed"), unique_topic("spark-listed")
    with SyncAdminClient(herald.proxy_url) as admin:
        admin.create_topic(second, partitions=2)
    stored = {**produce(herald.proxy_url, first, 50), **produce(herald.proxy_url, second, 70)}

    listed = read(spark, herald.proxy_url, topics=f"{first},{second}").collect()
    assert {row.message_id: row.value for row in listed} == stored
    assert {row.topic for row in listed} == {first, f"{second}-partition-0", f"{second}-partition-1"}

    prefix = first.rsplit("-", 1)[0]
    pattern = f"{prefix}-({first.rsplit('-', 1)[1]}|{second.rsplit('-', 1)[1]})"
    by_pattern = read(spark, herald.proxy_url, topicsPattern=pattern).collect()
    assert {row.message_id: row.value for row in by_pattern} == stored


def test_latest_start_and_an_empty_topic_read_nothing(spark: SparkSession, herald: StandaloneProcess) -> None:
    topic = unique_topic("spark-empty")
    assert read(spark, herald.proxy_url, topic=topic).count() == 0
    produce(herald.proxy_url, topic, 10)
    assert read(spark, herald.proxy_url, topic=topic, startingOffsets="latest").count() == 0
