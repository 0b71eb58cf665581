"""A storage node's registration (storage.node.registration), the client's view of it
(storage.client.node_registry) and the node's ledger garbage collector (storage.node.gc), on the
embedded metadata store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from herald.common.errors import InvalidArgumentError
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.storage.client.node_registry import NodeRegistry
from herald.storage.membership import mark_draining, registered_nodes
from herald.storage.node.gc import LedgerGarbageCollector
from herald.storage.node.ledger_store import LedgerStore
from herald.storage.node.registration import NodeRegistration
from herald.storage.node.settings import StorageSettings


async def until(check: object, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_a_registration_ttl_not_positive_or_a_negative_interval_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="registration_ttl 0 must be > 0 seconds"):
        StorageSettings(registration_ttl=0)
    for name in ("autorecovery_interval", "autorecovery_grace", "gc_interval", "gc_grace"):
        with pytest.raises(InvalidArgumentError, match=f"storage {name} -1 must be >= 0 seconds"):
            StorageSettings(**{name: -1})


async def test_registered_nodes_are_followed_and_a_draining_one_is_not_available(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    registry = NodeRegistry(store, lambda _: None)
    await registry.start()
    first = NodeRegistration(store, "127.0.0.1:4001", str(tmp_path), ttl=5.0)
    second = NodeRegistration(store, "127.0.0.1:4002", str(tmp_path), ttl=5.0)
    try:
        await first.start()
        await second.start()
        await until(lambda: registry.available() == ["127.0.0.1:4001", "127.0.0.1:4002"], "both registered")
        assert (await registered_nodes(store))["127.0.0.1:4001"].free_bytes > 0

        marked = await mark_draining(store, "127.0.0.1:4002")
        assert marked is not None and marked.state == "draining"
        await until(lambda: registry.available() == ["127.0.0.1:4001"], "the draining node left out")
        # The mark outlives the lease: registering again keeps the node draining.
        await second.stop()
        await until(lambda: "127.0.0.1:4002" not in registry.records, "the stopped node unregistered")
        await second.start()
        await until(lambda: "127.0.0.1:4002" in registry.records, "registered again")
        assert registry.records["127.0.0.1:4002"].state == "draining"
        assert registry.available() == ["127.0.0.1:4001"]
    finally:
        await first.stop()
        await second.stop()
        await registry.close()
        await store.close()


async def test_an_invalid_address_cannot_be_drained(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    try:
        with pytest.raises(InvalidArgumentError, match="use host:port"):
            await mark_draining(store, "no-port")
    finally:
        await store.close()


async def test_gc_deletes_only_ledgers_absent_from_two_listings_a_grace_apart(tmp_path: Path) -> None:
    metadata = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await metadata.start()
    ledgers = LedgerStore(StorageSettings(data_dir=str(tmp_path / "node"), checkpoint_interval=3600.0))
    await ledgers.open()
    now = [100.0]
    gc = LedgerGarbageCollector(ledgers, metadata, interval=60, grace=10, clock=lambda: now[0])
    try:
        for ledger_id in (1, 2):
            await ledgers.add_entry(ledger_id, 0, b"entry")
        # A store that never allocated a ledger id is not the one these ledgers came from.
        assert await gc.collect() == []
        now[0] += 20
        assert await gc.collect() == []
        await metadata.put("/counters/ledger-id", b"3")
        await ledgers.add_entry(7, 0, b"entry")  # beyond the counter: never this store's to collect
        await metadata.put("/ledgers/00000000000000000001", b"{}")  # ledger 1 exists; 2's metadata is gone
        assert await gc.collect() == []  # 2 first seen absent: not yet
        now[0] += 5
        assert await gc.collect() == []  # absent twice, but not for the grace yet
        now[0] += 5
        assert await gc.collect() == [2]
        assert sorted(ledgers.ledger_ids()) == [1, 7]
        # A ledger whose metadata shows up between two listings is kept (listed present: forgotten).
        await ledgers.add_entry(3, 0, b"entry")
        assert await gc.collect() == []
        await metadata.put("/ledgers/00000000000000000003", b"{}")
        now[0] += 20
        assert await gc.collect() == []
        assert sorted(ledgers.ledger_ids()) == [1, 3, 7]
    finally:
        await ledgers.close()
        await metadata.close()
