"""`herald standalone` is the whole system in one process: besides lookup, broker and storage it
runs a proxy (clients may use its URL alone) and a dlq-worker (dead letters are moved with no other
process), and serves every service's metrics at one /metrics endpoint."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.client import AsyncClient, ConsumerType, DeadLetterPolicy, InitialPosition
from herald.client.admin import AdminClient

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import eventually, unique_topic


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with running_standalone(tmp_path_factory.mktemp("whole") / "data", dlq_worker=True) as server:
        yield server


def scrape(standalone: StandaloneProcess) -> str:
    with urllib.request.urlopen(standalone.metrics_url, timeout=10) as reply:
        return str(reply.read().decode())


async def test_a_client_given_only_the_proxy_url_produces_and_consumes(whole: StandaloneProcess) -> None:
    topic = unique_topic("through-proxy")
    async with AsyncClient(whole.proxy_url) as client:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        sent = [await producer.send(f"m{i}".encode()) for i in range(5)]
        got = [await consumer.receive(timeout=10) for _ in range(5)]
        assert [m.message_id for m in got if m is not None] == sent


async def test_the_embedded_dlq_worker_moves_dead_letters(whole: StandaloneProcess) -> None:
    topic = unique_topic("poison")
    async with AsyncClient(whole.service_url) as client:
        await (await client.create_producer(topic)).send(b"poison", key="k")
        consumer = await client.subscribe(
            topic, "handler", ConsumerType.Shared, initial_position=InitialPosition.Earliest,
            negative_ack_redelivery_delay=0.05, dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2))
        dead = await client.subscribe(f"{topic}-handler-DLQ", "inspect", initial_position=InitialPosition.Earliest)
        for _ in range(2):
            message = await consumer.receive(timeout=10)
            assert message is not None
            consumer.negative_acknowledge(message)
        moved = await dead.receive(timeout=30)
        assert moved is not None and (moved.value, moved.key) == (b"poison", "k")
        assert moved.properties["REAL_TOPIC"] == topic and moved.properties["SUBSCRIPTION"] == "handler"
    async with AdminClient(whole.service_url, timeout=20) as admin:
        async def handler_stats() -> tuple[int, int]:
            (sub,) = [s for s in (await admin.topic_stats(topic)).subscriptions if s.name == "handler"]
            return sub.dead_letters, sub.backlog_entries

        await eventually(handler_stats, "the original acknowledged once moved", until=lambda stats: stats == (0, 0))


def test_one_metrics_endpoint_serves_every_embedded_service(whole: StandaloneProcess) -> None:
    samples = {line.split("{")[0].split(" ")[0] for line in scrape(whole).splitlines() if not line.startswith("#")}
    for name in ("herald_proxy_active_connections", "herald_dlq_letters_moved_total",
                 # the broker, the storage node and lookup
                 "herald_broker_publish_latency_seconds_count", "herald_broker_entry_size_bytes_bucket",
                 "herald_broker_topics", "herald_broker_cache_hits_total", "herald_storage_add_latency_seconds_sum",
                 "herald_storage_journal_fsync_latency_seconds_count", "herald_storage_journal_group_records_bucket",
                 "herald_storage_write_bytes_total", "herald_storage_ledgers", "herald_storage_fenced_ledgers",
                 "herald_storage_disk_used_bytes", "herald_lookup_live_brokers", "herald_lookup_lookups_total",
                 "herald_lookup_ownership_assignments_total", "herald_lookup_ownership_reassignments_total"):
        assert name in samples, name


def test_the_command_prints_every_endpoint(whole: StandaloneProcess) -> None:
    log = Path(whole.log_path).read_text()
    for name in ("service URL", "lookup", "broker", "proxy", "storage", "dlq-worker", "metrics"):
        assert f"  {name:12}" in log, name
    assert whole.proxy_url in log and whole.metrics_url in log


async def test_with_local_storage_off_the_broker_stores_through_grpc(tmp_path: Path) -> None:
    # local_storage=false: the broker's adds go through its gRPC stream to the node, as in a
    # cluster (storage/client/local_node.py is the default's path); messages are stored and delivered.
    env = {"HERALD_STANDALONE_LOCAL_STORAGE": "false"}
    with running_standalone(tmp_path / "data", extra_env=env) as server:
        topic = unique_topic("grpc-adds")
        async with AsyncClient(server.service_url) as client:
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
            sent = [await producer.send(f"m{i}".encode()) for i in range(5)]
            got = [await consumer.receive(timeout=10) for _ in range(5)]
            assert [m.message_id for m in got if m is not None] == sent
        assert any(line.startswith("herald_storage_write_entries_total") and float(line.split()[-1]) >= 5
                   for line in scrape(server).splitlines())
