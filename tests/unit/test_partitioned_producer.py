"""The partitioned producer's own arithmetic, without a server: each partition's share of the
pending messages, stats added up, and a partition count that went down being ignored. (Everything
that talks to a broker is proven in tests/e2e/test_partitioned_producer.py.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from herald.client.config import ClientConfig, ProducerConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.partitioned_producer import PartitionedProducer, partition_max_pending, sum_stats
from herald.client.producer import AsyncProducer
from herald.client.stats import ProducerStats
from herald.client.topic_producer import TopicProducer

TOPIC = "persistent://public/default/parted"


@pytest.mark.parametrize(("max_pending", "across", "partitions", "expected"), [
    (1000, 50_000, 4, 1000),  # the per-producer limit is the smaller
    (1000, 50_000, 100, 500),  # 50000 / 100
    (1000, 10, 3, 3),  # rounded down
    (1000, 4, 16, 1),  # never below one
])
def test_each_partition_takes_the_smaller_of_max_pending_and_its_share(
    max_pending: int, across: int, partitions: int, expected: int,
) -> None:
    config = ProducerConfig(max_pending_messages=max_pending, max_pending_messages_across_partitions=across)
    assert partition_max_pending(config, partitions) == expected


def stats(sent: int, p50: float, max_ms: float) -> ProducerStats:
    return ProducerStats(messages_sent=sent, bytes_sent=sent * 10, send_failures=1, receipts=sent // 2,
                         pending_messages=2, send_latency_p50_ms=p50, send_latency_p95_ms=p50 * 2,
                         send_latency_p99_ms=p50 * 3, send_latency_p999_ms=p50 * 4, send_latency_max_ms=max_ms)


def test_stats_add_counters_and_keep_the_highest_latencies() -> None:
    total = sum_stats([stats(10, 1.0, 5.0), stats(20, 3.0, 4.0), stats(0, 0.0, 0.0)])
    assert (total.messages_sent, total.bytes_sent, total.send_failures, total.receipts, total.pending_messages) == (
        30, 300, 3, 15, 6)
    assert (total.send_latency_p50_ms, total.send_latency_p99_ms, total.send_latency_max_ms) == (3.0, 9.0, 5.0)


async def test_fewer_partitions_reported_are_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    client_config = ClientConfig("herald://127.0.0.1:1")
    pool = ConnectionPool(client_config)
    lookup = LookupService(pool, client_config)

    def make(topic: str, config: ProducerConfig, max_pending: int) -> AsyncProducer[Any]:
        return TopicProducer(topic, config, client_config, pool, lookup, lambda _p: None,
                             max_pending_messages=max_pending)

    async def reported(topic: str) -> int:
        return 2

    # Made over its partitions' producers (as _start leaves them), without a broker to register with.
    partitions = [make(f"{TOPIC}-partition-{i}", ProducerConfig(), 1000) for i in range(3)]
    producer: PartitionedProducer[bytes] = PartitionedProducer(TOPIC, partitions, ProducerConfig(), make, reported,
                                                               lambda _p: None)
    with caplog.at_level(logging.WARNING, logger="herald.client.partitioned_producer"):
        await producer._grow_to(2)
    assert producer.partitions == tuple(partitions)
    assert "reports 2 partitions, fewer than the 3" in caplog.text
    caplog.clear()
    await producer._grow_to(3)  # unchanged: nothing to do, nothing said
    assert producer.partitions == tuple(partitions) and not caplog.text
    await pool.close(grace=None)
