"""Costs that must stay flat as topics grow (issue 20 item 4), proven by what is done, not by timing:
how many times lookup reads every ownership record while assigning many new topics, and how many
store writes concurrent id allocations cost. The stores are the real embedded store, counting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from herald.common.ownership import OWNERSHIP_PREFIX, Owner, ownership_key
from herald.lookup.ownership import OwnershipAssigner
from herald.lookup.registry import BrokerRegistry
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.metadata.store import Versioned


class CountingStore(EmbeddedMetadataStore):
    """The embedded store, counting the operations the tests bound."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.puts = 0
        self.ownership_lists = 0

    async def put(self, key: str, value: bytes, *, expected_version: int | None = None, lease_id: int = 0) -> int:
        self.puts += 1
        return await super().put(key, value, expected_version=expected_version, lease_id=lease_id)

    async def list(self, prefix: str) -> dict[str, Versioned]:
        if prefix == OWNERSHIP_PREFIX:
            self.ownership_lists += 1
        return await super().list(prefix)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[CountingStore]:
    store = CountingStore(str(tmp_path / "metadata.db"))
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def test_concurrent_id_allocations_of_one_process_never_retry(store: CountingStore) -> None:
    ids = await asyncio.gather(*(store.allocate_id("/counters/ledger") for _ in range(50)))
    assert sorted(ids) == list(range(1, 51))
    assert store.puts == 50  # one compare-and-set each: none lost to another allocation of this process


async def test_assigning_many_new_topics_reads_the_ownership_records_once_per_refresh(store: CountingStore) -> None:
    registry = BrokerRegistry(store, 30.0)
    await registry.register("b1", "b1.local:6661", "test", {})
    assigner = OwnershipAssigner(store, registry, counts_max_age=3600.0)
    owners = await asyncio.gather(*(assigner.lookup(f"persistent://public/default/t-{i}") for i in range(100)))
    assert {owner.broker_id for owner in owners} == {"b1"}
    # Once, not once per topic: parsing every record for each new topic made n topics cost O(n²).
    assert store.ownership_lists == 1


async def test_topics_assigned_between_count_reads_still_spread_over_the_brokers(store: CountingStore) -> None:
    registry = BrokerRegistry(store, 30.0)
    for broker in ("b1", "b2"):
        await registry.register(broker, f"{broker}.local:6661", "test", {})
    assigner = OwnershipAssigner(store, registry, counts_max_age=3600.0)
    for i in range(20):
        await assigner.lookup(f"persistent://public/default/t-{i}")
    records = await store.list(OWNERSHIP_PREFIX)
    per_broker = [Owner.from_bytes(record.value).broker_id for record in records.values()]
    assert sorted(per_broker.count(broker) for broker in ("b1", "b2")) == [10, 10]
    assert ownership_key("persistent://public/default/t-0") in records
