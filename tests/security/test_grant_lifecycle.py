"""Grants go with what they are on: a namespace or topic deleted and made again under the same name
starts with no grants (Pulsar keeps them inside the namespace's policies, so they go with it), on
every delete path — namespace delete, topic delete, a partitioned topic with all its partitions, with
force while clients are connected. Refused deletes leave them, and deleting one partition leaves
its partitioned topic's grants."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from herald.client import AuthenticationToken, AuthorizationError
from herald.client.admin import AdminClient
from herald.common.errors import PreconditionFailedError

from tests.conftest import StandaloneProcess
from tests.helpers import eventually_passes, unique_name, unique_topic
from tests.security.conftest import Keys, Pki
from tests.security.test_standalone_security import GRANTS_CACHED, _admin, _client, _round_trip


@pytest.fixture
async def admin(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> AsyncIterator[AdminClient]:
    async with _admin(secure_standalone, pki, keys) as client:
        yield client


async def _namespace(admin: AdminClient) -> str:
    tenant = unique_name("g")
    await admin.create_tenant(tenant, allowed_clusters=["standalone"])
    await admin.create_namespace(f"{tenant}/ns")
    return f"{tenant}/ns"


async def _refused(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, role: str, topic: str) -> None:
    """`role` is eventually refused producing to `topic` (the services cache grants for a second)."""
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token(role))) as client:
        async def refused() -> None:
            try:
                producer = await client.create_producer(topic)
            except AuthorizationError:
                return
            await producer.close()
            raise AssertionError(f"{role} may still produce to {topic}")
        await eventually_passes(refused, f"{role} refused on {topic}", retry=GRANTS_CACHED)


async def test_a_namespace_made_again_does_not_inherit_the_deleted_ones_grants(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    namespace = await _namespace(admin)
    topic = unique_topic("sec", namespace)
    await admin.grant_permission("ns-app", ["produce", "consume"], namespace=namespace)
    await admin.grant_permission("topic-app", ["produce"], topic=topic)
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token("ns-app"))) as client:
        await eventually_passes(lambda: _round_trip(client, topic), "the grant seen", retry=GRANTS_CACHED)
    with pytest.raises(PreconditionFailedError, match="delete them first"):
        await admin.delete_namespace(namespace)  # it has a topic: refused, the grants stay
    assert await admin.get_permissions(namespace=namespace) == {"ns-app": ["consume", "produce"]}
    await admin.delete_topic(topic)
    assert await admin.get_permissions(topic=topic) == {}  # went with the topic
    never_made = unique_topic("sec", namespace)
    await admin.grant_permission("topic-app", ["produce"], topic=never_made)  # a grant with no topic yet
    await admin.delete_namespace(namespace)

    await admin.create_namespace(namespace)
    assert await admin.get_permissions(namespace=namespace) == {}
    assert await admin.get_permissions(topic=never_made) == {}  # went with the namespace
    await _refused(secure_standalone, pki, keys, "ns-app", topic)


async def test_a_topic_made_again_does_not_inherit_the_deleted_ones_grants(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    topic = unique_topic("sec")
    await admin.create_topic(topic)
    await admin.grant_permission("t-app", ["produce", "consume"], topic=topic)
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token("t-app"))) as client:
        await eventually_passes(lambda: _round_trip(client, topic), "the grant seen", retry=GRANTS_CACHED)
    await admin.delete_topic(topic)
    await admin.create_topic(topic)
    assert await admin.get_permissions(topic=topic) == {}
    await _refused(secure_standalone, pki, keys, "t-app", topic)


async def test_a_forced_partitioned_topic_delete_takes_its_grants_with_every_partition(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    topic = unique_topic("sec")
    await admin.create_topic(topic, partitions=3)
    await admin.grant_permission("p-app", ["produce"], topic=topic)
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token("p-app"))) as client:
        async def produces() -> None:
            producer = await client.create_producer(topic)
            for index in range(6):
                await producer.send(f"m{index}".encode())
            await producer.close()
        await eventually_passes(produces, "the produce grant seen", retry=GRANTS_CACHED)
        connected = await client.create_producer(topic)  # still connected when the topic is deleted
        with pytest.raises(PreconditionFailedError, match="active producers"):
            await admin.delete_topic(topic)  # refused without force: the grants stay
        assert await admin.get_permissions(topic=topic) == {"p-app": ["produce"]}
        await admin.delete_topic(topic, force=True)
        await connected.close()
    await admin.create_topic(topic, partitions=3)
    assert await admin.get_permissions(topic=topic) == {}
    await _refused(secure_standalone, pki, keys, "p-app", topic)


async def test_deleting_one_partition_keeps_the_partitioned_topics_grants(admin: AdminClient) -> None:
    topic = unique_topic("sec")
    await admin.create_topic(topic, partitions=2)
    await admin.grant_permission("part-app", ["consume"], topic=topic)
    await admin.create_subscription(f"{topic}-partition-0", "s")  # the partition's ledger exists
    await admin.delete_topic(f"{topic}-partition-0")
    assert await admin.get_permissions(topic=topic) == {"part-app": ["consume"]}
    await admin.delete_topic(topic)
    assert await admin.get_permissions(topic=topic) == {}


async def test_a_non_persistent_topic_delete_takes_its_grants(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    topic = unique_topic("sec", persistent=False)
    await admin.grant_permission("np-app", ["produce"], topic=topic)
    async with _client(secure_standalone, pki, AuthenticationToken(keys.token("np-app"))) as client:
        async def produces() -> None:
            producer = await client.create_producer(topic)
            await producer.send(b"x")
            await producer.close()
        await eventually_passes(produces, "the produce grant seen", retry=GRANTS_CACHED)
        connected = await client.create_producer(topic)
        await admin.delete_topic(topic, force=True)
        await connected.close()
    assert await admin.get_permissions(topic=topic) == {}
