"""Reading a range whose ledgers retention deleted: failOnDataLoss=true (the default) fails naming
what was lost and the option; false reads what is left."""

from __future__ import annotations

import pytest
from herald.api.v1 import admin_pb2
from herald.client.admin import SyncAdminClient
from herald.common.codec.message_id import MessageId
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from tests.conftest import StandaloneProcess
from tests.helpers import eventually_sync, unique_topic
from tests.spark.conftest import LEDGER_ENTRIES
from tests.spark.helpers import produce, read


def trimmed_topic(herald: StandaloneProcess) -> tuple[str, dict[str, bytes], set[int]]:
    """A topic that kept only its open ledger: its name, what was stored, the ledgers kept."""
    topic = unique_topic("spark-trimmed")
    with SyncAdminClient(herald.proxy_url) as admin:
        admin.set_topic_policies(topic, admin_pb2.Policies(
            retention=admin_pb2.RetentionPolicy(time_seconds=0, size_bytes=0)))
        stored = produce(herald.proxy_url, topic, LEDGER_ENTRIES * 2 + 5, batching_enabled=False)
        kept = eventually_sync(lambda: {ledger.ledger_id for ledger in admin.internal_stats(topic).ledgers},
                               f"retention trimming {topic} to one ledger", until=lambda ledgers: len(ledgers) <= 1)
    return topic, stored, kept


def test_a_range_starting_in_deleted_ledgers_fails_or_skips_as_failondataloss_says(
    spark: SparkSession, herald: StandaloneProcess,
) -> None:
    topic, stored, kept = trimmed_topic(herald)
    first = min(stored, key=MessageId.from_str)
    starting = f'{{"{topic}": "{first}"}}'

    with pytest.raises(PySparkException) as failure:
        read(spark, herald.proxy_url, topic=topic, startingOffsets=starting).collect()
    assert "data loss" in str(failure.value) and "failOnDataLoss=false" in str(failure.value)

    rows = read(spark, herald.proxy_url, topic=topic, startingOffsets=starting, failOnDataLoss="false").collect()
    left = {message_id: value for message_id, value in stored.items()
            if MessageId.from_str(message_id).ledger_id in kept}
    assert left and {row.message_id: row.value for row in rows} == left

    # From the earliest there is nothing to lose: the read starts at what is kept.
    assert read(spark, herald.proxy_url, topic=topic).count() == len(left)
