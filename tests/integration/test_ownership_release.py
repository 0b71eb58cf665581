"""Topic ownership moves, in-process over a real embedded metadata store and storage node: an unload
releases the ownership record (by compare-and-set, only while it names this broker) and keeps
lookup from giving the topic straight back; a broker closes a topic whose record vanished or names
another broker, without touching the record."""

from __future__ import annotations

import asyncio

import pytest
from herald.broker.core.ownership import BrokerOwnership, OwnershipMonitor
from herald.broker.core.service import BrokerService
from herald.broker.settings import BrokerSettings
from herald.common.errors import NotOwnerError, ServiceNotReadyError
from herald.common.ownership import Owner, ownership_key, unloading_key
from herald.lookup.ownership import OwnershipAssigner
from herald.lookup.placement import least_loaded
from herald.lookup.registry import BrokerRecord, BrokerRegistry

from tests.integration import test_broker_core
from tests.integration.test_broker_core import (
    EARLIEST,
    EXCLUSIVE,
    TOPIC,
    Cluster,
    eventually,
    publish_all,
    receive,
    seqs,
)

cluster = test_broker_core.cluster  # the fixture: a metadata store, a storage node, brokers on demand
KEY = ownership_key(TOPIC)


async def registered(cluster: Cluster, registry: BrokerRegistry, broker_id: str) -> BrokerOwnership:
    record = await registry.register(broker_id, f"{broker_id}.local:6661", "test", {})
    ownership = BrokerOwnership(cluster.store, broker_id, record.address, unload_exclusion_seconds=10.0)
    ownership.lease_id = record.lease_id
    return ownership


async def owner_of(cluster: Cluster) -> str | None:
    found = await cluster.store.get(KEY)
    return None if found is None else Owner.from_bytes(found.value).broker_id


async def test_unload_closes_the_topic_and_lookup_gives_it_to_another_broker(cluster: Cluster) -> None:
    registry = BrokerRegistry(cluster.store, expiry_seconds=30)
    assigner = OwnershipAssigner(cluster.store, registry)
    a = await registered(cluster, registry, "a")
    b = await registered(cluster, registry, "b")
    first = await assigner.lookup(TOPIC)
    old, other = (a, b) if first.broker_id == "a" else (b, a)
    service = await cluster.broker(BrokerSettings(), ownership=old)
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    await publish_all(service, "p", 0, 5)
    consumer.flow(10)
    got = await receive(consumer, 5)
    consumer.ack([(got[-1].ledger_id, got[-1].entry_id)], cumulative=True)

    await service.unload_topic(TOPIC)
    assert service.topic_names() == [] and consumer.closed
    assert await owner_of(cluster) is None
    marker = await cluster.store.get(unloading_key(TOPIC))
    assert marker is not None and marker.value.decode() == old.broker_id and marker.lease_id > 0
    # Requests that still reach the old broker are refused: the client looks the topic up again.
    with pytest.raises(NotOwnerError):
        await service.get_topic(TOPIC)
    assert (await assigner.lookup(TOPIC)).broker_id == other.broker_id
    # The new owner has everything, acks included.
    new = await cluster.broker(BrokerSettings(), ownership=other)
    consumer = await new.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    await publish_all(new, "p", 5, 1)
    consumer.flow(10)
    assert seqs(await receive(consumer, 1)) == [5]
    _, last_sequence_id = await new.create_producer(TOPIC, "q")
    assert (await new.topic_stats(TOPIC)).entries == 6 and last_sequence_id == -1
    await new.unload_topic(TOPIC)  # idempotent, and fine when the topic is not loaded here
    await new.unload_topic(TOPIC)


async def test_requests_during_an_unload_are_told_to_look_again(cluster: Cluster) -> None:
    registry = BrokerRegistry(cluster.store, expiry_seconds=30)
    ownership = await registered(cluster, registry, "a")
    await OwnershipAssigner(cluster.store, registry).lookup(TOPIC)
    service = await cluster.broker(BrokerSettings(), ownership=ownership)
    await publish_all(service, "p", 0, 3)
    unloading = asyncio.ensure_future(service.unload_topic(TOPIC))
    await asyncio.sleep(0)
    with pytest.raises(ServiceNotReadyError, match="being unloaded"):
        await service.get_topic(TOPIC)
    await unloading


async def test_a_broker_releases_only_its_own_ownership(cluster: Cluster) -> None:
    registry = BrokerRegistry(cluster.store, expiry_seconds=30)
    a = await registered(cluster, registry, "a")
    b = await registered(cluster, registry, "b")
    assert await a.release(TOPIC) is False  # no owner: nothing to do
    await cluster.store.put(KEY, Owner("b", "b.local:6661", b.lease_id).to_bytes(), lease_id=b.lease_id)
    with pytest.raises(NotOwnerError, match="owned by broker b"):
        await a.release(TOPIC)
    service = await cluster.broker(BrokerSettings(), ownership=a)
    with pytest.raises(NotOwnerError):
        await service.unload_topic(TOPIC)
    assert await owner_of(cluster) == "b"
    assert await b.release(TOPIC) is True
    assert await owner_of(cluster) is None


def test_placement_passes_over_the_unloading_broker_unless_it_is_the_only_one() -> None:
    a, b = BrokerRecord("a", "a:1", "c", 1), BrokerRecord("b", "b:1", "c", 2)
    assert least_loaded([a, b], {}).broker_id == "a"
    assert least_loaded([a, b], {}, exclude={"a"}).broker_id == "b"
    assert least_loaded([a], {}, exclude={"a"}).broker_id == "a"


async def test_the_unloading_broker_gets_the_topic_back_when_it_is_the_only_one(cluster: Cluster) -> None:
    registry = BrokerRegistry(cluster.store, expiry_seconds=30)
    assigner = OwnershipAssigner(cluster.store, registry)
    a = await registered(cluster, registry, "a")
    await assigner.lookup(TOPIC)
    service = await cluster.broker(BrokerSettings(), ownership=a)
    await publish_all(service, "p", 0, 2)
    await service.unload_topic(TOPIC)
    assert (await assigner.lookup(TOPIC)).broker_id == "a"
    assert (await service.topic_stats(TOPIC)).entries == 2


@pytest.mark.parametrize("change", ["vanished", "reassigned"])
async def test_a_topic_whose_ownership_changed_is_closed_without_touching_the_record(
    cluster: Cluster, change: str,
) -> None:
    registry = BrokerRegistry(cluster.store, expiry_seconds=30)
    assigner = OwnershipAssigner(cluster.store, registry)
    a = await registered(cluster, registry, "a")
    await assigner.lookup(TOPIC)
    service: BrokerService = await cluster.broker(BrokerSettings(), ownership=a)
    monitor = OwnershipMonitor(cluster.store, a, service.served_topics, service.ownership_lost)
    monitor.start()
    try:
        consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
        await publish_all(service, "p", 0, 3)
        b = await registered(cluster, registry, "b")
        if change == "vanished":
            await cluster.store.delete(KEY)  # as when the owner's lease expires
        else:
            await cluster.store.put(KEY, Owner("b", "b.local:6661", b.lease_id).to_bytes(), lease_id=b.lease_id)
        await eventually(lambda: _true(service.topic_names() == []), "the topic to be closed")
        assert consumer.closed
        assert await owner_of(cluster) == (None if change == "vanished" else "b")
        with pytest.raises(NotOwnerError):
            await service.get_topic(TOPIC)
    finally:
        await monitor.stop()


async def test_the_monitor_leaves_topics_this_broker_still_owns(cluster: Cluster) -> None:
    registry = BrokerRegistry(cluster.store, expiry_seconds=30)
    assigner = OwnershipAssigner(cluster.store, registry)
    a = await registered(cluster, registry, "a")
    await assigner.lookup(TOPIC)
    await assigner.lookup("persistent://public/default/other")
    service = await cluster.broker(BrokerSettings(), ownership=a)
    monitor = OwnershipMonitor(cluster.store, a, service.served_topics, service.ownership_lost, check_interval=0.01)
    monitor.start()
    try:
        await publish_all(service, "p", 0, 3)
        await service.unload_topic("persistent://public/default/other")  # changes under /ownership/
        await monitor.check_all()
        await asyncio.sleep(0.05)  # a few periodic checks
        assert service.topic_names() == [TOPIC]
    finally:
        await monitor.stop()


async def _true(value: bool) -> bool:
    return value
