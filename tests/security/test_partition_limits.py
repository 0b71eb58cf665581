"""Partitions per topic are capped (issue 16, item 4), through a secure standalone with TLS, token
authentication and authorization on, driven by a tenant's own admin role: the broker's
max_partitions_per_topic and a namespace's policy
(lowered by the tenant's admin, raised only by a super-user) refuse CreateTopic and
UpdatePartitions past the cap (the default, 1000), and absurd counts (2^31-1), at once. A topic made before a lower
cap keeps working. And a topic at the cap, asked for its stats and routes over and over by
several callers, leaves every other tenant served: their producer and consumer go on, the broker
keeps its lease (lookup sees no expired heartbeat, no second registration), /readyz stays ready."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from herald.api.v1 import admin_pb2, lookup_pb2, lookup_pb2_grpc
from herald.client import AuthenticationToken, AuthorizationError
from herald.client.admin import AdminClient
from herald.common.errors import InvalidArgumentError, NotAllowedError

from tests.conftest import StandaloneProcess
from tests.helpers import unique_name, unique_topic
from tests.security.conftest import Keys, Pki, running_secure_standalone
from tests.security.test_standalone_security import _admin, _client

CAP = 1000  # the broker's default max_partitions_per_topic (refusals cost nothing per partition)
INT32_MAX = 2**31 - 1
HEARTBEAT = 0.5  # the broker's heartbeat: its lease expires after 1.5 s of silence


@pytest.fixture(scope="module")
def secure_standalone(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    settings = {"HERALD_LOOKUP_HEARTBEAT_INTERVAL": str(HEARTBEAT)}
    with running_secure_standalone(tmp_path_factory.mktemp("partitions") / "data", pki, keys, settings) as server:
        yield server


@pytest.fixture
async def admin(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> AsyncIterator[AdminClient]:
    async with _admin(secure_standalone, pki, keys) as client:
        yield client


async def _tenant(admin: AdminClient, prefix: str = "p") -> tuple[str, str]:
    """A new tenant with its own admin role and a namespace: (namespace, admin role)."""
    tenant = unique_name(prefix)
    await admin.create_tenant(tenant, admin_roles=[f"{tenant}-admin"], allowed_clusters=["standalone"])
    await admin.create_namespace(f"{tenant}/ns")
    return f"{tenant}/ns", f"{tenant}-admin"


def _limit(limit: int, source: str) -> str:
    return re.escape(f"the limit is {limit} per topic ({source})")


BROKER_SETTING = "the broker setting max_partitions_per_topic"


async def test_a_tenant_admin_is_refused_past_the_brokers_cap_and_at_absurd_counts(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    namespace, role = await _tenant(admin)
    topic, grown = unique_topic("t", namespace), unique_topic("t", namespace)
    async with _admin(secure_standalone, pki, keys, role) as tenant_admin:
        for partitions in (CAP + 1, INT32_MAX):
            with pytest.raises(NotAllowedError, match=_limit(CAP, BROKER_SETTING)) as refused:
                await tenant_admin.create_topic(topic, partitions=partitions)
            assert f"cannot have {partitions} partitions" in str(refused.value)
        assert await tenant_admin.get_partitions(topic) == 0  # nothing was recorded
        assert await tenant_admin.list_topics(namespace) == []
        with pytest.raises(InvalidArgumentError, match="partitions -1 is invalid"):
            await tenant_admin.create_topic(topic, partitions=-1)

        await tenant_admin.create_topic(topic, partitions=CAP)  # at the cap: fine
        assert await tenant_admin.get_partitions(topic) == CAP
        await tenant_admin.create_topic(grown, partitions=2)
        for partitions in (CAP + 1, INT32_MAX):
            with pytest.raises(NotAllowedError, match=_limit(CAP, BROKER_SETTING)):
                await tenant_admin.update_partitions(grown, partitions)
        for partitions in (0, -5):
            with pytest.raises(InvalidArgumentError, match=f"partitions {partitions} is invalid"):
                await tenant_admin.update_partitions(grown, partitions)
        assert await tenant_admin.get_partitions(grown) == 2
        assert await tenant_admin.update_partitions(grown, CAP) == CAP


async def test_a_tenant_admin_may_lower_the_cap_of_its_namespace(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    namespace, role = await _tenant(admin)
    source = f"namespace {namespace}'s policy max_partitions_per_topic"
    async with _admin(secure_standalone, pki, keys, role) as tenant_admin:
        policies = await tenant_admin.set_namespace_policies(namespace, admin_pb2.Policies(max_partitions_per_topic=4))
        assert policies.max_partitions_per_topic == 4
        topic = unique_topic("t", namespace)
        with pytest.raises(NotAllowedError, match=_limit(4, source)):
            await tenant_admin.create_topic(topic, partitions=5)
        await tenant_admin.create_topic(topic, partitions=4)
        with pytest.raises(NotAllowedError, match=_limit(4, source)):
            await tenant_admin.update_partitions(topic, 5)
        # Cleared, the broker's setting applies again.
        await tenant_admin.set_namespace_policies(namespace, clear=["max_partitions_per_topic"])
        assert await tenant_admin.update_partitions(topic, 5) == 5


async def test_only_a_superuser_raises_a_namespaces_cap_above_the_brokers(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    namespace, role = await _tenant(admin)
    tenant = namespace.split("/")[0]
    above = admin_pb2.Policies(max_partitions_per_topic=CAP * 2)
    async with _admin(secure_standalone, pki, keys, role) as tenant_admin:
        with pytest.raises(AuthorizationError, match=f"above the broker's max_partitions_per_topic of {CAP}"):
            await tenant_admin.set_namespace_policies(namespace, above)
        with pytest.raises(AuthorizationError, match="only super-users may"):
            await tenant_admin.create_namespace(f"{tenant}/other", above)
        assert not (await tenant_admin.namespace_policies(namespace)).HasField("max_partitions_per_topic")
        # Up to the broker's own cap is the tenant's call.
        await tenant_admin.set_namespace_policies(namespace, admin_pb2.Policies(max_partitions_per_topic=CAP))

        await admin.set_namespace_policies(namespace, above)  # the super-user's call
        topic = unique_topic("t", namespace)
        await tenant_admin.create_topic(topic, partitions=CAP + 1)  # past the broker's, within the namespace's
        assert await tenant_admin.get_partitions(topic) == CAP + 1
        source = f"namespace {namespace}'s policy max_partitions_per_topic"
        with pytest.raises(NotAllowedError, match=_limit(CAP * 2, source)):
            await tenant_admin.update_partitions(topic, CAP * 2 + 1)


async def test_a_cap_below_one_or_on_a_topic_is_refused(admin: AdminClient) -> None:
    namespace, _ = await _tenant(admin)
    for wrong in (0, -1):
        with pytest.raises(InvalidArgumentError, match=f"max_partitions_per_topic {wrong} is invalid: use 1 or more"):
            await admin.set_namespace_policies(namespace, admin_pb2.Policies(max_partitions_per_topic=wrong))
    with pytest.raises(InvalidArgumentError, match="max_partitions_per_topic is a namespace policy"):
        await admin.set_topic_policies(unique_topic("t", namespace), admin_pb2.Policies(max_partitions_per_topic=3))


async def test_a_topic_made_before_a_lower_cap_keeps_its_partitions_and_works(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient,
) -> None:
    namespace, role = await _tenant(admin)
    topic = unique_topic("t", namespace)
    async with _admin(secure_standalone, pki, keys, role) as tenant_admin:
        await tenant_admin.create_topic(topic, partitions=6)
        await tenant_admin.set_namespace_policies(namespace, admin_pb2.Policies(max_partitions_per_topic=4))
        async with _client(secure_standalone, pki, AuthenticationToken(keys.token(role))) as client:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(topic, batching_enabled=False)
            sent = {f"m{index}".encode() for index in range(12)}
            for value in sorted(sent):
                await producer.send(value)
            received = set()
            while received != sent:
                message = await consumer.receive(timeout=10)
                received.add(message.data())
                consumer.acknowledge(message)
            await producer.close()
            await consumer.close()
        stats = await tenant_admin.topic_stats(topic)
        assert stats.partitions == 6 and len(stats.partition_stats) == 6
        assert stats.msg_in_counter == 12
        assert await tenant_admin.update_partitions(topic, 6) == 6  # its own count: no change, no refusal
        with pytest.raises(NotAllowedError, match="the limit is 4 per topic"):
            await tenant_admin.update_partitions(topic, 7)


# ---- no admin call holds the event loop ----

def _metric(server: StandaloneProcess, name: str) -> float:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    assert found is not None, f"{name} is not among the metrics"
    return float(found.group(1))


def _ready(server: StandaloneProcess) -> bool:
    url = server.metrics_url.replace("/metrics", "/readyz")
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


REGISTRATIONS = "herald_lookup_broker_registrations_total"
EXPIRED = 'herald_lookup_heartbeats_total{result="expired"}'
# Admins asking side by side: before the per-partition loops were bounded, 32 of them on a topic of
# 1000 partitions held the loop past the broker's 1.5 s lease (bench/admin_loop_stall.py).
CALLERS = 32
ROUNDS = 2  # routes then stats, per admin


async def test_stats_and_routes_of_a_topic_at_the_cap_leave_other_tenants_served(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tmp_path: Path,
) -> None:
    registrations, expired = _metric(secure_standalone, REGISTRATIONS), _metric(secure_standalone, EXPIRED)
    namespace, role = await _tenant(admin, "big")
    other_namespace, other_role = await _tenant(admin, "other")
    big = unique_topic("t", namespace)
    async with _admin(secure_standalone, pki, keys, role) as tenant_admin:
        await tenant_admin.create_topic(big, partitions=CAP)
    other = unique_topic("t", other_namespace)
    stop = asyncio.Event()
    readiness: list[bool] = []

    async def other_tenant() -> int:
        """Tenant B's producer and consumer, one message at a time, until the calls are over."""
        async with _client(secure_standalone, pki, AuthenticationToken(keys.token(other_role)),
                           operation_timeout=60.0) as client:
            consumer = await client.subscribe(other, "s")
            producer = await client.create_producer(other, send_timeout=60.0)
            count = 0
            while not stop.is_set() or count < 5:
                await producer.send(f"b{count}".encode())
                message = await consumer.receive(timeout=60)
                assert message.data() == f"b{count}".encode()
                consumer.acknowledge(message)
                count += 1
            await producer.close()
            await consumer.close()
            return count

    def watch_readiness() -> None:
        while not stop.is_set():
            readiness.append(_ready(secure_standalone))
            time.sleep(0.1)

    async def tenant_a_admin() -> None:
        """Routes (lookup assigns an owner per partition) then stats (every partition's)."""
        credentials = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
        metadata = [("authorization", f"Bearer {keys.token(role)}")]
        async with grpc.aio.secure_channel(f"127.0.0.1:{secure_standalone.port}", credentials) as channel:
            lookup = lookup_pb2_grpc.LookupServiceStub(channel)
            for _ in range(ROUNDS):
                route = await lookup.GetTopicRoute(lookup_pb2.TopicRouteRequest(topic=big), metadata=metadata,
                                                   timeout=120)
                assert len(route.routes) == CAP
        # A long deadline: the first stats call loads every partition.
        async with AdminClient(secure_standalone.service_url, timeout=120, auth=AuthenticationToken(keys.token(role)),
                               tls_trust_certs_file_path=str(pki.ca_cert)) as tenant_admin:
            for _ in range(ROUNDS):
                stats = await tenant_admin.topic_stats(big)
                assert stats.partitions == CAP

    served = asyncio.create_task(other_tenant())
    watcher = asyncio.create_task(asyncio.to_thread(watch_readiness))
    try:
        await asyncio.gather(*(tenant_a_admin() for _ in range(CALLERS)))
    finally:
        stop.set()
        exchanged = await served
        await watcher
    assert exchanged >= 5
    assert readiness and all(readiness), f"/readyz failed {readiness.count(False)} of {len(readiness)} times"
    assert _metric(secure_standalone, EXPIRED) == expired, "the broker's lease expired: its topics were dropped"
    assert _metric(secure_standalone, REGISTRATIONS) == registrations
