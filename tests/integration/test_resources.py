"""The metadata resources contract (tenants, namespaces, policies, partitioned topics, topic
listing), run against both metadata backends: a real redis-server and the embedded SQLite file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from herald.common.codec.names import TopicName
from herald.common.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    PreconditionFailedError,
)
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.metadata.policies import BacklogQuota, BacklogQuotaPolicy, PersistencePolicy, Policies, RetentionPolicy
from herald.metadata.redis import RedisMetadataStore
from herald.metadata.resources import Resources, Tenant, managed_ledger_key, non_persistent_key
from herald.metadata.store import MetadataStore


@pytest.fixture(params=["redis", "embedded"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MetadataStore]:
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        backend: MetadataStore = RedisMetadataStore(url, namespace=request.getfixturevalue("redis_namespace"))
    else:
        backend = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def resources(store: MetadataStore) -> Resources:
    resources = Resources(store)
    await resources.create_tenant(Tenant("acme", ["admin"], ["standalone"]))
    await resources.create_namespace("acme/eu")
    return resources


# ---- tenants ----

async def test_tenants_are_created_read_updated_listed_and_deleted(resources: Resources) -> None:
    assert await resources.get_tenant("acme") == Tenant("acme", ["admin"], ["standalone"])
    await resources.create_tenant(Tenant("beta"))
    assert await resources.list_tenants() == ["acme", "beta"]
    await resources.update_tenant(Tenant("beta", ["ops"], []))
    assert (await resources.get_tenant("beta")).admin_roles == ["ops"]
    await resources.delete_tenant("beta")
    assert await resources.list_tenants() == ["acme"]


async def test_tenant_errors_are_exact(resources: Resources) -> None:
    with pytest.raises(AlreadyExistsError, match=r"^Tenant acme already exists$"):
        await resources.create_tenant(Tenant("acme"))
    with pytest.raises(NotFoundError, match=r"^Tenant nope does not exist$"):
        await resources.get_tenant("nope")
    with pytest.raises(NotFoundError, match=r"^Tenant nope does not exist$"):
        await resources.update_tenant(Tenant("nope"))
    with pytest.raises(NotFoundError, match=r"^Tenant nope does not exist$"):
        await resources.delete_tenant("nope")
    with pytest.raises(InvalidArgumentError, match="tenant name 'a b' is invalid: names may use letters"):
        await resources.create_tenant(Tenant("a b"))
    with pytest.raises(InvalidArgumentError, match="tenant name is empty"):
        await resources.create_tenant(Tenant(""))


async def test_a_tenant_with_namespaces_cannot_be_deleted(resources: Resources) -> None:
    with pytest.raises(PreconditionFailedError, match=r"^Tenant acme has namespaces \(acme/eu\): delete them first"):
        await resources.delete_tenant("acme")


# ---- namespaces ----

async def test_namespaces_are_created_listed_and_deleted(resources: Resources) -> None:
    await resources.create_namespace("acme/us", Policies(message_ttl_seconds=5))
    assert await resources.list_namespaces("acme") == ["acme/eu", "acme/us"]
    assert await resources.get_namespace_policies("acme/us") == Policies(message_ttl_seconds=5)
    await resources.delete_namespace("acme/us")
    assert await resources.list_namespaces("acme") == ["acme/eu"]
    await resources.delete_namespace("acme/eu")
    await resources.delete_tenant("acme")


async def test_namespace_errors_are_exact(resources: Resources) -> None:
    with pytest.raises(AlreadyExistsError, match=r"^Namespace acme/eu already exists$"):
        await resources.create_namespace("acme/eu")
    with pytest.raises(NotFoundError, match=r"^Tenant nope does not exist$"):
        await resources.create_namespace("nope/eu")
    with pytest.raises(NotFoundError, match=r"^Namespace acme/asia does not exist$"):
        await resources.get_namespace_policies("acme/asia")
    with pytest.raises(NotFoundError, match=r"^Tenant nope does not exist$"):
        await resources.get_namespace_policies("nope/eu")
    with pytest.raises(NotFoundError, match=r"^Namespace acme/asia does not exist$"):
        await resources.set_namespace_policies("acme/asia", Policies(message_ttl_seconds=1))
    with pytest.raises(NotFoundError, match=r"^Tenant nope does not exist$"):
        await resources.list_namespaces("nope")
    with pytest.raises(NotFoundError, match=r"^Namespace acme/asia does not exist$"):
        await resources.list_topics("acme/asia")
    with pytest.raises(InvalidArgumentError, match="namespace 'acme' is invalid: expected <tenant>/<namespace>"):
        await resources.create_namespace("acme")
    with pytest.raises(InvalidArgumentError, match="namespace 'acme/e u' is invalid: names may use"):
        await resources.create_namespace("acme/e u")
    with pytest.raises(InvalidArgumentError, match="persistence 1/2/1 is invalid"):
        await resources.create_namespace("acme/bad", Policies(persistence=PersistencePolicy(1, 2, 1)))


async def test_a_namespace_with_topics_cannot_be_deleted(resources: Resources, store: MetadataStore) -> None:
    await resources.create_partitioned_topic("persistent://acme/eu/orders", 2)
    with pytest.raises(PreconditionFailedError,
                       match=r"^Namespace acme/eu has 1 topics \(persistent://acme/eu/orders\): delete them first"):
        await resources.delete_namespace("acme/eu")
    await resources.delete_partitioned_topic("persistent://acme/eu/orders")
    await store.put(managed_ledger_key(TopicName.parse("acme/eu/plain")), b"{}")
    with pytest.raises(PreconditionFailedError, match="persistent://acme/eu/plain"):
        await resources.delete_namespace("acme/eu")


async def test_deleting_a_namespace_drops_policies_left_by_deleted_topics(
    resources: Resources, store: MetadataStore,
) -> None:
    await resources.set_topic_policies("persistent://acme/eu/gone", Policies(max_message_size=10))
    await resources.delete_namespace("acme/eu")
    assert await store.list("/admin/topic-policies/") == {}


async def test_default_namespace_bootstrap_is_idempotent_and_concurrent(store: MetadataStore) -> None:
    first, second = Resources(store), Resources(store)
    await asyncio.gather(first.ensure_default_namespace(), second.ensure_default_namespace())
    await first.ensure_default_namespace()
    assert await first.list_tenants() == ["public"]
    assert await first.list_namespaces("public") == ["public/default"]
    assert await first.get_namespace_policies("public/default") == Policies()


# ---- policies ----

async def test_setting_namespace_policies_merges_and_clears(resources: Resources) -> None:
    result = await resources.set_namespace_policies(
        "acme/eu", Policies(message_ttl_seconds=60, retention=RetentionPolicy(-1, 1000)))
    assert result == Policies(message_ttl_seconds=60, retention=RetentionPolicy(-1, 1000))
    quota = BacklogQuota(100, -1, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)
    result = await resources.set_namespace_policies("acme/eu", Policies(backlog_quota=quota), clear=["retention"])
    assert result == Policies(message_ttl_seconds=60, backlog_quota=quota)
    assert await resources.get_namespace_policies("acme/eu") == result


async def test_invalid_or_unknown_policies_change_nothing(resources: Resources) -> None:
    await resources.set_namespace_policies("acme/eu", Policies(max_producers_per_topic=3))
    with pytest.raises(InvalidArgumentError, match="max_producers_per_topic -2 is invalid"):
        await resources.set_namespace_policies("acme/eu", Policies(max_producers_per_topic=-2))
    with pytest.raises(InvalidArgumentError, match="'colour' is not a policy"):
        await resources.set_namespace_policies("acme/eu", Policies(), clear=["colour"])
    assert await resources.get_namespace_policies("acme/eu") == Policies(max_producers_per_topic=3)


async def test_concurrent_policy_changes_are_all_kept(resources: Resources) -> None:
    await asyncio.gather(
        resources.set_namespace_policies("acme/eu", Policies(max_producers_per_topic=1)),
        resources.set_namespace_policies("acme/eu", Policies(max_consumers_per_topic=2)),
        resources.set_namespace_policies("acme/eu", Policies(message_ttl_seconds=3)),
    )
    assert await resources.get_namespace_policies("acme/eu") == Policies(
        max_producers_per_topic=1, max_consumers_per_topic=2, message_ttl_seconds=3)


async def test_topic_policies_are_overrides_of_their_own(resources: Resources) -> None:
    topic = "persistent://acme/eu/orders"
    assert await resources.get_topic_policies(topic) == Policies()
    assert await resources.set_topic_policies(topic, Policies(encryption_required=True)) == Policies(
        encryption_required=True)
    assert await resources.set_topic_policies("acme/eu/orders", Policies(), clear=["encryption_required"]) == (
        Policies())
    with pytest.raises(NotFoundError, match=r"^Namespace acme/asia does not exist$"):
        await resources.set_topic_policies("persistent://acme/asia/x", Policies(message_ttl_seconds=1))
    with pytest.raises(NotFoundError, match=r"^Tenant nope does not exist$"):
        await resources.get_topic_policies("persistent://nope/eu/x")


# ---- partitioned topics ----

async def test_partitioned_topics_grow_and_never_shrink(resources: Resources) -> None:
    topic = "persistent://acme/eu/orders"
    await resources.create_partitioned_topic(topic, 3)
    assert await resources.get_partitions(topic) == 3
    assert await resources.get_partitions("acme/eu/orders") == 3
    assert await resources.update_partitions(topic, 3) == 3
    assert await resources.update_partitions(topic, 5) == 5
    with pytest.raises(NotAllowedError, match=r"^cannot shrink from 5 to 2 partitions"):
        await resources.update_partitions(topic, 2)
    assert await resources.get_partitions(topic) == 5
    await resources.delete_partitioned_topic(topic)
    assert await resources.get_partitions(topic) == 0


async def test_partitioned_topic_errors_are_exact(resources: Resources, store: MetadataStore) -> None:
    topic = "persistent://acme/eu/orders"
    await resources.create_partitioned_topic(topic, 2)
    with pytest.raises(AlreadyExistsError, match=f"^Topic {topic} already exists$"):
        await resources.create_partitioned_topic(topic, 4)
    await store.put(managed_ledger_key(TopicName.parse("acme/eu/plain")), b"{}")
    with pytest.raises(AlreadyExistsError, match=r"Topic persistent://acme/eu/plain already exists \(it is not"):
        await resources.create_partitioned_topic("acme/eu/plain", 2)
    with pytest.raises(InvalidArgumentError, match="a partitioned topic needs at least 1 partition, not 0"):
        await resources.create_partitioned_topic("acme/eu/other", 0)
    with pytest.raises(InvalidArgumentError, match="names a partition"):
        await resources.create_partitioned_topic("acme/eu/other-partition-1", 2)
    with pytest.raises(NotFoundError, match=r"^Namespace acme/asia does not exist$"):
        await resources.create_partitioned_topic("acme/asia/x", 2)
    with pytest.raises(NotFoundError, match=r"^Partitioned topic persistent://acme/eu/other does not exist$"):
        await resources.update_partitions("acme/eu/other", 2)
    with pytest.raises(NotFoundError, match=r"^Partitioned topic persistent://acme/eu/other does not exist$"):
        await resources.delete_partitioned_topic("acme/eu/other")


# ---- listing topics ----

async def test_topics_of_a_namespace_fold_partitions_into_their_topic(
    resources: Resources, store: MetadataStore,
) -> None:
    await resources.create_partitioned_topic("acme/eu/orders", 2)
    await resources.create_partitioned_topic("non-persistent://acme/eu/ticks", 2)
    for name in ("acme/eu/orders-partition-0", "acme/eu/orders-partition-1", "acme/eu/plain",
                 "acme/eu/stray-partition-0"):
        await store.put(managed_ledger_key(TopicName.parse(name)), b"{}")
    for name in ("non-persistent://acme/eu/live", "non-persistent://acme/eu/ticks-partition-1"):
        await store.put(non_persistent_key(TopicName.parse(name)), b"{}")
    await resources.create_namespace("acme/eu2")
    await store.put(managed_ledger_key(TopicName.parse("acme/eu2/elsewhere")), b"{}")
    assert await resources.list_topics("acme/eu") == [
        "non-persistent://acme/eu/live",
        "non-persistent://acme/eu/ticks",
        "persistent://acme/eu/orders",
        "persistent://acme/eu/plain",
        "persistent://acme/eu/stray-partition-0",
    ]
    assert await resources.list_topics("acme/eu2") == ["persistent://acme/eu2/elsewhere"]
