"""Prometheus metrics of the broker, storage node and lookup service, as a scraper sees them: a
running standalone's one /metrics endpoint after a produce-consume (every family with live values
and the right labels), the broker's topic-level switch, each service as its own process serving its
own /metrics, and the client's collector an application registers."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from herald.client import AsyncClient, Client, ConsumerType, InitialPosition
from herald.client.admin import AdminClient
from herald.client.metrics import ClientMetrics
from herald.common.codec.message_id import MessageId
from herald.local_cluster import LocalCluster
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import unique_topic

DEADLINE = 30.0
EARLIEST = InitialPosition.Earliest
Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def parse(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return parse(reply.read().decode())


def labels(**values: str) -> Labels:
    return tuple(sorted(values.items()))


async def scrape_until(url: str, checks: dict[str, Callable[[Samples], bool]]) -> Samples:
    """Scrape until every check has passed on some scrape (a deadline, not a sleep); the last scrape."""
    passed: set[str] = set()
    deadline = time.monotonic() + DEADLINE
    while True:
        samples = await asyncio.to_thread(scrape, url)
        passed |= {name for name, check in checks.items() if check(samples)}
        if passed == set(checks):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"never seen on {url}: {sorted(set(checks) - passed)}")
        await asyncio.sleep(0.2)


async def drain(consumer: object, count: int) -> list[object]:
    received = []
    while len(received) < count:
        message = await consumer.receive(timeout=DEADLINE)  # type: ignore[attr-defined]
        assert message is not None, f"only {len(received)} of {count} messages arrived"
        received.append(message)
    return received


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with running_standalone(tmp_path_factory.mktemp("metered") / "data") as server:
        yield server


# ---- one standalone, every family --------------------------------------------------------------

async def test_after_a_produce_consume_every_family_shows_live_values_with_its_labels(
    metered: StandaloneProcess,
) -> None:
    topic = unique_topic("flow")
    sub = (("subscription", "shared"), ("topic", topic))
    async with AsyncClient(metered.service_url) as client, AdminClient(metered.service_url, timeout=20) as admin:
        producer = await client.create_producer(topic, producer_name="metered-producer")
        for future in [await producer.send_async(b"early-%d" % i) for i in range(10)]:
            await future
        # Unloaded: its entry cache goes (the Shared consumer below reads these entries from storage)
        # and the producer's next lookup gives the topic an owner again (a reassignment).
        await admin.unload_topic(topic)
        for future in [await producer.send_async(b"late-%d" % i) for i in range(90)]:
            await future
        duplicate = await producer.send(b"again", sequence_id=producer.last_sequence_id)
        assert (duplicate.ledger_id, duplicate.entry_id) == (-1, -1)  # deduplicated
        await admin.create_subscription(topic, "idle", EARLIEST)  # a backlog nobody reads
        consumer = await client.subscribe(topic, "shared", consumer_type=ConsumerType.Shared,
                                          initial_position=EARLIEST, negative_ack_redelivery_delay=0.1)
        received = await drain(consumer, 100)
        consumer.negative_acknowledge(received[0])  # comes back: a redelivery
        (again,) = await drain(consumer, 1)
        for message in [*received[1:], again]:
            consumer.acknowledge(message)

        def value(name: str, *label_pairs: tuple[str, str]) -> Callable[[Samples], float]:
            return lambda samples: samples.get((name, tuple(sorted(label_pairs))), 0.0)

        topic_label = ("topic", topic)
        checks: dict[str, Callable[[Samples], bool]] = {
            # broker, per topic and subscription (the topic's counters started again when it was loaded
            # again after the unload: 90 messages since)
            "messages in": lambda s: value("herald_broker_messages_in_total", topic_label)(s) == 90,
            "bytes in": lambda s: value("herald_broker_bytes_in_total", topic_label)(s) > 0,
            "messages out": lambda s: value("herald_broker_messages_out_total", *sub)(s) >= 101,
            "bytes out": lambda s: value("herald_broker_bytes_out_total", *sub)(s) > 0,
            # Entries times the messages per entry seen since the topic was loaded: an estimate.
            "backlog messages": lambda s: value("herald_broker_backlog_messages", topic_label,
                                                ("subscription", "idle"))(s) > 0,
            "backlog bytes": lambda s: value("herald_broker_backlog_bytes", topic_label,
                                             ("subscription", "idle"))(s) > 0,
            "acknowledged backlog": lambda s: (("herald_broker_backlog_messages", sub) in s
                                               and value("herald_broker_backlog_messages", *sub)(s) == 0),
            "storage size": lambda s: value("herald_broker_storage_size_bytes", topic_label)(s) > 0,
            "producers": lambda s: value("herald_broker_producers", topic_label)(s) == 1,
            "subscriptions": lambda s: value("herald_broker_subscriptions", topic_label)(s) == 2,
            "consumers": lambda s: value("herald_broker_consumers", *sub)(s) == 1,
            "dedup rejections": lambda s: value("herald_broker_dedup_rejections_total", topic_label)(s) == 1,
            "redeliveries": lambda s: value("herald_broker_redeliveries_total", *sub)(s) >= 1,
            "dispatch rate": lambda s: value("herald_broker_dispatch_messages_per_second", *sub)(s) > 0,
            "dispatch throughput": lambda s: value("herald_broker_dispatch_bytes_per_second", *sub)(s) > 0,
            # broker-wide
            "publish latency": lambda s: value("herald_broker_publish_latency_seconds_count")(s) >= 1,
            "publish latency buckets": lambda s: value("herald_broker_publish_latency_seconds_bucket",
                                                       ("le", "+Inf"))(s) >= 1,
            "entry size": lambda s: value("herald_broker_entry_size_bytes_sum")(s) > 0,
            "topics": lambda s: value("herald_broker_topics")(s) >= 1,
            "cache hits": lambda s: value("herald_broker_cache_hits_total")(s) > 0,
            "cache misses": lambda s: value("herald_broker_cache_misses_total")(s) > 0,
            "cache size": lambda s: value("herald_broker_cache_size_bytes")(s) > 0,
            # storage
            "add latency": lambda s: value("herald_storage_add_latency_seconds_count")(s) >= 1,
            "read latency": lambda s: value("herald_storage_read_latency_seconds_count")(s) >= 1,
            "fsync latency": lambda s: value("herald_storage_journal_fsync_latency_seconds_count")(s) >= 1,
            "group size": lambda s: value("herald_storage_journal_group_records_sum")(s) >= 1,
            "group bytes": lambda s: value("herald_storage_journal_group_bytes_sum")(s) > 0,
            "bytes written": lambda s: value("herald_storage_write_bytes_total")(s) > 0,
            "entries written": lambda s: value("herald_storage_write_entries_total")(s) >= 1,
            "bytes read": lambda s: value("herald_storage_read_bytes_total")(s) > 0,
            "ledgers": lambda s: value("herald_storage_ledgers")(s) >= 2,  # one before the unload, one after
            "fenced ledgers": lambda s: ("herald_storage_fenced_ledgers", ()) in s,
            "journal on disk": lambda s: value("herald_storage_disk_used_bytes", ("part", "journal"))(s) > 0,
            "entry logs on disk": lambda s: value("herald_storage_disk_used_bytes", ("part", "entry_log"))(s) > 0,
            "disk free": lambda s: value("herald_storage_disk_free_bytes")(s) > 0,
            # lookup
            "live brokers": lambda s: value("herald_lookup_live_brokers")(s) == 1,
            "lookups": lambda s: value("herald_lookup_lookups_total", ("method", "LookupTopic"),
                                       ("result", "ok"))(s) >= 2,
            "assignments": lambda s: value("herald_lookup_ownership_assignments_total")(s) >= 2,
            "reassignments": lambda s: value("herald_lookup_ownership_reassignments_total")(s) >= 1,
            "registrations": lambda s: value("herald_lookup_broker_registrations_total")(s) >= 1,
            "heartbeats": lambda s: value("herald_lookup_heartbeats_total", ("result", "ok"))(s) >= 1,
            "owned topics": lambda s: value("herald_lookup_broker_topics", ("broker", "standalone"))(s) >= 1,
        }
        await scrape_until(metered.metrics_url, checks)
        await consumer.close()
        await producer.close()


async def test_a_reader_adds_no_subscription_series(metered: StandaloneProcess) -> None:
    topic = unique_topic("read")
    async with AsyncClient(metered.service_url) as client:
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        reader = await client.create_reader(topic, MessageId.earliest)
        assert await reader.read_next(timeout=DEADLINE) is not None
        samples = await asyncio.to_thread(scrape, metered.metrics_url)
        assert samples[("herald_broker_subscriptions", labels(topic=topic))] == 0
        assert not [key for key in samples if ("topic", topic) in key[1] and any(k == "subscription"
                                                                                 for k, _ in key[1])]
        await reader.close()


# ---- no topic-level labels -----------------------------------------------------------------------

async def test_without_topic_level_metrics_the_broker_exports_broker_wide_sums(tmp_path: Path) -> None:
    with running_standalone(tmp_path / "data", metrics_topic_level=False) as server:
        topic = unique_topic("wide")
        async with AsyncClient(server.service_url) as client:
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
            for future in [await producer.send_async(b"%d" % i) for i in range(20)]:
                await future
            for message in await drain(consumer, 20):
                consumer.acknowledge(message)  # type: ignore[arg-type]
            samples = await scrape_until(server.metrics_url, {
                "messages in": lambda s: s.get(("herald_broker_messages_in_total", ()), 0) == 20,
                "messages out": lambda s: s.get(("herald_broker_messages_out_total", ()), 0) == 20,
                "producers": lambda s: s.get(("herald_broker_producers", ()), 0) == 1,
                "consumers": lambda s: s.get(("herald_broker_consumers", ()), 0) == 1,
            })
        labelled = [key for key in samples if key[0].startswith("herald_broker_")
                    and {name for name, _ in key[1]} & {"topic", "subscription"}]
        assert labelled == []


# ---- a crash: the new owner fences the ledger --------------------------------------------------

async def test_a_ledger_recovered_after_a_crash_is_counted_as_fenced(standalone: StandaloneProcess) -> None:
    topic = unique_topic("crash")
    async with AsyncClient(standalone.service_url) as client:
        producer = await client.create_producer(topic)
        await producer.send(b"before")
    standalone.kill()  # the ledger is left open
    standalone.start()
    async with AsyncClient(standalone.service_url) as client:
        producer = await client.create_producer(topic)  # loads the topic: recovers (fences) the open ledger
        await producer.send(b"after")
    await scrape_until(standalone.metrics_url, {
        "fenced ledgers": lambda s: s.get(("herald_storage_fenced_ledgers", ()), 0) >= 1,
    })


# ---- each service on its own -------------------------------------------------------------------

async def test_each_service_process_serves_its_own_metrics(make_local_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_local_cluster(brokers=1, storage_nodes=1, ensemble_size=1, write_quorum=1, ack_quorum=1)
    topic = unique_topic("apart")
    async with AsyncClient(cluster.service_url) as client:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
        for future in [await producer.send_async(b"%d" % i) for i in range(30)]:
            await future
        for message in await drain(consumer, 30):
            consumer.acknowledge(message)  # type: ignore[arg-type]

        def url(process: str) -> str:
            return f"http://127.0.0.1:{cluster.process(process).metrics_port}/metrics"

        broker = await scrape_until(url("broker-0"), {
            "messages in": lambda s: s.get(("herald_broker_messages_in_total", labels(topic=topic)), 0) == 30,
            "messages out": lambda s: s.get(("herald_broker_messages_out_total",
                                             labels(topic=topic, subscription="s")), 0) == 30,
        })
        storage = await scrape_until(url("storage-0"), {
            "bytes written": lambda s: s.get(("herald_storage_write_bytes_total", ()), 0) > 0,
            "add latency": lambda s: s.get(("herald_storage_add_latency_seconds_count", ()), 0) >= 1,
        })
        lookup = await scrape_until(url("lookup"), {
            "live brokers": lambda s: s.get(("herald_lookup_live_brokers", ()), 0) == 1,
            "heartbeats": lambda s: s.get(("herald_lookup_heartbeats_total", (("result", "ok"),)), 0) >= 1,
            "assignments": lambda s: s.get(("herald_lookup_ownership_assignments_total", ()), 0) >= 1,
        })
    for samples, own in ((broker, "herald_broker_"), (storage, "herald_storage_"), (lookup, "herald_lookup_")):
        services = {name.split("_")[1] for name, _ in samples if name.startswith("herald_")}
        assert services == {own.split("_")[1]}, services
    assert any(name == "http://127.0.0.1:%d/metrics" % cluster.process("broker-0").metrics_port  # noqa: UP031
               for _, name in cluster.describe())


# ---- the client's collector ---------------------------------------------------------------------

async def test_the_client_collector_exports_its_producers_and_consumers(metered: StandaloneProcess) -> None:
    topic = unique_topic("client")
    registry = CollectorRegistry()
    async with AsyncClient(metered.service_url) as client:
        registry.register(ClientMetrics(client))  # type: ignore[arg-type]
        producer = await client.create_producer(topic, producer_name="app-producer")
        consumer = await client.subscribe(topic, "app", consumer_name="app-consumer", initial_position=EARLIEST,
                                          ack_group_time=0)
        for future in [await producer.send_async(b"%d" % i) for i in range(40)]:
            await future
        for message in await drain(consumer, 40):
            consumer.acknowledge(message)  # type: ignore[arg-type]
        # Scraped from another thread, as an HTTP server would; read on the client's loop.
        samples = parse((await asyncio.to_thread(generate_latest, registry)).decode())
    p = labels(topic=topic, producer="app-producer")
    c = labels(topic=topic, subscription="app", consumer="app-consumer")
    assert samples[("herald_client_producer_messages_sent_total", p)] == 40
    assert samples[("herald_client_producer_bytes_sent_total", p)] > 0
    assert samples[("herald_client_producer_pending_messages", p)] == 0
    receipts = samples[("herald_client_producer_receipts_total", p)]
    assert receipts >= 1 and samples[("herald_client_producer_send_latency_seconds_count", p)] == receipts
    assert samples[("herald_client_producer_send_latency_seconds_sum", p)] > 0
    assert samples[("herald_client_producer_send_latency_seconds", labels(**dict(p), quantile="0.99"))] > 0
    assert samples[("herald_client_consumer_messages_received_total", c)] == 40
    assert samples[("herald_client_consumer_acks_total", c)] >= 1
    assert samples[("herald_client_consumer_queued_messages", c)] == 0


def test_the_client_collector_exports_a_blocking_clients_producers(metered: StandaloneProcess) -> None:
    topic = unique_topic("blocking")
    registry = CollectorRegistry()
    client = Client(metered.service_url)
    try:
        registry.register(ClientMetrics(client))  # type: ignore[arg-type]
        assert parse(generate_latest(registry).decode()) == {}  # nothing made yet
        producer = client.create_producer(topic, producer_name="blocking-producer")
        producer.send(b"one")
        producer.send(b"two")
        samples = parse(generate_latest(registry).decode())
    finally:
        client.close()
    sent = labels(topic=topic, producer="blocking-producer")
    assert samples[("herald_client_producer_messages_sent_total", sent)] == 2
    assert parse(generate_latest(registry).decode()) == {}  # closed: nothing to report
