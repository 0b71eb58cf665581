"""The collectors behind the services' and the client's metrics: the hot-path histogram, counters
kept monotonic over objects that come and go, reads on an event loop at scrape time, the broker's
topic-level switch, the storage node's disk usage and the client's per-producer summary."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from herald.broker.core.metrics import BrokerCollector, BrokerReading, SubscriptionReading, TopicReading
from herald.client import AsyncClient
from herald.client.metrics import ClientMetrics, ClientReading
from herald.client.stats import ConsumerStats, ProducerStats
from herald.common.collectors import HotHistogram, LoopCollector, MonotonicCounters
from herald.storage.node.metrics import disk_usage
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the registry's exposition, by (name, sorted labels)."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def family_samples(metrics: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in metrics for s in family.samples}


# ---- HotHistogram --------------------------------------------------------------------------------

def test_hot_histogram_exports_cumulative_buckets_with_count_and_sum() -> None:
    registry = CollectorRegistry()
    histogram = HotHistogram("herald_test_latency_seconds", "Latency.", (0.001, 0.01, 0.1), registry)
    for value in (0.0005, 0.001, 0.005, 0.05, 0.5):
        histogram.observe(value)
    histogram.observe_many(0.02, 3)
    got = samples(registry)
    bucket = "herald_test_latency_seconds_bucket"
    assert got[(bucket, (("le", "0.001"),))] == 2  # le is inclusive: 0.001 falls in the 0.001 bucket
    assert got[(bucket, (("le", "0.01"),))] == 3
    assert got[(bucket, (("le", "0.1"),))] == 7
    assert got[(bucket, (("le", "+Inf"),))] == 8
    assert got[("herald_test_latency_seconds_count", ())] == 8
    assert got[("herald_test_latency_seconds_sum", ())] == pytest.approx(0.5565 + 0.06)
    assert histogram.count == 8


def test_hot_histogram_refuses_buckets_that_do_not_increase() -> None:
    with pytest.raises(ValueError, match="increasing"):
        HotHistogram("herald_test_seconds", "x", (0.1, 0.01))


# ---- MonotonicCounters ---------------------------------------------------------------------------

def test_a_counter_that_takes_back_a_little_stays_level_until_it_grows_past_its_highest() -> None:
    counters = MonotonicCounters()
    owner = object()
    readings = []
    for value in (10, 7, 9, 12):
        counters.begin()
        readings.append(counters.value("out", owner, value))
        counters.end()
    assert readings == [10, 10, 10, 12]


def test_a_total_keeps_what_objects_that_went_away_had_counted() -> None:
    counters = MonotonicCounters()
    first, second = object(), object()
    counters.begin()
    counters.value("in", first, 100)
    counters.value("in", second, 5)
    counters.end()
    assert counters.total("in") == 105
    counters.begin()
    counters.value("in", second, 8)  # `first` was unloaded
    counters.end()
    assert counters.total("in") == 108
    reloaded = object()  # `first` loaded again: a new object whose counters start at zero
    counters.begin()
    counters.value("in", second, 8)
    assert counters.value("in", reloaded, 3) == 3
    counters.end()
    assert counters.total("in") == 111


# ---- LoopCollector -------------------------------------------------------------------------------

class CountingCollector(LoopCollector[int]):
    """Reads how many times it was read, on the loop; answers on the loop's thread too."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float = 5.0) -> None:
        super().__init__(loop, timeout)
        self.reads = 0
        self.read_on: list[threading.Thread] = []

    async def read(self) -> int:
        self.read_on.append(threading.current_thread())
        self.reads += 1
        return self.reads

    def read_here(self) -> int:
        self.reads += 1
        return self.reads

    def families(self, reading: int | None) -> list[Metric]:
        family = GaugeMetricFamily("herald_test_reads", "Reads.")
        if reading is not None:
            family.add_metric([], reading)
        return [family]


async def test_a_scrape_from_another_thread_reads_on_the_event_loop() -> None:
    registry = CollectorRegistry()
    collector = CountingCollector(asyncio.get_running_loop())
    registry.register(collector)  # type: ignore[arg-type]
    assert collector.reads == 0  # registering describes the families without reading
    got = await asyncio.to_thread(samples, registry)
    assert got[("herald_test_reads", ())] == 1
    assert collector.read_on == [threading.current_thread()]


async def test_a_scrape_on_the_event_loop_thread_is_answered_there() -> None:
    registry = CollectorRegistry()
    collector = CountingCollector(asyncio.get_running_loop())
    registry.register(collector)  # type: ignore[arg-type]
    assert samples(registry)[("herald_test_reads", ())] == 1
    assert collector.read_on == []


def test_a_scrape_the_event_loop_does_not_answer_gets_the_families_without_samples() -> None:
    loop = asyncio.new_event_loop()  # never run: like a stalled loop
    try:
        collector = CountingCollector(loop, timeout=0.2)
        families = collector.collect()
        assert [f.name for f in families] == ["herald_test_reads"] and families[0].samples == []
        loop.run_until_complete(asyncio.sleep(0))  # the abandoned read is cancelled, not left unawaited
    finally:
        loop.close()
    assert collector.collect()[0].samples == []  # a closed loop: not even waited for


# ---- the broker's topic-level switch -------------------------------------------------------------

def broker_reading(topics: list[tuple[object, str, int, list[tuple[object, str, int]]]]) -> BrokerReading:
    return BrokerReading(
        topics=[
            TopicReading(owner=owner, name=name, messages_in=messages_in, bytes_in=messages_in * 100,
                         dedup_rejections=1, storage_size=messages_in * 100, producers=1,
                         subscriptions=[SubscriptionReading(
                             owner=sub_owner, name=sub, messages_out=out, bytes_out=out * 100, redeliveries=2,
                             backlog_messages=messages_in - out, backlog_bytes=(messages_in - out) * 100, consumers=1,
                             unacked_messages=3, dispatch_rate=10.0, dispatch_throughput=1000.0, dead_letters=4)
                             for sub_owner, sub, out in subs])
            for owner, name, messages_in, subs in topics],
        cache_hits=7, cache_misses=2, cache_evictions=0, cache_size=4096, cache_entries=4)


def broker_collector(topic_level: bool) -> BrokerCollector:
    service: Any = None  # families() formats readings: it touches neither the service nor the loop
    loop = asyncio.new_event_loop()
    loop.close()
    return BrokerCollector(service, loop, topic_level)


def test_topic_level_metrics_label_each_topic_and_subscription() -> None:
    a, b, s1, s2 = object(), object(), object(), object()
    collector = broker_collector(topic_level=True)
    got = family_samples(list(collector.families(broker_reading(
        [(a, "persistent://public/default/a", 50, [(s1, "s1", 40)]), (b, "persistent://public/default/b", 5,
                                                                     [(s2, "s2", 5)])]))))
    topic_a = (("topic", "persistent://public/default/a"),)
    assert got[("herald_broker_messages_in_total", topic_a)] == 50
    assert got[("herald_broker_storage_size_bytes", topic_a)] == 5000
    assert got[("herald_broker_subscriptions", topic_a)] == 1
    sub = (("subscription", "s1"), ("topic", "persistent://public/default/a"))
    assert got[("herald_broker_messages_out_total", sub)] == 40
    assert got[("herald_broker_backlog_messages", sub)] == 10
    assert got[("herald_broker_redeliveries_total", sub)] == 2
    assert got[("herald_broker_dispatch_messages_per_second", sub)] == 10.0
    assert got[("herald_broker_dead_letters", sub)] == 4
    assert got[("herald_broker_topics", ())] == 2
    assert got[("herald_broker_cache_hits_total", ())] == 7
    assert ("herald_broker_messages_in_total", ()) not in got


def test_without_topic_level_metrics_the_same_families_are_broker_wide_sums() -> None:
    a, b, s1, s2 = object(), object(), object(), object()
    collector = broker_collector(topic_level=False)
    got = family_samples(list(collector.families(broker_reading(
        [(a, "a", 50, [(s1, "s1", 40)]), (b, "b", 5, [(s2, "s2", 5)])]))))
    assert got[("herald_broker_messages_in_total", ())] == 55
    assert got[("herald_broker_messages_out_total", ())] == 45
    assert got[("herald_broker_backlog_messages", ())] == 10
    assert got[("herald_broker_producers", ())] == 2
    assert got[("herald_broker_consumers", ())] == 2
    assert got[("herald_broker_dead_letters", ())] == 8
    assert not any(dict(labels).keys() & {"topic", "subscription"} for _, labels in got)
    # Topic a unloaded: the broker-wide counters keep what it counted.
    got = family_samples(list(collector.families(broker_reading([(b, "b", 6, [(s2, "s2", 6)])]))))
    assert got[("herald_broker_messages_in_total", ())] == 56
    assert got[("herald_broker_messages_out_total", ())] == 46
    assert got[("herald_broker_backlog_messages", ())] == 0  # gauges are what is there now
    assert got[("herald_broker_topics", ())] == 1


def test_a_subscription_counter_that_takes_back_undelivered_entries_never_decreases() -> None:
    topic, sub = object(), object()
    collector = broker_collector(topic_level=True)
    key = ("herald_broker_messages_out_total", (("subscription", "s"), ("topic", "t")))
    first = family_samples(list(collector.families(broker_reading([(topic, "t", 50, [(sub, "s", 30)])]))))
    second = family_samples(list(collector.families(broker_reading([(topic, "t", 50, [(sub, "s", 27)])]))))
    assert first[key] == second[key] == 30


# ---- the storage node's disk usage ---------------------------------------------------------------

def test_disk_usage_is_counted_by_part_of_the_data_directory(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    (tmp_path / "journal" / "0000000000000001.journal").write_bytes(b"j" * 300)
    (tmp_path / "entrylog").mkdir()
    (tmp_path / "entrylog" / "0000000000000001.entrylog").write_bytes(b"e" * 1000)
    (tmp_path / "index.snapshot").write_bytes(b"i" * 20)
    assert disk_usage(tmp_path) == {"journal": 300, "entry_log": 1000, "index": 20}
    assert disk_usage(tmp_path / "missing") == {"journal": 0, "entry_log": 0, "index": 0}


# ---- the client's collector ----------------------------------------------------------------------

async def test_client_metrics_export_each_producer_and_consumer_with_a_send_latency_summary() -> None:
    client = AsyncClient("herald://127.0.0.1:1")  # connects on first use: never, here
    try:
        collector = ClientMetrics(client)
        producer = ProducerStats(messages_sent=1000, bytes_sent=100_000, send_failures=1, receipts=10,
                                 pending_messages=4, send_latency_p50_ms=2.0, send_latency_p95_ms=5.0,
                                 send_latency_p99_ms=8.0, send_latency_p999_ms=9.0, send_latency_max_ms=9.5,
                                 send_latency_sum_ms=30.0)
        consumer = ConsumerStats(messages_received=990, bytes_received=99_000, acks_sent=9, nacks_sent=1,
                                 receive_failures=0, ack_timeouts=2, dropped_entries=0, queue_size=5, reconnects=1)
        got = family_samples(list(collector.families(ClientReading(
            producers=[(("persistent://public/default/t", "p-1"), producer)],
            consumers=[(("persistent://public/default/t", "sub", "c-1"), consumer)]))))
        assert collector.collect()[0].samples == []  # no producer open yet
    finally:
        await client.close()
    p = (("producer", "p-1"), ("topic", "persistent://public/default/t"))
    c = (("consumer", "c-1"), ("subscription", "sub"), ("topic", "persistent://public/default/t"))
    assert got[("herald_client_producer_messages_sent_total", p)] == 1000
    assert got[("herald_client_producer_pending_messages", p)] == 4
    assert got[("herald_client_producer_send_latency_seconds_count", p)] == 10
    assert got[("herald_client_producer_send_latency_seconds_sum", p)] == pytest.approx(0.03)
    quantile = tuple(sorted((*p, ("quantile", "0.99"))))
    assert got[("herald_client_producer_send_latency_seconds", quantile)] == pytest.approx(0.008)
    assert got[("herald_client_consumer_messages_received_total", c)] == 990
    assert got[("herald_client_consumer_acks_total", c)] == 9
    assert got[("herald_client_consumer_queued_messages", c)] == 5
