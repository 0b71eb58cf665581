"""Tenant isolation (issue 16, items 1 and 2), tried as an attacker would against `herald standalone`
with TLS, token authentication and authorization on, its dlq-worker running: a tenant's admin or
application role never reaches another tenant through an admin call that names several resources,
nor through dead-letter and retry topics: at subscribe, by admin call, through the worker acting on
a subscription's policy (one stored before authorization was on too), or through a replay."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from herald.api.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, lookup_pb2, lookup_pb2_grpc
from herald.client import (
    AsyncClient,
    AuthenticationToken,
    AuthorizationError,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    MessageId,
)
from herald.client.admin import AdminClient
from herald.client.consumer import AsyncConsumer
from herald.common.errors import InvalidArgumentError
from herald.common.transport.rpc import error_from_rpc
from herald.lookup.server import LookupServer
from herald.lookup.settings import LookupSettings
from herald.metadata.embedded import EmbeddedMetadataStore
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import eventually, eventually_passes, unique_name, unique_topic
from tests.security.conftest import ADMIN, Keys, Pki, secure_args, secure_process

FAST = {"operation_timeout": 10.0, "connection_timeout": 5.0, "stats_interval": 0}
REFUSED_MOVES = 'herald_dlq_move_failures_total{error="AUTHORIZATION_ERROR"}'
MOVED = "herald_dlq_letters_moved_total"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    """The secure standalone with its own dlq-worker (role `standalone`) running."""
    process = secure_process(tmp_path_factory.mktemp("isolation") / "data", pki, keys, dlq_worker=True)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@dataclass
class Tenants:
    """Two tenants, `alice` and `bob`, each with namespace `ns` and an admin role `<tenant>-admin`."""

    alice: str
    bob: str

    def topic(self, tenant: str, name: str = "") -> str:
        return f"persistent://{tenant}/ns/{name}" if name else unique_topic("t", f"{tenant}/ns")

    def admin_role(self, tenant: str) -> str:
        return f"{tenant}-admin"


def _admin(server: StandaloneProcess, pki: Pki, keys: Keys, role: str = ADMIN) -> AdminClient:
    return AdminClient(server.service_url, timeout=10, auth=AuthenticationToken(keys.token(role)),
                       tls_trust_certs_file_path=str(pki.ca_cert))


def _client(server: StandaloneProcess, pki: Pki, keys: Keys, role: str) -> AsyncClient:
    return AsyncClient(server.service_url, auth=AuthenticationToken(keys.token(role)),
                       tls_trust_certs_file_path=str(pki.ca_cert), **FAST)


@pytest.fixture
async def admin(server: StandaloneProcess, pki: Pki, keys: Keys) -> AsyncIterator[AdminClient]:
    async with _admin(server, pki, keys) as made:
        yield made


async def _make_tenants(admin: AdminClient) -> Tenants:
    tenants = Tenants(unique_name("alice"), unique_name("bob"))
    for tenant in (tenants.alice, tenants.bob):
        await admin.create_tenant(tenant, admin_roles=[tenants.admin_role(tenant)], allowed_clusters=["standalone"])
        await admin.create_namespace(f"{tenant}/ns")
    return tenants


@pytest.fixture
async def tenants(admin: AdminClient) -> Tenants:
    return await _make_tenants(admin)


async def _admin_call(server: StandaloneProcess, pki: Pki, token: str, method: str, request: Any) -> Any:
    """An AdminService call as an attacker makes it: the raw request, straight to the broker."""
    credentials = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
    async with grpc.aio.secure_channel(f"127.0.0.1:{server.broker_port}", credentials) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        try:
            return await getattr(stub, method)(request, timeout=10, metadata=[("authorization", f"Bearer {token}")])
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, method) from None


async def _until_allowed(attempt: Callable[[], Awaitable[Any]]) -> Any:
    """`attempt()`, retried while it is refused (grants are cached by the services for about a second)."""
    return await eventually_passes(attempt, "the grant seen", retry=(AuthorizationError,))


def _metrics(server: StandaloneProcess) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


class _AlwaysNack:
    """Negatively acknowledges everything it receives, so that each message becomes a dead letter."""

    def __init__(self, consumer: AsyncConsumer[bytes]) -> None:
        self.consumer = consumer
        self._task = asyncio.get_running_loop().create_task(self._nack())

    async def _nack(self) -> None:
        while True:
            self.consumer.negative_acknowledge(await self.consumer.receive())

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self.consumer.close()


async def _nacking(client: AsyncClient, topic: str, policy: DeadLetterPolicy | None) -> _AlwaysNack:
    consumer = await client.subscribe(topic, "s", ConsumerType.Shared, InitialPosition.Earliest,
                                      negative_ack_redelivery_delay=0.05, dead_letter_policy=policy)
    return _AlwaysNack(consumer)


async def _produce(client: AsyncClient, topic: str, values: list[str]) -> None:
    producer = await client.create_producer(topic, batching_enabled=False)
    for value in values:
        await producer.send(value.encode())
    await producer.close()


async def _subscription(admin: AdminClient, topic: str, name: str = "s") -> admin_pb2.SubscriptionStats:
    (found,) = [s for s in (await admin.topic_stats(topic)).subscriptions if s.name == name]
    return found


async def _read_all(client: AsyncClient, topic: str) -> list[str]:
    reader = await client.create_reader(topic, MessageId.earliest)
    values = []
    while await reader.has_message_available():
        message = await reader.read_next(timeout=10)
        assert message is not None
        values.append(message.data().decode())
    await reader.close()
    return values


# ---- item 1: an admin request is authorized on every resource it names ----

async def test_a_tenant_admin_cannot_change_another_tenants_namespace_by_naming_its_own_topic(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants,
) -> None:
    before = await admin.namespace_policies(f"{tenants.bob}/ns")
    attack = admin_pb2.SetPoliciesRequest(
        namespace=f"{tenants.bob}/ns", topic=tenants.topic(tenants.alice),
        policies=admin_pb2.Policies(
            retention=admin_pb2.RetentionPolicy(time_seconds=0, size_bytes=0), message_ttl_seconds=1,
            persistence=admin_pb2.PersistencePolicy(ensemble_size=1, write_quorum=1, ack_quorum=1),
            max_message_size=16))
    with pytest.raises(AuthorizationError, match=f"may not administer tenant '{tenants.bob}'"):
        await _admin_call(server, pki, keys.token(tenants.admin_role(tenants.alice)), "SetNamespacePolicies", attack)
    assert await admin.namespace_policies(f"{tenants.bob}/ns") == before
    # Its own namespace, named alone: allowed.
    async with _admin(server, pki, keys, tenants.admin_role(tenants.alice)) as alice:
        changed = await alice.set_namespace_policies(f"{tenants.alice}/ns", admin_pb2.Policies(message_ttl_seconds=60))
    assert changed.message_ttl_seconds == 60


def _cross_tenant_requests(t: Tenants) -> dict[str, tuple[str, Any]]:
    """Every admin request that names more than one resource, naming alice's and bob's."""
    alice_ns, bob_ns = f"{t.alice}/ns", f"{t.bob}/ns"
    alice_topic, bob_topic = t.topic(t.alice), t.topic(t.bob)
    ttl = admin_pb2.Policies(message_ttl_seconds=1)

    def dead_letters(dlq: str = "", retry: str = "") -> admin_pb2.SetSubscriptionDeadLetterPolicyRequest:
        return admin_pb2.SetSubscriptionDeadLetterPolicyRequest(
            topic=alice_topic, subscription="s",
            policy=broker_pb2.DeadLetterPolicy(max_redeliver_count=1, dead_letter_topic=dlq, retry_letter_topic=retry))

    return {
        "namespace policies, bob's namespace": (
            "SetNamespacePolicies", admin_pb2.SetPoliciesRequest(namespace=bob_ns, topic=alice_topic, policies=ttl)),
        "topic policies, bob's topic": (
            "SetTopicPolicies", admin_pb2.SetPoliciesRequest(namespace=alice_ns, topic=bob_topic, policies=ttl)),
        "topic policies, bob's namespace": (
            "SetTopicPolicies", admin_pb2.SetPoliciesRequest(namespace=bob_ns, topic=alice_topic, policies=ttl)),
        "grant, bob's namespace": ("GrantPermission", admin_pb2.GrantPermissionRequest(
            namespace=bob_ns, topic=alice_topic, role="mallory", actions=["produce"])),
        "grant, bob's topic": ("GrantPermission", admin_pb2.GrantPermissionRequest(
            namespace=alice_ns, topic=bob_topic, role="mallory", actions=["produce"])),
        "revoke, bob's namespace": ("RevokePermission", admin_pb2.RevokePermissionRequest(
            namespace=bob_ns, topic=alice_topic, role="bob-app")),
        "permissions, bob's namespace": ("GetPermissions", admin_pb2.PermissionsRequest(
            namespace=bob_ns, topic=alice_topic)),
        "permissions, bob's topic": ("GetPermissions", admin_pb2.PermissionsRequest(
            namespace=alice_ns, topic=bob_topic)),
        "dead-letter topic in bob's tenant": ("SetSubscriptionDeadLetterPolicy", dead_letters(dlq=bob_topic)),
        "retry-letter topic in bob's tenant": ("SetSubscriptionDeadLetterPolicy", dead_letters(retry=bob_topic)),
    }


@pytest.mark.parametrize("case", list(_cross_tenant_requests(Tenants("a", "b"))))
async def test_every_admin_request_naming_another_tenants_resource_is_refused(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants, case: str,
) -> None:
    method, request = _cross_tenant_requests(tenants)[case]
    await admin.create_topic(request.topic)  # its policies are read back below: reads need the topic (issue 22)
    await admin.grant_permission("bob-app", ["consume"], namespace=f"{tenants.bob}/ns")
    with pytest.raises(AuthorizationError, match=tenants.bob):
        await _admin_call(server, pki, keys.token(tenants.admin_role(tenants.alice)), method, request)
    # Nothing of bob's changed, nor of alice's: the request was refused whole.
    for tenant in (tenants.alice, tenants.bob):
        assert not (await admin.namespace_policies(f"{tenant}/ns")).HasField("message_ttl_seconds")
    assert not (await admin.topic_policies(request.topic)).HasField("message_ttl_seconds")
    assert await admin.get_permissions(namespace=f"{tenants.bob}/ns") == {"bob-app": ["consume"]}
    assert await admin.get_permissions(namespace=f"{tenants.alice}/ns") == {}
    assert await admin.dead_letter_policy(request.topic, "s") == broker_pb2.DeadLetterPolicy()


async def test_a_request_naming_a_field_its_call_does_not_use_is_refused(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants,
) -> None:
    # Even a super-user, whom every tenant lets through: the call says what was wrong.
    alice_ns, alice_topic = f"{tenants.alice}/ns", tenants.topic(tenants.alice)
    await admin.create_topic(alice_topic)  # its policies are read back below: reads need the topic (issue 22)
    ttl = admin_pb2.Policies(message_ttl_seconds=1)
    token = keys.token(ADMIN)
    with pytest.raises(InvalidArgumentError, match="SetNamespacePolicies acts on a namespace: leave topic empty"):
        await _admin_call(server, pki, token, "SetNamespacePolicies",
                          admin_pb2.SetPoliciesRequest(namespace=alice_ns, topic=alice_topic, policies=ttl))
    with pytest.raises(InvalidArgumentError, match="SetTopicPolicies acts on a topic: leave namespace empty"):
        await _admin_call(server, pki, token, "SetTopicPolicies",
                          admin_pb2.SetPoliciesRequest(namespace=alice_ns, topic=alice_topic, policies=ttl))
    for method, request in (
        ("GrantPermission", admin_pb2.GrantPermissionRequest(namespace=alice_ns, topic=alice_topic, role="r",
                                                             actions=["consume"])),
        ("RevokePermission", admin_pb2.RevokePermissionRequest(namespace=alice_ns, topic=alice_topic, role="r")),
        ("GetPermissions", admin_pb2.PermissionsRequest(namespace=alice_ns, topic=alice_topic)),
    ):
        with pytest.raises(InvalidArgumentError, match="give exactly one"):
            await _admin_call(server, pki, token, method, request)
    assert not (await admin.namespace_policies(alice_ns)).HasField("message_ttl_seconds")
    assert not (await admin.topic_policies(alice_topic)).HasField("message_ttl_seconds")
    assert await admin.get_permissions(namespace=alice_ns) == {}


@pytest.mark.parametrize("field", ["dead_letter_topic", "retry_letter_topic"])
async def test_a_dead_letter_policy_removal_naming_another_tenants_topic_is_refused(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants, field: str,
) -> None:
    # max_redeliver_count 0 removes the policy, so the topics it names were never authorized: the
    # request must not pass for one that names bob's topic (found by tests/fuzz/test_hostile_fuzz.py).
    topic, victim = tenants.topic(tenants.alice), tenants.topic(tenants.bob)
    await admin.set_dead_letter_policy(topic, "s", 3)
    removal = admin_pb2.SetSubscriptionDeadLetterPolicyRequest(
        topic=topic, subscription="s", policy=broker_pb2.DeadLetterPolicy(max_redeliver_count=0, **{field: victim}))
    for role in (tenants.admin_role(tenants.alice), ADMIN):
        with pytest.raises(InvalidArgumentError, match=(
                f"max_redeliver_count 0 removes the subscription's dead-letter policy: leave {field} empty "
                f"\\(it is '{victim}'\\)")):
            await _admin_call(server, pki, keys.token(role), "SetSubscriptionDeadLetterPolicy", removal)
    assert (await admin.dead_letter_policy(topic, "s")).max_redeliver_count == 3  # refused whole
    # Without topics, alice's admin removes its own subscription's policy.
    await _admin_call(server, pki, keys.token(tenants.admin_role(tenants.alice)), "SetSubscriptionDeadLetterPolicy",
                      admin_pb2.SetSubscriptionDeadLetterPolicyRequest(topic=topic, subscription="s"))
    assert await admin.dead_letter_policy(topic, "s") == broker_pb2.DeadLetterPolicy()


# ---- item 2: dead-letter and retry topics need produce for the subscriber's role ----

@pytest.mark.parametrize("field", ["dead_letter_topic", "retry_letter_topic"])
async def test_a_consume_only_role_cannot_subscribe_with_a_dead_letter_or_retry_topic_in_another_tenant(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants, field: str,
) -> None:
    topic, target = tenants.topic(tenants.alice), tenants.topic(tenants.bob, "stolen")
    own = f"{topic}-letters"  # a topic of alice's it may produce to, for the policy's other field
    await admin.grant_permission("alice-reader", ["consume"], namespace=f"{tenants.alice}/ns")
    await admin.grant_permission("alice-reader", ["produce"], topic=own)
    other = "retry_letter_topic" if field == "dead_letter_topic" else "dead_letter_topic"
    async with _client(server, pki, keys, "alice-reader") as client:
        await (await _until_allowed(lambda: client.subscribe(topic, "plain"))).close()  # consume: granted
        policy = DeadLetterPolicy(1, **{field: target, other: own})
        with pytest.raises(AuthorizationError, match=f"{field} of the dead-letter policy.*may not produce on {target}"):
            await client.subscribe(topic, "s", ConsumerType.Shared, dead_letter_policy=policy)
        # Its own namespace's default names need produce too: the worker writes there as this role.
        with pytest.raises(AuthorizationError, match=f"may not produce on {topic}-s-DLQ"):
            await client.subscribe(topic, "s", ConsumerType.Shared, dead_letter_policy=DeadLetterPolicy(1))
        assert await admin.list_subscriptions(topic) == ["plain"]  # the refused ones made none
        # Topics it may produce to: subscribed.
        await (await client.subscribe(topic, "s", ConsumerType.Shared,
                                      dead_letter_policy=DeadLetterPolicy(1, own, own))).close()
    assert await admin.list_topics(f"{tenants.bob}/ns") == []


async def test_a_tenant_admin_sets_dead_letter_topics_only_where_it_may_produce(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants,
) -> None:
    topic = tenants.topic(tenants.alice)
    async with _admin(server, pki, keys, tenants.admin_role(tenants.alice)) as alice:
        for field in ("dead_letter_topic", "retry_letter_topic"):
            with pytest.raises(AuthorizationError, match=f"may not produce on persistent://{tenants.bob}/ns/x"):
                await alice.set_dead_letter_policy(topic, "s", 3, **{field: f"persistent://{tenants.bob}/ns/x"})
        assert await alice.dead_letter_policy(topic, "s") == broker_pb2.DeadLetterPolicy()
        # bob lets alice's admin role produce to one topic of its: now it may name it.
        shared = f"persistent://{tenants.bob}/ns/from-alice"
        await admin.grant_permission(tenants.admin_role(tenants.alice), ["produce"], topic=shared)
        set_policy = await _until_allowed(lambda: alice.set_dead_letter_policy(topic, "s", 3, dead_letter_topic=shared))
        assert set_policy.dead_letter_topic == shared


# ---- item 2: the worker acts as the subscriber ----

async def test_letters_move_to_a_dead_letter_topic_the_subscriber_may_produce_to(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants,
) -> None:
    await admin.grant_permission("alice-app", ["produce", "consume"], namespace=f"{tenants.alice}/ns")
    topic = tenants.topic(tenants.alice)
    async with _client(server, pki, keys, "alice-app") as client:
        nacker = await _until_allowed(lambda: _nacking(client, topic, DeadLetterPolicy(1)))
        await _produce(client, topic, ["a", "b", "c"])

        async def drained() -> bool:
            stats = await _subscription(admin, topic)
            return (stats.dead_letters, stats.backlog_entries) == (0, 0)

        await eventually(drained, "the letters to move", timeout=60)
        await nacker.close()
        assert sorted(await _read_all(client, f"{topic}-s-DLQ")) == ["a", "b", "c"]
    # The role may consume there too: the worker made its initial subscription, as that role.
    assert await admin.list_subscriptions(f"{topic}-s-DLQ") == ["herald-dlq-replay"]


async def test_without_consume_on_the_dead_letter_topic_letters_move_but_no_subscription_is_made_there(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants,
) -> None:
    topic = tenants.topic(tenants.alice)
    dlq, retry = f"{topic}-dead", f"{topic}-retry"
    await admin.grant_permission("alice-reader", ["consume"], topic=topic)
    for target in (dlq, retry):
        await admin.grant_permission("alice-reader", ["produce"], topic=target)
    async with (_client(server, pki, keys, "alice-reader") as client,
                _client(server, pki, keys, tenants.admin_role(tenants.alice)) as alice):
        nacker = await _until_allowed(lambda: _nacking(client, topic, DeadLetterPolicy(1, dlq, retry)))
        await _produce(alice, topic, ["x", "y"])

        async def moved() -> bool:
            return (await _subscription(admin, topic)).backlog_entries == 0

        await eventually(moved, "the letters to move", timeout=60)
        await nacker.close()
        assert sorted(await _read_all(alice, dlq)) == ["x", "y"]
    # The subscription is made before the first letter is published: none was.
    assert await admin.list_subscriptions(dlq) == []


async def test_the_worker_has_no_more_right_than_the_subscriber_had(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants,
) -> None:
    topic = tenants.topic(tenants.alice)
    shared = f"persistent://{tenants.bob}/ns/from-alice"
    await admin.grant_permission("alice-app", ["produce", "consume"], namespace=f"{tenants.alice}/ns")
    async with (_admin(server, pki, keys, tenants.admin_role(tenants.bob)) as bob,
                _client(server, pki, keys, "alice-app") as client):
        # bob lets alice's application produce to one topic of its: alice-app may name it.
        await bob.grant_permission("alice-app", ["produce"], topic=shared)
        nacker = await _until_allowed(lambda: _nacking(client, topic, DeadLetterPolicy(1, shared)))
        # ...then takes it back, before any letter: the worker must not write there for alice-app.
        await bob.revoke_permission("alice-app", topic=shared)

        async def revoked() -> bool:
            # The broker's own check, as the worker's publish will meet it; it makes nothing in bob's.
            try:
                await (await client.subscribe(topic, "probe", dead_letter_policy=DeadLetterPolicy(1, shared))).close()
            except AuthorizationError:
                return True
            return False

        await eventually(revoked, "the revoke to take effect", timeout=60)
        refused_before = _metrics(server).get(REFUSED_MOVES, 0.0)
        await _produce(client, topic, ["p", "q"])

        async def refused() -> bool:
            return _metrics(server).get(REFUSED_MOVES, 0.0) > refused_before

        await eventually(refused, "the worker's move to be refused", timeout=60)
        assert await admin.list_topics(f"{tenants.bob}/ns") == []  # no topic made, nothing written
        assert (await _subscription(admin, topic)).backlog_entries == 2  # the letters wait, unacknowledged
        # Granted again: the letters waiting move there.
        await bob.grant_permission("alice-app", ["produce"], topic=shared)

        async def moved() -> bool:
            return (await _subscription(admin, topic)).backlog_entries == 0

        await eventually(moved, "the letters to move once allowed", timeout=60)
        await nacker.close()
    async with _client(server, pki, keys, ADMIN) as reader:
        assert sorted(await _read_all(reader, shared)) == ["p", "q"]
    # alice-app may not consume there: the worker made no subscription in bob's namespace for it.
    assert await admin.list_subscriptions(shared) == []


async def test_the_worker_does_not_write_to_another_tenant_on_a_policy_stored_before_authorization(
    tmp_path: Path, pki: Pki, keys: Keys,
) -> None:
    # A policy kept from before authorization was on (or before the policies kept a role) names no
    # role: the worker acts as itself for it, and a dlq-worker role has no right of its own.
    legacy = secure_process(tmp_path / "data", pki, keys, dlq_worker=True, authorization=False)
    legacy.start()
    try:
        async with _admin(legacy, pki, keys, "alice-ops") as anyone:  # authorization off: anyone may
            tenants = await _make_tenants(anyone)
            topic = tenants.topic(tenants.alice)
            await anyone.set_dead_letter_policy(topic, "s", 1, dead_letter_topic=tenants.topic(tenants.bob, "stolen"))
        legacy.stop()
        legacy.extra_args = secure_args(pki, keys)
        legacy.start()
        async with _admin(legacy, pki, keys) as admin:
            await admin.grant_permission("alice-app", ["produce", "consume"], namespace=f"{tenants.alice}/ns")
            async with _client(legacy, pki, keys, "alice-app") as client:
                nacker = await _until_allowed(lambda: _nacking(client, topic, None))  # the stored policy applies
                await _produce(client, topic, ["secret"])

                async def refused() -> bool:
                    return _metrics(legacy).get(REFUSED_MOVES, 0.0) > 0

                await eventually(refused, "the worker's move to be refused", timeout=60)
                assert await admin.list_topics(f"{tenants.bob}/ns") == []
                assert (await _subscription(admin, topic)).backlog_entries == 1
                assert _metrics(legacy).get(MOVED, 0.0) == 0
                await nacker.close()
    finally:
        legacy.stop()


# ---- item 2: a replay republishes only where the replaying role may produce ----

def _herald(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, timeout=120,
                          env=service_env(), check=False)


async def test_replay_refuses_to_republish_into_a_topic_the_replaying_role_cannot_produce_to(
    server: StandaloneProcess, pki: Pki, keys: Keys, admin: AdminClient, tenants: Tenants,
) -> None:
    topic = tenants.topic(tenants.alice)
    victim = tenants.topic(tenants.bob, "victim")
    await admin.create_subscription(victim, "check", InitialPosition.Earliest)
    alice_role = tenants.admin_role(tenants.alice)
    async with _client(server, pki, keys, alice_role) as alice:
        # alice writes into its own dead-letter topic a message naming bob's topic as its origin.
        producer = await alice.create_producer(f"{topic}-s-DLQ")
        await producer.send(b"forged", properties={"REAL_TOPIC": victim})
        await producer.close()
    replayed = _herald("admin", "--url", server.service_url, "--auth-token-file", str(keys.token_file(alice_role)),
                       "--tls-trust-certs-file", str(pki.ca_cert), "dlq", "replay", topic, "-s", "s")
    assert replayed.returncode != 0, replayed.stdout
    assert f"cannot replay to {victim}" in replayed.stderr, replayed.stderr
    assert f"role '{alice_role}' may not" in replayed.stderr, replayed.stderr
    stats = await admin.topic_stats(victim)
    assert (stats.msg_in_counter, [s.msg_backlog for s in stats.subscriptions]) == (0, [0])
    # The message stays in the dead-letter topic, not acknowledged by the replay.
    assert (await _subscription(admin, f"{topic}-s-DLQ", "herald-dlq-replay")).msg_backlog == 1



# ---- a dlq-worker role acts for another role only to move dead letters ----

async def test_a_dlq_worker_role_acts_for_another_role_only_in_the_calls_that_move_dead_letters(
    tmp_path: Path, keys: Keys,
) -> None:
    # A lookup of its own (real gRPC, embedded metadata store), whose dlq-worker role is no proxy's
    # nor broker's (the standalone's internal role is all three): its token must not be every role's.
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    lookup = LookupServer(LookupSettings(
        metadata_url="embedded", port=0, metrics_port=-1, authentication_enabled=True,
        token_secret_key_file=str(keys.secret_key), authorization_enabled=True, superuser_roles=[ADMIN],
        broker_roles=["broker"], dlq_worker_roles=["dlq-worker"]), store)
    await lookup.start()
    try:
        async with grpc.aio.insecure_channel(lookup.address) as channel:
            stub = lookup_pb2_grpc.LookupServiceStub(channel)

            async def as_worker_for(role: str, call: Callable[..., Awaitable[Any]], request: Any) -> Any:
                metadata = [("authorization", f"Bearer {keys.token('dlq-worker')}"),
                            ("x-herald-original-principal", role)]
                try:
                    return await call(request, metadata=metadata, timeout=5)
                except grpc.aio.AioRpcError as exc:
                    raise error_from_rpc(exc) from None

            metadata_request = lookup_pb2.PartitionedTopicMetadataRequest(topic="persistent://public/default/t")
            # Acting for a role in a call that moves letters: that role is authorized, not the worker.
            assert (await as_worker_for(ADMIN, stub.GetPartitionedTopicMetadata, metadata_request)).partitions == 0
            with pytest.raises(AuthorizationError, match="'nobody' may not look up"):
                await as_worker_for("nobody", stub.GetPartitionedTopicMetadata, metadata_request)
            # Acting for a super-user in any other call: refused, whatever that role may do.
            with pytest.raises(AuthorizationError, match=r"only to move dead letters.*RegisterBroker"):
                await as_worker_for(ADMIN, stub.RegisterBroker, lookup_pb2.RegisterBrokerRequest(
                    broker_id="rogue", address="127.0.0.1:1", cluster="standalone"))
    finally:
        await lookup.stop()
        await store.close()
