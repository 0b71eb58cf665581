"""Topic compaction through a real `herald standalone`: `herald admin topics compact` and
`compaction-status` (NOT_RUN, RUNNING, SUCCESS with the compacted ledger, its entries and the
horizon), the compaction's `__compaction` cursor at the horizon, the metrics (runs, keys kept and
removed, bytes written), Pulsar's REST shapes (PUT 204, a second PUT while running 409, GET
{"status", "lastError"}, partitioned topics, compactionThreshold of namespaces and topics) and the
threshold policy compacting a topic by itself. What the compacted ledger holds, key by key, is
checked on the core (tests/integration/test_compaction.py); here the counts prove it: the
compacted entries are exactly the entries holding a key's latest value."""

from __future__ import annotations

import asyncio
import random
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from herald.client import AsyncClient, ConsumerType, InitialPosition
from herald.client.admin import AdminClient
from herald.common.codec.message_id import MessageId
from herald.local_cluster import LocalCluster
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import StandaloneProcess, running_standalone
from tests.e2e.test_admin_cli import AdminCli
from tests.e2e.test_admin_forwarding import owner_of
from tests.helpers import eventually, unique_name, unique_topic
from tests.rest.conftest import V2, Rest


@pytest.fixture(scope="module")
def shared_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Retention's periodic pass (where the compaction threshold is checked) every 0.2 s."""
    with running_standalone(tmp_path_factory.mktemp("compaction") / "data", retention_check_interval=0.2) as server:
        yield server


@pytest.fixture
def cli(shared_standalone: StandaloneProcess) -> AdminCli:
    return AdminCli(shared_standalone.service_url)


@pytest.fixture
async def rest(shared_standalone: StandaloneProcess) -> AsyncIterator[Rest]:
    async with aiohttp.ClientSession() as session:
        yield Rest(shared_standalone.web_url, session)


def metric(server: StandaloneProcess, name: str, **labels: str) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


async def produce(client: AsyncClient, topic: str, messages: int, keys: int, seed: int) -> dict[str, MessageId]:
    """Keyed messages in batches and one by one, a tenth of them deletes (empty values) and some
    without a key; returns where each live key's latest value is."""
    rng = random.Random(seed)
    latest: dict[str, MessageId] = {}
    batched = await client.create_producer(topic, block_if_queue_full=True)
    single = await client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    futures: list[tuple[str | None, bool, asyncio.Future[MessageId]]] = []
    for n in range(messages):
        key = None if rng.random() < 0.02 else f"key-{rng.randrange(keys)}"
        delete = key is not None and rng.random() < 0.1
        producer = single if n % 50 == 0 else batched
        futures.append((key, delete, await producer.send_async(b"" if delete else b"v%d" % n, key=key)))
    stored = sorted([(await future, key, delete) for key, delete, future in futures],
                    key=lambda m: (m[0].ledger_id, m[0].entry_id, m[0].batch_index))  # the topic's order
    for message_id, key, delete in stored:
        if key is None:
            continue
        if delete:
            latest.pop(key, None)
        else:
            latest[key] = message_id
    await batched.close()
    await single.close()
    return latest


def entries_of(latest: dict[str, MessageId]) -> set[tuple[int, int]]:
    return {(m.ledger_id, m.entry_id) for m in latest.values()}


async def test_compact_and_compaction_status_through_the_cli(shared_standalone: StandaloneProcess, cli: AdminCli,
                                                             ) -> None:
    topic = unique_topic("compact")
    async with AsyncClient(shared_standalone.service_url) as client:
        latest = await produce(client, topic, 3000, 200, seed=1)
    assert cli.json("topics", "compaction-status", topic)["status"] == "NOT_RUN"
    runs = metric(shared_standalone, "herald_broker_compaction_runs_total", result="success")
    kept = metric(shared_standalone, "herald_broker_compaction_keys_kept_total")
    written = metric(shared_standalone, "herald_broker_compaction_bytes_written_total")
    assert "compaction of" in cli.run("topics", "compact", topic).stdout

    def succeeded() -> dict[str, Any] | None:
        status: dict[str, Any] = cli.json("topics", "compaction-status", topic)
        return status if status["status"] == "SUCCESS" else None

    status = await eventually(succeeded, "the compaction to succeed")
    assert status["last_error"] == "" and status["pending_ledger_id"] == -1
    assert status["compacted_entries"] == len(entries_of(latest))  # exactly the entries of latest values
    stats = cli.json("topics", "internal-stats", topic)
    horizon = status["horizon"]
    assert horizon == stats["last_confirmed_entry"]
    (cursor,) = [c for c in stats["cursors"] if c["name"] == "__compaction"]
    assert cursor["mark_delete_position"] == horizon and cursor["durable"]
    assert metric(shared_standalone, "herald_broker_compaction_runs_total", result="success") == runs + 1
    assert metric(shared_standalone, "herald_broker_compaction_keys_kept_total") == kept + len(latest)
    assert metric(shared_standalone, "herald_broker_compaction_bytes_written_total") > written
    assert "SUCCESS" in cli.run("topics", "compaction-status", topic).stdout
    # A subscription without read_compacted still sees every message.
    async with AsyncClient(shared_standalone.service_url) as client:
        consumer = await client.subscribe(topic, "all", ConsumerType.Exclusive, InitialPosition.Earliest)
        got = [await consumer.receive() for _ in range(3000)]
        assert len({m.message_id for m in got}) == 3000
        await consumer.close()


async def test_the_rest_api_answers_pulsars_shapes_and_409_while_running(shared_standalone: StandaloneProcess,
                                                                         rest: Rest) -> None:
    topic = unique_topic("rest-compact")
    path = f"{V2}/persistent/{topic.removeprefix('persistent://')}/compaction"
    assert (await rest.get(path)).status == 404  # no such topic yet, and asking made none (issue 22)
    async with AsyncClient(shared_standalone.service_url) as client:
        await produce(client, topic, 60_000, 30_000, seed=2)  # a run long enough to be asked twice
    assert (await rest.get(path)).body == {"status": "NOT_RUN"}
    assert (await rest.put(path)).status == 204
    again = await rest.put(path)
    assert again.status == 409 and "already running" in again.reason
    assert (await rest.get(path)).body == {"status": "RUNNING"}

    async def done() -> Any:
        body = (await rest.get(path)).body
        return body if body["status"] != "RUNNING" else None

    assert await eventually(done, "the compaction to end") == {"status": "SUCCESS"}
    assert (await rest.put(path)).status == 204  # a new run may start once it ended


async def test_a_partitioned_topic_is_compacted_partition_by_partition(shared_standalone: StandaloneProcess,
                                                                       rest: Rest) -> None:
    topic = unique_topic("partitioned-compact")
    async with AdminClient(shared_standalone.service_url) as admin, \
            AsyncClient(shared_standalone.service_url) as client:
        await admin.create_topic(topic, 2)
        await produce(client, topic, 400, 40, seed=3)
        base = f"{V2}/persistent/{topic.removeprefix('persistent://')}"
        assert (await rest.put(f"{base}/compaction")).status == 204
        refused = await rest.get(f"{base}/compaction")
        assert refused.status == 405 and "per partition" in refused.reason

        async def both_done() -> bool:
            return all([(await admin.compaction_status(f"{topic}-partition-{i}")).status == "SUCCESS"
                        for i in range(2)])

        await eventually(both_done, "both partitions to be compacted")
        assert (await rest.get(f"{base}-partition-1/compaction")).body == {"status": "SUCCESS"}


async def test_compaction_threshold_policies_through_rest_and_the_cli(shared_standalone: StandaloneProcess,
                                                                      rest: Rest, cli: AdminCli) -> None:
    tenant, namespace = unique_name("tenant"), unique_name("ns")
    cli.run("tenants", "create", tenant, "--allowed-clusters", "standalone")
    cli.run("namespaces", "create", f"{tenant}/{namespace}")
    ns_path = f"{V2}/namespaces/{tenant}/{namespace}/compactionThreshold"
    assert (await rest.post(ns_path, 1 << 30)).status == 204
    assert (await rest.get(ns_path)).body == 1 << 30
    refused = await rest.post(ns_path, -5)
    assert refused.status == 400 and "compaction_threshold" in refused.reason
    assert (await rest.delete(ns_path)).status == 204
    assert (await rest.get(ns_path)).body is None
    topic = f"persistent://{tenant}/{namespace}/auto"
    topic_path = f"{V2}/persistent/{tenant}/{namespace}/auto/compactionThreshold"
    assert (await rest.post(topic_path, 4096)).status == 204
    assert (await rest.get(topic_path)).body == 4096
    assert (await rest.delete(topic_path)).status == 204
    assert (await rest.get(topic_path)).body is None
    # The CLI flag: past 2 KiB written since the last compaction, the broker compacts by itself.
    cli.run("namespaces", "set-policy", f"{tenant}/{namespace}", "--compaction-threshold", "2K")
    assert cli.json("namespaces", "policies", f"{tenant}/{namespace}")["compaction_threshold"] == 2048
    async with AsyncClient(shared_standalone.service_url) as client:
        latest = await produce(client, topic, 500, 20, seed=4)

    def compacted() -> dict[str, Any] | None:
        status: dict[str, Any] = cli.json("topics", "compaction-status", topic)
        return status if status["status"] == "SUCCESS" else None

    status = await eventually(compacted, "the threshold to start a compaction")
    assert status["compacted_entries"] >= 1 and len(latest) > 0
    cli.run("namespaces", "clear-policy", f"{tenant}/{namespace}", "--compaction-threshold")


async def _compaction_forwarded(cluster: LocalCluster) -> None:
    topic = unique_topic("forwarded-compact")
    parted = unique_topic("forwarded-parted-compact")
    addresses = [broker.address for broker in cluster.brokers]
    async with AsyncClient(cluster.service_url) as client:
        await produce(client, topic, 300, 30, seed=5)
        owner = await owner_of(cluster.lookup.address, topic)
        [other] = [address for address in addresses if address != owner]
        async with AdminClient(other) as admin, AdminClient(owner) as at_owner:
            await admin.compact_topic(topic)  # forwarded to the owner, which runs it

            async def succeeded(where: AdminClient, name: str) -> bool:
                return (await where.compaction_status(name)).status == "SUCCESS"

            await eventually(lambda: succeeded(at_owner, topic), "the owner to compact the topic")
            assert (await admin.compaction_status(topic)).status == "SUCCESS"  # asked elsewhere, answered by it
            # A partitioned topic's partitions are compacted by each one's owner.
            await admin.create_topic(parted, partitions=4)
            partitions = [f"{parted}-partition-{i}" for i in range(4)]
            await produce(client, parted, 400, 40, seed=6)
            assert {await owner_of(cluster.lookup.address, p) for p in partitions} == set(addresses)
            await admin.compact_topic(parted)
            for partition in partitions:
                await eventually(lambda p=partition: succeeded(admin, p), f"{partition} to be compacted")


def test_compaction_calls_are_forwarded_to_each_topics_owner(make_local_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_local_cluster(brokers=2, storage_nodes=1, ensemble_size=1, write_quorum=1, ack_quorum=1)
    asyncio.run(_compaction_forwarded(cluster))
