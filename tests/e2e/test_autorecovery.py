"""Autorecovery (herald.autorecovery): a drained or dead storage node's entries are re-replicated so
that every entry keeps Qw copies on the other nodes, and the node can then go with nothing lost."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable

from herald.client import AsyncClient, InitialPosition
from herald.client.admin import AdminClient
from herald.common.errors import EntryNotFoundError, InvalidArgumentError, LedgerNotFoundError
from herald.local_cluster import ClusterProcess, LocalCluster
from herald.metadata.redis import RedisMetadataStore
from herald.storage.client.ledger_metadata import LedgerMetadata
from herald.storage.client.storage_client import StorageClient

from tests.conftest import VENV_BIN

TOPICS = [f"drain-{i}" for i in range(4)]
MESSAGES = 60
FAST = {"HERALD_STORAGE_AUTORECOVERY_INTERVAL": "0.5", "HERALD_STORAGE_REGISTRATION_TTL": "2",
        "HERALD_STORAGE_AUTORECOVERY_GRACE": "1"}


async def produce(url: str) -> None:
    async with AsyncClient(url) as client:
        for topic in TOPICS:
            producer = await client.create_producer(topic, batching_enabled=False)  # an entry per message
            for future in [await producer.send_async(b"%s-%d" % (topic.encode(), i)) for i in range(MESSAGES)]:
                await future


async def consume_all(url: str) -> dict[str, list[bytes]]:
    got: dict[str, list[bytes]] = {}
    async with AsyncClient(url) as client:
        for topic in TOPICS:
            consumer = await client.subscribe(topic, "check", initial_position=InitialPosition.Earliest)
            values = got[topic] = []
            while len(values) < MESSAGES and (message := await consumer.receive(timeout=30)) is not None:
                values.append(message.value)
                consumer.acknowledge(message)
    return got


async def ledgers(store: RedisMetadataStore) -> list[LedgerMetadata]:
    return [LedgerMetadata.from_bytes(item.value) for item in (await store.list("/ledgers/")).values()]


async def wait_until_no_ledger_names(store: RedisMetadataStore, address: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while any(address in metadata.all_nodes() for metadata in await ledgers(store)):
        holding = [m.ledger_id for m in await ledgers(store) if address in m.all_nodes()]
        assert time.monotonic() < deadline, f"ledgers {holding} still have entries on {address}"
        await asyncio.sleep(0.2)


async def check_every_entry_on_qw_replicas(store: RedisMetadataStore, lost: str, live: list[str]) -> int:
    """Reads every entry of every ledger from each replica of its write set directly; returns the count."""
    client = StorageClient(store, live, discover=False)
    checked = 0
    try:
        for metadata in await ledgers(store):
            handle = await client.open_ledger(metadata.ledger_id, recover=False)
            entry_id = 0
            while True:  # an open ledger's last entries are beyond the LAC its nodes report: read on
                write_set = handle.metadata.write_set(entry_id)
                assert lost not in write_set and len(write_set) == handle.metadata.write_quorum == 2
                copies = {address: await read_one(client, address, metadata.ledger_id, entry_id)
                          for address in write_set}
                if entry_id > handle.last_add_confirmed and not any(copies.values()):
                    break
                assert all(copies.values()), (metadata.ledger_id, entry_id, write_set)
                assert len(set(copies.values())) == 1
                checked += 1
                entry_id += 1
            if metadata.state == "CLOSED":
                assert entry_id == metadata.last_entry_id + 1
    finally:
        await client.close()
    return checked


async def read_one(client: StorageClient, address: str, ledger_id: int, entry_id: int) -> bytes | None:
    try:
        entries = await client.node(address).read(ledger_id, entry_id, entry_id)
    except (EntryNotFoundError, LedgerNotFoundError):
        return None
    return entries[0][1] if entries else None


def cluster_of_four(make_local_cluster: Callable[..., LocalCluster], herald_env: dict[str, str]) -> LocalCluster:
    cluster = make_local_cluster(brokers=1, storage_nodes=3, ensemble_size=3, write_quorum=2, ack_quorum=2,
                                 extra_env={**herald_env, **FAST})
    cluster.add_storage_node()
    return cluster


def test_a_drained_node_holds_no_needed_entry_and_stops_with_nothing_lost(
    make_local_cluster: Callable[..., LocalCluster], herald_env: dict[str, str],
) -> None:
    cluster = cluster_of_four(make_local_cluster, herald_env)
    asyncio.run(produce(cluster.service_url))
    victim = cluster.storage[0]

    async def drain_and_check() -> int:
        store = RedisMetadataStore(cluster.metadata_url)
        await store.start()
        try:
            async with AdminClient(cluster.service_url) as admin:
                before = {node.address: node for node in await admin.list_storage_nodes()}
                assert before[victim.address].ledgers > 0 and before[victim.address].state == "available"
                drained = await admin.drain_storage_node(victim.address)
                assert drained.state == "draining"
                await wait_until_no_ledger_names(store, victim.address)
                after = {node.address: node for node in await admin.list_storage_nodes()}
                assert (after[victim.address].state, after[victim.address].ledgers) == ("draining", 0)
            return await check_every_entry_on_qw_replicas(
                store, victim.address, [n.address for n in cluster.storage if n is not victim])
        finally:
            await store.close()

    assert asyncio.run(drain_and_check()) >= len(TOPICS) * MESSAGES
    listed = subprocess.run([str(VENV_BIN / "herald"), "admin", "storage", "list", "--url", cluster.service_url],
                            capture_output=True, text=True, env=herald_env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:2] == [victim.address, "draining"] and line.split()[-1] == "0"
               for line in listed.stdout.splitlines()), listed.stdout
    victim.stop()
    got = asyncio.run(consume_all(cluster.service_url))
    assert got == {topic: [b"%s-%d" % (topic.encode(), i) for i in range(MESSAGES)] for topic in TOPICS}


def test_a_dead_node_is_re_replicated_after_its_registration_expires(
    make_local_cluster: Callable[..., LocalCluster], herald_env: dict[str, str],
) -> None:
    cluster = cluster_of_four(make_local_cluster, herald_env)
    asyncio.run(produce(cluster.service_url))

    async def victim_with_ledgers() -> ClusterProcess:
        store = RedisMetadataStore(cluster.metadata_url)
        await store.start()
        try:
            held = {node for m in await ledgers(store) for node in m.all_nodes()}
        finally:
            await store.close()
        return next(node for node in cluster.storage if node.address in held)

    victim = asyncio.run(victim_with_ledgers())
    victim.kill()

    async def check() -> int:
        store = RedisMetadataStore(cluster.metadata_url)
        await store.start()
        try:
            # Open ledgers on the dead node move off it when their writer next writes.
            await produce(cluster.service_url)
            await wait_until_no_ledger_names(store, victim.address)
            return await check_every_entry_on_qw_replicas(
                store, victim.address, [n.address for n in cluster.storage if n is not victim])
        finally:
            await store.close()

    assert asyncio.run(check()) >= 2 * len(TOPICS) * MESSAGES  # produced twice


def test_draining_an_unknown_storage_node_is_refused(make_local_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_local_cluster(brokers=1, storage_nodes=2, ensemble_size=2, write_quorum=2, ack_quorum=2)

    async def drain(address: str) -> str:
        async with AdminClient(cluster.service_url) as admin:
            try:
                await admin.drain_storage_node(address)
            except InvalidArgumentError as exc:
                return str(exc)
        return "accepted"

    assert "neither registered nor named by any ledger" in asyncio.run(drain("127.0.0.1:1"))
    assert "use host:port" in asyncio.run(drain("no-port"))
