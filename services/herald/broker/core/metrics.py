"""The broker's Prometheus metrics (served at /metrics by herald.common.http.endpoint). Two kinds:

- histograms observed once per stored entry on the publish path (latency, entry size);
- everything per topic and subscription, read from the topics' own counters and stats at scrape
  time on the broker's event loop (BrokerCollector), so the hot paths count nothing twice.

With topic-level metrics on (`metrics_topic_level`, the default) the per-topic and per-subscription
families carry `topic` (and `subscription`) labels; off, the same families come without labels, as
broker-wide sums, for clusters with too many topics to label. Summing over the labels gives the same
figures either way, so dashboards written with sum() work in both modes. Knows nothing of gRPC."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from herald.broker.core.compaction.metrics import CompactionMetrics
from herald.broker.core.entry_cache import EntryCacheManager
from herald.broker.core.topic_base import Topic
from herald.common.collectors import HotHistogram, LoopCollector, MonotonicCounters

# Send received to receipt ready: sub-millisecond on a page-cached standalone, tens of ms across
# three storage nodes, seconds when storage struggles.
PUBLISH_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# One entry is one producer batch: from a single small message to the 5 MiB default maximum.
ENTRY_SIZE_BUCKETS = (128, 512, 1024, 4096, 16384, 65536, 131072, 262144, 524288, 1048576, 2097152, 5242880)

TOPIC = ("topic",)
SUBSCRIPTION = ("topic", "subscription")


class ServedTopics(Protocol):
    """What a scrape reads: the broker's topics and its entry cache (BrokerService)."""

    entry_cache: EntryCacheManager

    def loaded_topics(self) -> Sequence[Topic[Any]]: ...


class BrokerMetrics:
    """The broker's metrics on `registry` (a fresh one unless an embedding process shares its own):
    the core's BrokerObserver port (topics and producer sessions report to it) and, once watch()
    is given a running broker, the scrape-time collector; unwatch() removes it."""

    def __init__(self, registry: CollectorRegistry | None = None, topic_level: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.topic_level = topic_level
        self.publish_latency = HotHistogram(
            "herald_broker_publish_latency_seconds",
            "Time from a send (one entry) reaching the broker to its receipt being ready: checks, dedup and the "
            "storage write to an ack quorum. Persistent topics, stored entries only.",
            PUBLISH_LATENCY_BUCKETS, self.registry)
        self.entry_size = HotHistogram(
            "herald_broker_entry_size_bytes", "Size of each entry (one producer batch) stored on a persistent topic.",
            ENTRY_SIZE_BUCKETS, self.registry)
        self.throttled_sends = Counter(
            "herald_broker_throttled_sends", "Times a producer stream reached max_pending_sends sends without "
            "receipts and the broker stopped reading it until receipts went out.", registry=self.registry)
        self.compaction = CompactionMetrics(self.registry)
        self._collector: BrokerCollector | None = None

    # ---- the core's BrokerObserver port ----

    def entry_stored(self, latency_seconds: float, size: int) -> None:
        self.publish_latency.observe(latency_seconds)
        self.entry_size.observe(size)

    def sends_throttled(self) -> None:
        self.throttled_sends.inc()

    def compaction_finished(self, result: str, seconds: float, messages_read: int, keys_kept: int,
                            keys_removed: int, entries_written: int, bytes_written: int) -> None:
        self.compaction.finished(result, seconds, messages_read, keys_kept, keys_removed, entries_written,
                                 bytes_written)

    def watch(self, service: ServedTopics, loop: asyncio.AbstractEventLoop) -> None:
        self.unwatch()
        self._collector = BrokerCollector(service, loop, self.topic_level)
        self.registry.register(self._collector)  # type: ignore[arg-type]

    def unwatch(self) -> None:
        collector, self._collector = self._collector, None
        if collector is not None:
            self.registry.unregister(collector)  # type: ignore[arg-type]


# ---- what a scrape reads on the event loop -----------------------------------------------------

@dataclass(slots=True)
class SubscriptionReading:
    owner: object  # the subscription object: counters are per object (MonotonicCounters)
    name: str
    messages_out: int
    bytes_out: int
    redeliveries: int
    backlog_messages: int
    backlog_bytes: int
    consumers: int
    unacked_messages: int
    dispatch_rate: float  # messages/s over the stats window
    dispatch_throughput: float  # bytes/s
    dead_letters: int = 0  # at the dead-letter limit, waiting for a dlq-worker to move them


@dataclass(slots=True)
class TopicReading:
    owner: object
    name: str
    messages_in: int
    bytes_in: int
    dedup_rejections: int
    storage_size: int
    producers: int
    subscriptions: list[SubscriptionReading] = field(default_factory=list)


@dataclass(slots=True)
class BrokerReading:
    topics: list[TopicReading]
    cache_hits: int
    cache_misses: int
    cache_evictions: int
    cache_size: int
    cache_entries: int


def read_broker(service: ServedTopics) -> BrokerReading:
    """Every served topic's figures, from its stats (the admin API's numbers: backlog in messages
    and bytes, rates over the stats window) and counters; of a persistent topic's subscriptions, the
    durable ones. Runs on the event loop."""
    topics = []
    for topic in service.loaded_topics():
        subscriptions = dict(topic.subscriptions)
        stats = topic.stats()
        persistent = topic.persistent
        reading = TopicReading(
            owner=topic, name=topic.name, messages_in=stats.msg_in_counter, bytes_in=stats.bytes_in_counter,
            dedup_rejections=topic.dedup_rejections,
            storage_size=stats.storage_size, producers=len(stats.producers))
        for sub in stats.subscriptions:
            if persistent and not sub.durable:
                continue  # a reader's: randomly named and short-lived, it would make labels unbounded
            owner = subscriptions.get(sub.name)
            reading.subscriptions.append(SubscriptionReading(
                owner=owner, name=sub.name, messages_out=sub.msg_out_counter, bytes_out=sub.bytes_out_counter,
                redeliveries=owner.redelivered_counter if owner is not None else 0, backlog_messages=sub.msg_backlog,
                backlog_bytes=sub.backlog_size, consumers=sub.consumers, unacked_messages=sub.unacked_messages,
                dispatch_rate=sub.msg_rate_out, dispatch_throughput=sub.msg_throughput_out,
                dead_letters=sub.dead_letters))
        topics.append(reading)
    cache = service.entry_cache
    return BrokerReading(topics, cache.hits, cache.misses, cache.evictions, cache.size_bytes, cache.entries)


# ---- what a scrape exports ---------------------------------------------------------------------

# (name, help) of the families with topic / subscription labels, in reading order.
_TOPIC_COUNTERS = (
    ("herald_broker_messages_in_total", "Messages stored on (persistent) or sent through (non-persistent) the "
                                        "topic."),
    ("herald_broker_bytes_in_total", "Bytes of entries stored on or sent through the topic."),
    ("herald_broker_dedup_rejections_total", "Sends answered as duplicates without being stored (deduplication: a "
                                             "producer resent what was already persisted)."),
)
_TOPIC_GAUGES = (
    ("herald_broker_storage_size_bytes", "Bytes of the topic's entries held in storage (its ledgers)."),
    ("herald_broker_producers", "Producers connected to the topic."),
    ("herald_broker_subscriptions", "Subscriptions of the topic (durable ones: readers' are left out)."),
)
_SUBSCRIPTION_COUNTERS = (
    ("herald_broker_messages_out_total", "Messages dispatched to the subscription's consumers."),
    ("herald_broker_bytes_out_total", "Bytes of entries dispatched to the subscription's consumers."),
    ("herald_broker_redeliveries_total", "Entries put back to be delivered again: asked for, negatively "
                                         "acknowledged, or left unacknowledged by a consumer that went away."),
)
_SUBSCRIPTION_GAUGES = (
    ("herald_broker_backlog_messages", "Messages not acknowledged on the subscription (entries times the "
                                       "topic's messages per entry)."),
    ("herald_broker_backlog_bytes", "Bytes not acknowledged on the subscription."),
    ("herald_broker_consumers", "Consumers connected to the subscription."),
    ("herald_broker_unacked_messages", "Messages dispatched to the subscription's consumers and not acknowledged."),
    ("herald_broker_dispatch_messages_per_second", "Messages per second dispatched to the subscription's consumers, "
                                             "over the broker's stats window (stats_rate_window_seconds)."),
    ("herald_broker_dispatch_bytes_per_second", "Bytes per second dispatched to the subscription's consumers, over the "
                                          "stats window."),
    ("herald_broker_dead_letters", "Entries past the subscription's max redelivery count, waiting for a dlq-worker to "
                                   "move them to the dead-letter topic."),
)


class BrokerCollector(LoopCollector[BrokerReading]):
    """The per-topic and per-subscription families, the counts and the entry cache's, read at each
    scrape (read_broker) on the broker's loop."""

    def __init__(self, service: ServedTopics, loop: asyncio.AbstractEventLoop, topic_level: bool) -> None:
        super().__init__(loop)
        self._service = service
        self._topic_level = topic_level
        self._counters = MonotonicCounters()
        self._lock = threading.Lock()  # scrapes may run at once on the endpoint's threads

    async def read(self) -> BrokerReading:
        return read_broker(self._service)

    def read_here(self) -> BrokerReading:
        return read_broker(self._service)

    def families(self, reading: BrokerReading | None) -> Iterable[Metric]:
        with self._lock:
            return self._families(reading)

    def _families(self, reading: BrokerReading | None) -> list[Metric]:
        labels = self._topic_level
        topic_counters = [CounterMetricFamily(n, h, labels=TOPIC if labels else ()) for n, h in _TOPIC_COUNTERS]
        topic_gauges = [GaugeMetricFamily(n, h, labels=TOPIC if labels else ()) for n, h in _TOPIC_GAUGES]
        sub_counters = [CounterMetricFamily(n, h, labels=SUBSCRIPTION if labels else ())
                        for n, h in _SUBSCRIPTION_COUNTERS]
        sub_gauges = [GaugeMetricFamily(n, h, labels=SUBSCRIPTION if labels else ()) for n, h in _SUBSCRIPTION_GAUGES]
        topics = GaugeMetricFamily("herald_broker_topics", "Topics served by this broker (each partition counts).")
        cache: list[CounterMetricFamily | GaugeMetricFamily] = [
            CounterMetricFamily("herald_broker_cache_hits_total", "Entries read from the broker's entry cache."),
            CounterMetricFamily("herald_broker_cache_misses_total",
                                "Entries that were not in the entry cache and were read from storage."),
            CounterMetricFamily("herald_broker_cache_evictions_total",
                                "Entries evicted from the entry cache to stay within entry_cache_max_bytes."),
            GaugeMetricFamily("herald_broker_cache_size_bytes", "Bytes of entries held in the entry cache."),
            GaugeMetricFamily("herald_broker_cache_entries", "Entries held in the entry cache."),
        ]
        everything: list[Metric] = [*topic_counters, *topic_gauges, *sub_counters, *sub_gauges, topics, *cache]
        if reading is None:
            return everything
        counters = self._counters
        counters.begin()
        topic_gauge_sums = [0.0] * len(_TOPIC_GAUGES)
        sub_gauge_sums = [0.0] * len(_SUBSCRIPTION_GAUGES)
        for topic in reading.topics:
            readings = (topic.messages_in, topic.bytes_in, topic.dedup_rejections)
            gauges = (topic.storage_size, topic.producers, len(topic.subscriptions))
            for counter, (name, _), count in zip(topic_counters, _TOPIC_COUNTERS, readings, strict=True):
                total = counters.value(name, topic.owner, count)
                if labels:
                    counter.add_metric([topic.name], total)
            for i, (gauge, level) in enumerate(zip(topic_gauges, gauges, strict=True)):
                topic_gauge_sums[i] += level
                if labels:
                    gauge.add_metric([topic.name], level)
            for sub in topic.subscriptions:
                owner = sub.owner if sub.owner is not None else (topic.owner, sub.name)
                sub_readings = (sub.messages_out, sub.bytes_out, sub.redeliveries)
                sub_values = (sub.backlog_messages, sub.backlog_bytes, sub.consumers, sub.unacked_messages,
                              sub.dispatch_rate, sub.dispatch_throughput, sub.dead_letters)
                for counter, (name, _), count in zip(sub_counters, _SUBSCRIPTION_COUNTERS, sub_readings, strict=True):
                    total = counters.value(name, owner, count)
                    if labels:
                        counter.add_metric([topic.name, sub.name], total)
                for i, (gauge, value) in enumerate(zip(sub_gauges, sub_values, strict=True)):
                    sub_gauge_sums[i] += value
                    if labels:
                        gauge.add_metric([topic.name, sub.name], value)
        counters.end()
        if not labels:
            for counter, (name, _) in zip([*topic_counters, *sub_counters],
                                          [*_TOPIC_COUNTERS, *_SUBSCRIPTION_COUNTERS], strict=True):
                counter.add_metric([], counters.total(name))
            for gauge, total in zip([*topic_gauges, *sub_gauges], [*topic_gauge_sums, *sub_gauge_sums], strict=True):
                gauge.add_metric([], total)
        topics.add_metric([], len(reading.topics))
        for metric, figure in zip(cache, (reading.cache_hits, reading.cache_misses, reading.cache_evictions,
                                          reading.cache_size, reading.cache_entries), strict=True):
            metric.add_metric([], figure)
        return everything
