"""Prometheus metrics of a Herald client, for an application to export with its own: ClientMetrics
is a prometheus-client Collector over a Client (or AsyncClient) that reports every producer and
consumer the client has open, from their stats() (herald.client.stats), at each scrape.

    from prometheus_client import REGISTRY, start_http_server
    from herald.client import Client
    from herald.client.metrics import ClientMetrics

    client = Client("herald://localhost:6660")
    REGISTRY.register(ClientMetrics(client))
    start_http_server(8000)

Nothing is counted for it on the send or receive path: the figures are the ones stats() reports.
prometheus-client is imported by this module only, never by the client's own modules."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.samples import Sample

from herald.client.client import AsyncClient
from herald.client.stats import ConsumerStats, ProducerStats
from herald.client.sync.client import Client
from herald.common.collectors import LoopCollector
from herald.common.errors import InvalidArgumentError

PRODUCER = ("topic", "producer")
CONSUMER = ("topic", "subscription", "consumer")
QUANTILES = (("0.5", "send_latency_p50_ms"), ("0.95", "send_latency_p95_ms"), ("0.99", "send_latency_p99_ms"),
             ("0.999", "send_latency_p999_ms"))


@dataclass(frozen=True, slots=True)
class ClientReading:
    producers: list[tuple[tuple[str, str], ProducerStats]]
    consumers: list[tuple[tuple[str, str, str], ConsumerStats]]


def read_client(client: AsyncClient) -> ClientReading:
    """The stats of every open producer and consumer of the client (readers are not reported). Runs
    on the client's event loop."""
    return ClientReading(
        producers=[((p.topic, p.producer_name), p.stats()) for p in list(client._producers)],
        consumers=[((c.topic, c.subscription, c.consumer_name), c.stats()) for c in list(client._consumers)],
    )


class ClientMetrics(LoopCollector[ClientReading]):
    """Register it on a prometheus-client registry to export `client`'s producers and consumers,
    labelled by topic and producer name, or topic, subscription and consumer name. An AsyncClient's
    must be made on the client's event loop (or be given it as `loop`); a blocking Client's reads
    on the client's own thread. A scrape on the AsyncClient's loop itself (an asyncio web server
    serving /metrics) is answered there."""

    def __init__(self, client: Client | AsyncClient, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if isinstance(client, AsyncClient) and loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise InvalidArgumentError(
                    "ClientMetrics(async_client) must be made on the client's event loop, or be given it as "
                    "loop=") from None
        super().__init__(loop)
        self._client = client

    def _core(self) -> AsyncClient | None:
        client = self._client
        if isinstance(client, AsyncClient):
            return None if client.closed else client
        return None if client.closed else client._async

    def event_loop(self) -> asyncio.AbstractEventLoop | None:
        client = self._client
        if isinstance(client, AsyncClient):
            return self._loop
        if client.closed or client._async is None:
            return None  # nothing made yet: nothing to report
        return client._thread.loop

    async def read(self) -> ClientReading:
        core = self._core()
        return read_client(core) if core is not None else ClientReading([], [])

    def read_here(self) -> ClientReading:
        core = self._core()
        return read_client(core) if core is not None else ClientReading([], [])

    def families(self, reading: ClientReading | None) -> Iterable[Metric]:
        def counter(name: str, documentation: str, labels: tuple[str, ...]) -> CounterMetricFamily:
            return CounterMetricFamily(name, documentation, labels=labels)

        sent = counter("herald_client_producer_messages_sent_total", "Messages the broker acknowledged.", PRODUCER)
        sent_bytes = counter("herald_client_producer_bytes_sent_total",
                             "Payload bytes of the messages acknowledged (values with their record framing, before "
                             "compression).", PRODUCER)
        failures = counter("herald_client_producer_send_failures_total",
                           "Messages queued that then failed (send timeout, closed while pending, refused).", PRODUCER)
        receipts = counter("herald_client_producer_receipts_total",
                           "Receipts from the broker: one per entry (a batch, or a chunk).", PRODUCER)
        pending = GaugeMetricFamily("herald_client_producer_pending_messages",
                                    "Messages queued and not yet acknowledged.", labels=PRODUCER)
        latency = SummaryMetricFamily(
            "herald_client_producer_send_latency_seconds",
            "Send latency per entry, from its first message being queued to its receipt; quantiles over the "
            "producer's life (a partitioned producer's: the highest partition's), _sum and _count over every "
            "receipt.", labels=PRODUCER)
        latency_max = GaugeMetricFamily("herald_client_producer_send_latency_max_seconds",
                                        "The highest send latency since the producer was made.", labels=PRODUCER)
        received = counter("herald_client_consumer_messages_received_total",
                           "Messages put on the consumer's receive queue.", CONSUMER)
        received_bytes = counter("herald_client_consumer_bytes_received_total",
                                 "Bytes of the entries that carried the messages received (as stored).", CONSUMER)
        acks = counter("herald_client_consumer_acks_total",
                       "Acknowledgements sent to the broker (one per entry, and one per cumulative ack).", CONSUMER)
        nacks = counter("herald_client_consumer_nacks_total", "negative_acknowledge() calls.", CONSUMER)
        receive_failures = counter("herald_client_consumer_receive_failures_total",
                                   "Receive calls that raised (the consumer closed under them).", CONSUMER)
        ack_timeouts = counter("herald_client_consumer_ack_timeouts_total",
                               "Entries the ack timeout asked the broker to deliver again.", CONSUMER)
        dropped = counter("herald_client_consumer_dropped_entries_total",
                          "Entries that could not be read (corrupt, undecodable) and incomplete chunked messages given "
                          "up on.", CONSUMER)
        reconnects = counter("herald_client_consumer_reconnects_total", "Streams opened after the first.", CONSUMER)
        queued = GaugeMetricFamily("herald_client_consumer_queued_messages",
                                   "Messages waiting on the receive queue for the application.", labels=CONSUMER)
        everything: list[Metric] = [sent, sent_bytes, failures, receipts, pending, latency, latency_max, received,
                                    received_bytes, acks, nacks, receive_failures, ack_timeouts, dropped, reconnects,
                                    queued]
        if reading is None:
            return everything
        for labels, stats in reading.producers:
            values = list(labels)
            sent.add_metric(values, stats.messages_sent)
            sent_bytes.add_metric(values, stats.bytes_sent)
            failures.add_metric(values, stats.send_failures)
            receipts.add_metric(values, stats.receipts)
            pending.add_metric(values, stats.pending_messages)
            latency.add_metric(values, stats.receipts, stats.send_latency_sum_ms / 1000)
            named = dict(zip(PRODUCER, values, strict=True))
            for quantile, field in QUANTILES:
                latency.samples.append(Sample(latency.name, {**named, "quantile": quantile},
                                              _ms(stats, field) / 1000))
            latency_max.add_metric(values, stats.send_latency_max_ms / 1000)
        for consumer_labels, figures in reading.consumers:
            values = list(consumer_labels)
            received.add_metric(values, figures.messages_received)
            received_bytes.add_metric(values, figures.bytes_received)
            acks.add_metric(values, figures.acks_sent)
            nacks.add_metric(values, figures.nacks_sent)
            receive_failures.add_metric(values, figures.receive_failures)
            ack_timeouts.add_metric(values, figures.ack_timeouts)
            dropped.add_metric(values, figures.dropped_entries)
            reconnects.add_metric(values, figures.reconnects)
            queued.add_metric(values, figures.queue_size)
        return everything


def _ms(stats: Any, field: str) -> float:
    return float(getattr(stats, field))
