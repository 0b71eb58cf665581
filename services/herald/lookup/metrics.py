"""The lookup service's Prometheus metrics (served at /metrics by herald.common.http.endpoint):
lookups answered, owners assigned, broker registrations and heartbeats, counted as they happen;
the live brokers and what each reported in its last heartbeat, read from the metadata store at
scrape time on lookup's event loop (LookupCollector)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric

from herald.common.collectors import LoopCollector

if TYPE_CHECKING:
    from herald.lookup.registry import BrokerRegistry

OK = "ok"
ERROR = "error"
LOOKUP_METHODS = ("LookupTopic", "GetTopicRoute", "GetPartitionedTopicMetadata")


class LookupMetrics:
    """Every metric of one lookup service, on `registry` (a fresh one unless an embedding process
    shares its own). watch() adds the scrape-time collector of the broker registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        self.lookups = Counter(
            "herald_lookup_lookups_total",
            "Lookup calls answered, by method (LookupTopic, GetTopicRoute, GetPartitionedTopicMetadata) and result "
            "(ok, error).", ["method", "result"], registry=r)
        self.assignments = Counter(
            "herald_lookup_ownership_assignments_total",
            "Topics (partitions) given an owner broker because they had none: first use, or the owner went away.",
            registry=r)
        self.reassignments = Counter(
            "herald_lookup_ownership_reassignments_total",
            "Of the assignments, those of a topic that had an owner before: its broker's lease expired (it died "
            "or stalled), it unloaded the topic, or it restarted.", registry=r)
        self.registrations = Counter(
            "herald_lookup_broker_registrations_total", "Broker registrations (a broker starting or re-registering).",
            registry=r)
        self.heartbeats = Counter(
            "herald_lookup_heartbeats_total",
            "Broker heartbeats, by result (ok; expired: the broker's lease had expired and it must register again).",
            ["result"], registry=r)
        for method in LOOKUP_METHODS:
            for result in (OK, ERROR):
                self.lookups.labels(method, result)
        for result in (OK, "expired"):
            self.heartbeats.labels(result)
        self._collector: LookupCollector | None = None

    def watch(self, brokers: BrokerRegistry, loop: asyncio.AbstractEventLoop) -> None:
        self.unwatch()
        self._collector = LookupCollector(brokers, loop)
        self.registry.register(self._collector)  # type: ignore[arg-type]

    def unwatch(self) -> None:
        collector, self._collector = self._collector, None
        if collector is not None:
            self.registry.unregister(collector)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class BrokerReading:
    broker_id: str
    topics: int  # owned topics, as of its last heartbeat
    msg_rate_in: float
    msg_rate_out: float


class LookupCollector(LoopCollector[list[BrokerReading]]):
    """The live brokers (registered, lease not expired) and their last reported load."""

    def __init__(self, brokers: BrokerRegistry, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._brokers = brokers

    async def read(self) -> list[BrokerReading]:
        return [BrokerReading(b.broker_id, b.owned_topics, b.load.get("msg_rate_in", 0.0),
                              b.load.get("msg_rate_out", 0.0))
                for b in await self._brokers.live_brokers()]

    def families(self, reading: list[BrokerReading] | None) -> Iterable[Metric]:
        live = GaugeMetricFamily("herald_lookup_live_brokers", "Brokers registered with a lease that has not expired.")
        topics = GaugeMetricFamily("herald_lookup_broker_topics",
                                   "Topics each live broker owns, as of its last heartbeat.", labels=["broker"])
        rate_in = GaugeMetricFamily("herald_lookup_broker_msg_rate_in",
                                    "Messages per second each live broker reported receiving in its last heartbeat.",
                                    labels=["broker"])
        rate_out = GaugeMetricFamily("herald_lookup_broker_msg_rate_out",
                                     "Messages per second each live broker reported dispatching in its last heartbeat.",
                                     labels=["broker"])
        if reading is not None:
            live.add_metric([], len(reading))
            for broker in reading:
                topics.add_metric([broker.broker_id], broker.topics)
                rate_in.add_metric([broker.broker_id], broker.msg_rate_in)
                rate_out.add_metric([broker.broker_id], broker.msg_rate_out)
        return [live, topics, rate_in, rate_out]
