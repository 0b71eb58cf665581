"""The broker enforces namespace and topic policies, through real processes: a namespace's policy
applies to its topics, a topic's own policy overrides it, and a change made while a topic is
loaded applies at once (no unload). Backlog quotas (size and age, each of the three policies),
producer and consumer limits, deduplication, required encryption, the maximum message size,
message TTL, retention, storage quorums (on a local cluster), deleting topics, and unknown
namespaces.

Policies are set with the admin API; producing and consuming go over the wire (tests.wire) or
through the client. One standalone serves the module, with short check intervals and small
ledgers (HERALD_BROKER_* settings), each test in namespaces of its own."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2, lookup_pb2
from herald.client import AsyncClient, InitialPosition, MessageTooLargeError
from herald.client.admin import AdminClient
from herald.common.errors import NotFoundError, PreconditionFailedError
from herald.local_cluster import LocalCluster
from herald.metadata.redis import RedisMetadataStore
from herald.storage.client.ledger_metadata import read_ledger_metadata

from tests.conftest import StandaloneProcess, running_standalone, service_env
from tests.helpers import eventually, unique_name, unique_topic
from tests.wire import WireClient, WireConsumer, WireError, WireProducer, make_entry

T = TypeVar("T")
ENTRIES_PER_LEDGER = 4
CHECK_INTERVAL = 0.2  # backlog quota, retention and expiry checks, seconds
FRAMING_ALLOWANCE = 10 * 1024  # broker.producer.ENTRY_FRAMING_ALLOWANCE: header, metadata, framing


@pytest.fixture(scope="module")
def policy_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone that checks backlog quotas, retention and message TTLs often and rolls ledgers
    over every few entries, so that quotas act and ledgers are trimmed within a test's patience."""
    with running_standalone(
        tmp_path_factory.mktemp("policies") / "data", backlog_quota_check_interval=CHECK_INTERVAL,
        retention_check_interval=CHECK_INTERVAL, message_expiry_check_interval=CHECK_INTERVAL,
        max_entries_per_ledger=ENTRIES_PER_LEDGER, min_ledger_rollover_seconds=0,
    ) as server:
        yield server


@pytest.fixture
async def admin(policy_standalone: StandaloneProcess) -> AsyncIterator[AdminClient]:
    async with AdminClient(policy_standalone.service_url, timeout=20) as client:
        yield client


@pytest.fixture
async def wire(policy_standalone: StandaloneProcess) -> AsyncIterator[WireClient]:
    async with WireClient(policy_standalone.port) as client:
        yield client


# ---- helpers ----

async def new_namespace(admin: AdminClient, **policies: Any) -> str:
    """A fresh tenant with one namespace holding these policies; returns "tenant/namespace"."""
    tenant = unique_name("tenant")
    await admin.create_tenant(tenant)
    namespace = f"{tenant}/ns"
    await admin.create_namespace(namespace, admin_pb2.Policies(**policies))
    return namespace


def receipt_of(reply: broker_pb2.ProduceResponse) -> tuple[int, int]:
    assert reply.HasField("receipt"), reply
    return reply.receipt.ledger_id, reply.receipt.entry_id


def error_of(reply: broker_pb2.ProduceResponse) -> tuple[int, str]:
    assert reply.HasField("send_error"), reply
    return reply.send_error.error.code, reply.send_error.error.message


async def stored_entries(admin: AdminClient, topic: str) -> int:
    return (await admin.internal_stats(topic)).number_of_entries


async def new_producer(wire: WireClient, topic: str, name: str = "") -> WireProducer:
    """A producer, retried while the broker still counts one that just left (it notices a closed
    stream asynchronously) or has not yet applied a raised limit."""
    async def attempt() -> WireProducer | None:
        try:
            return await wire.producer(topic, name)
        except WireError as error:
            if error.code != common_pb2.PRODUCER_BUSY:
                raise
            return None

    return await eventually(attempt, f"a producer accepted on {topic}")


async def new_consumer(wire: WireClient, topic: str, subscription: str, **options: Any) -> WireConsumer:
    """A consumer, retried while the broker still counts one that just left (see new_producer)."""
    async def attempt() -> WireConsumer | None:
        try:
            return await wire.consumer(topic, subscription, **options)
        except WireError as error:
            if error.code != common_pb2.CONSUMER_BUSY:
                raise
            return None

    return await eventually(attempt, f"a consumer accepted on {topic}/{subscription}")


async def refused_producer(wire: WireClient, topic: str, address: str | None = None) -> WireError:
    with pytest.raises(WireError) as refused:
        await wire.producer(topic, address=address)
    return refused.value


async def refused_consumer(
    wire: WireClient, topic: str, subscription: str, address: str | None = None, **options: Any,
) -> WireError:
    with pytest.raises(WireError) as refused:
        await wire.consumer(topic, subscription, address, **options)
    return refused.value


# ---- unknown tenants and namespaces ----

async def test_producing_or_subscribing_in_a_namespace_that_does_not_exist_is_refused(
    admin: AdminClient, wire: WireClient, policy_standalone: StandaloneProcess,
) -> None:
    """Lookup refuses the topic (no owner is assigned to it), and so does the broker itself when a
    client dials it directly."""
    broker = f"127.0.0.1:{policy_standalone.broker_port}"
    tenant = unique_name("tenant")
    missing_tenant = f"Tenant {tenant} does not exist"
    await refused_by_lookup(wire, f"persistent://{tenant}/ns/t", missing_tenant)
    error = await refused_producer(wire, f"persistent://{tenant}/ns/t", address=broker)
    assert (error.code, error.error.message) == (common_pb2.NOT_FOUND, missing_tenant)
    error = await refused_consumer(wire, f"persistent://{tenant}/ns/t", "s", address=broker)
    assert (error.code, error.error.message) == (common_pb2.NOT_FOUND, missing_tenant)

    await admin.create_tenant(tenant)
    missing_namespace = f"Namespace {tenant}/missing does not exist"
    for topic in (f"persistent://{tenant}/missing/t", f"non-persistent://{tenant}/missing/t"):
        await refused_by_lookup(wire, topic, missing_namespace)
        error = await refused_producer(wire, topic, address=broker)
        assert (error.code, error.error.message) == (common_pb2.NOT_FOUND, missing_namespace)
        error = await refused_consumer(wire, topic, "s", address=broker)
        assert (error.code, error.error.message) == (common_pb2.NOT_FOUND, missing_namespace)
    assert await admin.list_namespaces(tenant) == []  # nothing was made on the way

    # public/default exists from the start: short names work on a fresh standalone.
    producer = await wire.producer(unique_name("short-name"))
    assert receipt_of(await producer.send(b"x"))[0] >= 0
    assert "public/default" in await admin.list_namespaces("public")


async def refused_by_lookup(wire: WireClient, topic: str, message: str) -> None:
    """Every topic discovery call answers NOT_FOUND with `message`."""
    calls = [
        wire.lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic)),
        wire.lookup.GetTopicRoute(lookup_pb2.TopicRouteRequest(topic=topic)),
        wire.lookup.GetPartitionedTopicMetadata(lookup_pb2.PartitionedTopicMetadataRequest(topic=topic)),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        assert refused.value.details() == f"{common_pb2.NOT_FOUND}:{message}"


async def test_the_client_is_told_the_namespace_does_not_exist(policy_standalone: StandaloneProcess) -> None:
    tenant = unique_name("tenant")
    async with AsyncClient(policy_standalone.service_url, operation_timeout=20) as client:
        with pytest.raises(NotFoundError, match=f"Tenant {tenant} does not exist"):
            await client.create_producer(f"persistent://{tenant}/ns/t")
        with pytest.raises(NotFoundError, match=f"Tenant {tenant} does not exist"):
            await client.subscribe(f"persistent://{tenant}/ns/t", "s")


# ---- producer and consumer limits ----

async def test_a_producer_over_the_namespaces_limit_is_refused_until_one_leaves(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, max_producers_per_topic=2)
    topic = unique_topic("t", namespace)
    first, second = await wire.producer(topic), await wire.producer(topic)
    error = await refused_producer(wire, topic)
    assert (error.code, error.error.message) == (
        common_pb2.PRODUCER_BUSY, f"Topic reached max producers limit (2): {topic} has 2 producers")
    for producer in (first, second):  # the others keep working
        receipt_of(await producer.send(b"still here"))
    await first.close()
    third = await new_producer(wire, topic)
    receipt_of(await third.send(b"after one left"))
    assert await stored_entries(admin, topic) == 3


async def test_a_topics_producer_limit_overrides_its_namespaces_live(admin: AdminClient, wire: WireClient) -> None:
    namespace = await new_namespace(admin, max_producers_per_topic=1)
    topic, other = unique_topic("t", namespace), unique_topic("t", namespace)
    await wire.producer(topic)
    await wire.producer(other)
    assert (await refused_producer(wire, topic)).code == common_pb2.PRODUCER_BUSY
    # Raised for one topic while it is loaded: a second producer gets in there, not on the other.
    await admin.set_topic_policies(topic, admin_pb2.Policies(max_producers_per_topic=2))
    await new_producer(wire, topic)
    error = await refused_producer(wire, topic)
    assert error.error.message == f"Topic reached max producers limit (2): {topic} has 2 producers"
    error = await refused_producer(wire, other)
    assert error.error.message == f"Topic reached max producers limit (1): {other} has 1 producers"
    # The namespace's limit changed live reaches the topic without an override of its own.
    await admin.set_namespace_policies(namespace, admin_pb2.Policies(max_producers_per_topic=0))
    await new_producer(wire, other)
    await wire.producer(other)
    assert (await refused_producer(wire, topic)).code == common_pb2.PRODUCER_BUSY  # its override stands


async def test_a_consumer_over_the_topics_limit_is_refused_until_one_leaves(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, max_consumers_per_topic=2)
    topic = unique_topic("t", namespace)
    producer = await wire.producer(topic)
    first = await wire.consumer(topic, "a")
    second = await wire.consumer(topic, "b", type=broker_pb2.SHARED)
    for subscription in ("b", "c"):
        error = await refused_consumer(wire, topic, subscription, type=broker_pb2.SHARED)
        assert (error.code, error.error.message) == (
            common_pb2.CONSUMER_BUSY, f"Topic reached max consumers limit (2): {topic} has 2 consumers")
    receipt_of(await producer.send(b"m"))
    for consumer in (first, second):  # the others keep working
        await consumer.flow(10)
        assert len(await consumer.receive(1)) == 1
    await first.close()
    third = await new_consumer(wire, topic, "c", initial_position=broker_pb2.EARLIEST)
    await third.flow(10)
    assert len(await third.receive(1)) == 1


async def test_a_consumer_over_the_subscriptions_limit_is_refused_until_one_leaves(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, max_consumers_per_subscription=1)
    topic = unique_topic("t", namespace)
    first = await wire.consumer(topic, "s", type=broker_pb2.SHARED)
    error = await refused_consumer(wire, topic, "s", type=broker_pb2.SHARED)
    assert (error.code, error.error.message) == (
        common_pb2.CONSUMER_BUSY, "Subscription reached max consumers limit (1): it has 1 consumers")
    await wire.consumer(topic, "other", type=broker_pb2.SHARED)  # another subscription has room
    # A topic override, set live, lets a second consumer into the subscription.
    await admin.set_topic_policies(topic, admin_pb2.Policies(max_consumers_per_subscription=2))
    second = await new_consumer(wire, topic, "s", type=broker_pb2.SHARED)
    error = await refused_consumer(wire, topic, "s", type=broker_pb2.SHARED)
    assert error.error.message == "Subscription reached max consumers limit (2): it has 2 consumers"
    await first.close()
    await second.close()
    await new_consumer(wire, topic, "s", type=broker_pb2.SHARED)
    # The topic limit, lowered live on the namespace, refuses newcomers; those connected stay.
    await admin.set_namespace_policies(namespace, admin_pb2.Policies(max_consumers_per_topic=1))

    async def refused() -> WireError | None:
        try:
            consumer = await wire.consumer(topic, unique_name("sub"), type=broker_pb2.SHARED)
        except WireError as error:
            return error
        await consumer.close()
        return None

    error = await eventually(refused, "the lowered topic limit applied")
    assert error.code == common_pb2.CONSUMER_BUSY
    assert error.error.message.startswith(f"Topic reached max consumers limit (1): {topic} has ")


async def test_producers_registering_at_once_never_pass_the_limit_together(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, max_producers_per_topic=1)
    for topic in (unique_topic("t", namespace), unique_topic("np", namespace, persistent=False)):
        await wire.owner(topic)  # looked up once, so that the registrations race at the broker
        results = await asyncio.gather(*(wire.producer(topic) for _ in range(4)), return_exceptions=True)
        refused = [r for r in results if isinstance(r, WireError)]
        assert len(refused) == 3, results
        assert {r.code for r in refused} == {common_pb2.PRODUCER_BUSY}


async def test_non_persistent_topics_follow_their_namespaces_limits_live(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, max_producers_per_topic=1, max_consumers_per_topic=1,
                                    encryption_required=True)
    topic = unique_topic("np", namespace, persistent=False)
    producer = await wire.producer(topic)
    error = await refused_producer(wire, topic)
    assert error.error.message == f"Topic reached max producers limit (1): {topic} has 1 producers"
    await wire.consumer(topic, "a")
    error = await refused_consumer(wire, topic, "b")
    assert error.error.message == f"Topic reached max consumers limit (1): {topic} has 1 consumers"
    assert error_of(await producer.send(b"plain")) == (common_pb2.METADATA_ERROR, "Messages must be encrypted")

    await admin.set_namespace_policies(namespace, admin_pb2.Policies(
        max_producers_per_topic=2, max_consumers_per_topic=2, encryption_required=False))
    await new_producer(wire, topic)
    await new_consumer(wire, topic, "b")

    async def accepted() -> bool:
        return (await producer.send(b"plain")).HasField("receipt")

    await eventually(accepted, "encryption no longer required")


async def test_a_partitioned_topics_policies_apply_to_its_partitions_unless_overridden(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin)
    base = unique_topic("partitioned", namespace)
    await admin.create_topic(base, partitions=2)
    first, second = f"{base}-partition-0", f"{base}-partition-1"
    await admin.set_topic_policies(base, admin_pb2.Policies(max_producers_per_topic=1))
    await admin.set_topic_policies(second, admin_pb2.Policies(max_producers_per_topic=2))
    producer = await wire.producer(first)
    error = await refused_producer(wire, first)
    assert error.error.message == f"Topic reached max producers limit (1): {first} has 1 producers"
    await wire.producer(second)
    await wire.producer(second)
    # Changed on the partitioned topic while its partitions are loaded.
    await admin.set_topic_policies(base, admin_pb2.Policies(encryption_required=True))

    async def refused() -> tuple[int, str] | None:
        reply = await producer.send(b"plain")
        return error_of(reply) if reply.HasField("send_error") else None

    assert await eventually(refused, "encryption required") == (common_pb2.METADATA_ERROR, "Messages must be encrypted")


# ---- deduplication ----

async def test_with_deduplication_off_a_resent_sequence_id_is_stored_again(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, deduplication_enabled=False)
    topic, overridden = unique_topic("t", namespace), unique_topic("t", namespace)
    await admin.set_topic_policies(overridden, admin_pb2.Policies(deduplication_enabled=True))
    for name, stored_twice in ((topic, True), (overridden, False)):
        producer = await wire.producer(name)
        first = receipt_of(await producer.send_entry(make_entry(producer.name, 1, b"a"), 1))
        again = receipt_of(await producer.send_entry(make_entry(producer.name, 1, b"a"), 1))
        if stored_twice:
            assert again == (first[0], first[1] + 1)
        else:
            assert again == (-1, -1)
        assert await stored_entries(admin, name) == (2 if stored_twice else 1)


async def test_turning_deduplication_off_and_on_applies_to_a_loaded_topic(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    producer = await wire.producer(topic)
    receipt_of(await producer.send_entry(make_entry(producer.name, 1, b"a"), 1))
    assert receipt_of(await producer.send_entry(make_entry(producer.name, 1, b"a"), 1)) == (-1, -1)  # on by default

    await admin.set_namespace_policies(namespace, admin_pb2.Policies(deduplication_enabled=False))
    sequence = itertools.count(2)

    async def stored_a_resend() -> bool:
        sequence_id = next(sequence)
        receipt_of(await producer.send_entry(make_entry(producer.name, sequence_id, b"b"), sequence_id))
        return receipt_of(await producer.send_entry(make_entry(producer.name, sequence_id, b"b"), sequence_id))[0] >= 0

    await eventually(stored_a_resend, "deduplication turned off")
    await admin.set_topic_policies(topic, admin_pb2.Policies(deduplication_enabled=True))

    async def dropped_a_resend() -> bool:
        sequence_id = next(sequence)
        receipt_of(await producer.send_entry(make_entry(producer.name, sequence_id, b"c"), sequence_id))
        again = await producer.send_entry(make_entry(producer.name, sequence_id, b"c"), sequence_id)
        return receipt_of(again) == (-1, -1)

    await eventually(dropped_a_resend, "deduplication turned on again")


# ---- encryption ----

async def test_a_namespace_requiring_encryption_refuses_unencrypted_messages(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, encryption_required=True)
    topic, overridden = unique_topic("t", namespace), unique_topic("t", namespace)
    await admin.set_topic_policies(overridden, admin_pb2.Policies(encryption_required=False))
    producer = await wire.producer(topic)
    assert error_of(await producer.send(b"plain")) == (common_pb2.METADATA_ERROR, "Messages must be encrypted")
    receipt_of(await producer.send(b"sealed", encryption_keys=("key-1",)))
    # The checksum is checked first (SEEDS §4): a corrupt unencrypted entry is a checksum error.
    corrupt = bytearray(make_entry(producer.name, 10, b"plain"))
    corrupt[-1] ^= 0x55
    assert error_of(await producer.send_entry(bytes(corrupt), 10)) == (
        common_pb2.CHECKSUM_ERROR, "Checksum failed on the broker")
    assert await stored_entries(admin, topic) == 1
    # The topic's own policy overrides the namespace's.
    plain = await wire.producer(overridden)
    receipt_of(await plain.send(b"plain"))


async def test_requiring_encryption_applies_to_a_loaded_topic(admin: AdminClient, wire: WireClient) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    producer = await wire.producer(topic)
    receipt_of(await producer.send(b"plain"))
    await admin.set_topic_policies(topic, admin_pb2.Policies(encryption_required=True))

    async def refused() -> tuple[int, str] | None:
        reply = await producer.send(b"plain")
        return error_of(reply) if reply.HasField("send_error") else None

    assert await eventually(refused, "encryption required") == (common_pb2.METADATA_ERROR, "Messages must be encrypted")
    receipt_of(await producer.send(b"sealed", encryption_keys=("key-1",)))
    await admin.set_topic_policies(topic, clear=["encryption_required"])

    async def accepted() -> bool:
        return (await producer.send(b"plain")).HasField("receipt")

    await eventually(accepted, "encryption no longer required")


# ---- maximum message size ----

async def test_the_namespaces_max_message_size_is_reported_and_enforced(
    admin: AdminClient, wire: WireClient, policy_standalone: StandaloneProcess,
) -> None:
    limit = 16 * 1024
    namespace = await new_namespace(admin, max_message_size=limit)
    topic, overridden = unique_topic("t", namespace), unique_topic("t", namespace)
    await admin.set_topic_policies(overridden, admin_pb2.Policies(max_message_size=4 * limit))
    producer, registered = await wire.register(topic)
    assert registered.max_message_size == limit
    receipt_of(await producer.send(b"x" * limit))
    too_large = make_entry(producer.name, 100, b"x" * (limit + FRAMING_ALLOWANCE + 1))
    assert error_of(await producer.send_entry(too_large, 100)) == (
        common_pb2.MESSAGE_TOO_LARGE,
        f"entry of {len(too_large)} bytes is larger than the maximum message size of {limit} bytes: "
        "send smaller messages or smaller batches")
    assert await stored_entries(admin, topic) == 1
    # The topic's own limit overrides the namespace's.
    big, registered = await wire.register(overridden)
    assert registered.max_message_size == 4 * limit
    receipt_of(await big.send_entry(make_entry(big.name, 100, b"x" * (limit + FRAMING_ALLOWANCE + 1)), 100))

    # The client learns the limit at registration: it refuses a larger message itself, and never
    # batches messages into an entry the broker would refuse.
    async with AsyncClient(policy_standalone.service_url) as client:
        sender = await client.create_producer(topic, batching_max_publish_delay=0.05)
        assert sender.max_message_size == limit
        with pytest.raises(MessageTooLargeError, match=f"message of {limit + 1} bytes is larger than the maximum "
                                                        f"message size of {limit} bytes"):
            await sender.send(b"x" * (limit + 1))
        sends = [await sender.send_async(b"%03d" % i + b"x" * (limit - 3)) for i in range(8)]
        ids = await asyncio.gather(*sends)
        assert len({(i.ledger_id, i.entry_id) for i in ids}) == 8  # one message per entry


async def test_a_changed_max_message_size_applies_to_a_loaded_topic(admin: AdminClient, wire: WireClient) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    producer, registered = await wire.register(topic)
    assert registered.max_message_size == 5 * 1024 * 1024  # the broker's default
    value = b"x" * (64 * 1024)
    receipt_of(await producer.send(value))
    await admin.set_namespace_policies(namespace, admin_pb2.Policies(max_message_size=32 * 1024))

    async def refused() -> tuple[int, str] | None:
        reply = await producer.send(value)
        return error_of(reply) if reply.HasField("send_error") else None

    code, message = await eventually(refused, "the lower limit applied")
    assert code == common_pb2.MESSAGE_TOO_LARGE
    assert message.endswith("is larger than the maximum message size of 32768 bytes: "
                            "send smaller messages or smaller batches")
    _, registered = await wire.register(topic)
    assert registered.max_message_size == 32 * 1024


# ---- backlog quota ----

VALUE = b"v" * 1000  # entries of equal size: sequence ids 1..127 keep their metadata equal too


def quota(limit_bytes: int = -1, limit_seconds: int = -1,
          policy: admin_pb2.BacklogQuotaPolicy.ValueType = admin_pb2.PRODUCER_EXCEPTION) -> admin_pb2.BacklogQuota:
    return admin_pb2.BacklogQuota(limit_bytes=limit_bytes, limit_seconds=limit_seconds, policy=policy)


def entry_size(producer: str = "standalone-1") -> int:
    return len(make_entry(producer, 1, VALUE))


async def send_value(producer: WireProducer, sequence_id: int, **options: Any) -> broker_pb2.ProduceResponse:
    """One entry holding VALUE under `sequence_id` (1..127)."""
    return await producer.send_entry(make_entry(producer.name, sequence_id, VALUE, **options), sequence_id)


async def fill(producer: WireProducer, count: int, first: int = 1, **options: Any) -> list[tuple[int, int]]:
    """Store `count` entries one by one (each receipt awaited); returns their positions."""
    return [receipt_of(await send_value(producer, first + i, **options)) for i in range(count)]


def quota_error(topic: str, producer: WireProducer, stored: int, limit: int) -> tuple[int, str]:
    backlog = stored * entry_size(producer.name)
    return (common_pb2.BACKLOG_QUOTA_EXCEEDED,
            f"Cannot send to {topic}: its backlog is over quota ({backlog} bytes unacknowledged, "
            f"limit {limit} bytes); consumers must catch up, or the quota be raised")


async def subscription_stats(admin: AdminClient, topic: str, subscription: str) -> admin_pb2.SubscriptionStats:
    stats = await admin.topic_stats(topic)
    return next(s for s in stats.subscriptions if s.name == subscription)


async def test_over_its_size_quota_a_send_fails_with_producer_exception_and_nothing_is_stored(
    admin: AdminClient, wire: WireClient,
) -> None:
    limit = 4 * entry_size() + entry_size() // 2
    namespace = await new_namespace(admin, backlog_quota=quota(limit_bytes=limit))
    topic = unique_topic("t", namespace)
    consumer = await wire.consumer(topic, "slow")
    producer = await wire.producer(topic)
    positions = await fill(producer, 5)  # the fifth goes over
    for sequence_id in (6, 7):
        assert error_of(await send_value(producer, sequence_id)) == quota_error(topic, producer, 5, limit)
    assert await stored_entries(admin, topic) == 5
    assert (await subscription_stats(admin, topic, "slow")).backlog_entries == 5
    newcomer = await refused_producer(wire, topic)  # as in Pulsar: its sends would only fail
    assert (newcomer.code, newcomer.error.message) == (
        common_pb2.BACKLOG_QUOTA_EXCEEDED,
        f"Cannot create a producer on {topic}: its backlog is over quota "
        f"({5 * entry_size(producer.name)} bytes unacknowledged, limit {limit} bytes); consumers must catch up, or the "
        "quota be raised")

    await consumer.ack(common_pb2.Position(ledger_id=positions[0][0], entry_id=positions[0][1]))

    async def accepted() -> bool:
        return (await send_value(producer, 6)).HasField("receipt")

    await eventually(accepted, "a send accepted once the consumer acknowledged")
    assert error_of(await send_value(producer, 7)) == quota_error(topic, producer, 5, limit)
    assert await stored_entries(admin, topic) == 6


async def test_over_its_age_quota_a_send_fails_with_producer_exception(admin: AdminClient, wire: WireClient) -> None:
    namespace = await new_namespace(admin, backlog_quota=quota(limit_seconds=60))
    topic = unique_topic("t", namespace)
    consumer = await wire.consumer(topic, "slow")
    producer = await wire.producer(topic)
    an_hour_ago = int(time.time() * 1000) - 3600_000
    (old,) = await fill(producer, 1, publish_time=an_hour_ago)
    sequence = itertools.count(2)
    accepted = 1

    async def refused() -> tuple[int, str] | None:
        nonlocal accepted
        reply = await send_value(producer, next(sequence))
        if reply.HasField("receipt"):
            accepted += 1
            return None
        return error_of(reply)

    code, message = await eventually(refused, "the age quota checked")
    assert code == common_pb2.BACKLOG_QUOTA_EXCEEDED
    assert message.startswith(f"Cannot send to {topic}: its backlog is over quota (oldest unacknowledged message 360")
    assert message.endswith("s old, limit 60s); consumers must catch up, or the quota be raised")
    assert await stored_entries(admin, topic) == accepted

    await consumer.ack(common_pb2.Position(ledger_id=old[0], entry_id=old[1]))  # the young ones may stay

    async def accepted_again() -> bool:
        return (await send_value(producer, next(sequence))).HasField("receipt")

    await eventually(accepted_again, "a send accepted once the old message was acknowledged")


async def test_a_topics_backlog_quota_overrides_its_namespaces(admin: AdminClient, wire: WireClient) -> None:
    limit = 2 * entry_size() + entry_size() // 2
    namespace = await new_namespace(admin, backlog_quota=quota(limit_bytes=limit))
    roomy, unlimited, plain = unique_topic("t", namespace), unique_topic("t", namespace), unique_topic("t", namespace)
    roomy_limit = 10 * entry_size() + entry_size() // 2
    await admin.set_topic_policies(roomy, admin_pb2.Policies(backlog_quota=quota(limit_bytes=roomy_limit)))
    await admin.set_topic_policies(unlimited, admin_pb2.Policies(backlog_quota=quota()))
    for topic in (roomy, unlimited, plain):
        await wire.consumer(topic, "slow")
    producers = {topic: await wire.producer(topic) for topic in (roomy, unlimited, plain)}
    await fill(producers[plain], 3)
    assert error_of(await send_value(producers[plain], 4)) == quota_error(plain, producers[plain], 3, limit)
    await fill(producers[roomy], 11)
    assert error_of(await send_value(producers[roomy], 12)) == quota_error(roomy, producers[roomy], 11, roomy_limit)
    await fill(producers[unlimited], 20)


async def test_a_backlog_quota_changed_while_the_topic_is_loaded_applies_at_once(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    await wire.consumer(topic, "slow")
    producer = await wire.producer(topic)
    await fill(producer, 6)  # no quota yet
    limit = 4 * entry_size()
    await admin.set_namespace_policies(namespace, admin_pb2.Policies(backlog_quota=quota(limit_bytes=limit)))
    sequence = itertools.count(7)

    async def refused() -> tuple[int, str] | None:
        reply = await send_value(producer, next(sequence))
        return None if reply.HasField("receipt") else error_of(reply)

    code, _ = await eventually(refused, "the namespace's new quota applied")
    assert code == common_pb2.BACKLOG_QUOTA_EXCEEDED
    # A topic quota overriding it, set live, lets sends in again.
    await admin.set_topic_policies(topic, admin_pb2.Policies(backlog_quota=quota(limit_bytes=100 * limit)))

    async def accepted() -> bool:
        return (await send_value(producer, next(sequence))).HasField("receipt")

    await eventually(accepted, "the topic's quota applied")


async def pipeline(producer: WireProducer, sequence_ids: range, **options: Any) -> None:
    """Send entries without waiting for their receipts."""
    for sequence_id in sequence_ids:
        await producer.stream.send(broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
            sequence_id=sequence_id, highest_sequence_id=sequence_id, num_messages=1,
            entry=make_entry(producer.name, sequence_id, VALUE, **options))))


async def no_reply_for(producer: WireProducer, seconds: float) -> None:
    """Assert that the producer hears nothing for a while (its sends are held)."""
    with pytest.raises(TimeoutError):
        reply = await producer.stream.reply(seconds)
        raise AssertionError(f"a held send was answered: {reply}")


async def test_over_its_size_quota_sends_are_held_in_order_until_the_consumer_acknowledges(
    admin: AdminClient, wire: WireClient,
) -> None:
    limit = 4 * entry_size() + entry_size() // 2
    namespace = await new_namespace(admin, backlog_quota=quota(limit_bytes=limit,
                                                                policy=admin_pb2.PRODUCER_REQUEST_HOLD))
    topic = unique_topic("t", namespace)
    consumer = await wire.consumer(topic, "slow")
    producer = await wire.producer(topic)
    await fill(producer, 5)  # over the quota now
    await pipeline(producer, range(6, 11))
    await no_reply_for(producer, 0.5)
    assert await stored_entries(admin, topic) == 5

    await consumer.flow(100)
    delivered = await consumer.receive(5)
    await consumer.ack(delivered[-1], cumulative=True)
    receipts = [await producer.stream.reply() for _ in range(5)]
    assert [r.receipt.sequence_id for r in receipts] == [6, 7, 8, 9, 10]
    positions = [receipt_of(r) for r in receipts]
    assert positions == sorted(positions) and positions[0] > (delivered[-1].ledger_id, delivered[-1].entry_id)
    assert await stored_entries(admin, topic) == 10


async def test_over_its_age_quota_sends_are_held_until_the_old_message_is_acknowledged(
    admin: AdminClient, wire: WireClient, policy_standalone: StandaloneProcess,
) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    # A topic policy this time (the namespace has none).
    await admin.set_topic_policies(topic, admin_pb2.Policies(
        backlog_quota=quota(limit_seconds=60, policy=admin_pb2.PRODUCER_REQUEST_HOLD)))
    consumer = await wire.consumer(topic, "slow")
    producer = await wire.producer(topic)
    (old,) = await fill(producer, 1, publish_time=int(time.time() * 1000) - 3600_000)
    sequence = itertools.count(2)

    async def held() -> int | None:
        """Send one by one until a send gets no answer: that one is held."""
        sequence_id = next(sequence)
        await pipeline(producer, range(sequence_id, sequence_id + 1))
        try:
            receipt_of(await producer.stream.reply(2.0))
        except TimeoutError:
            return sequence_id
        return None

    held_id = await eventually(held, "a send held")
    stored = await stored_entries(admin, topic)
    assert stored == held_id - 1
    # Through the client too: its sends wait behind the held one.
    async with AsyncClient(policy_standalone.service_url) as client:
        sender = await client.create_producer(topic)
        waiting = await sender.send_async(b"from the client")
        done, _ = await asyncio.wait({waiting}, timeout=0.5)
        assert not done  # held behind the wire producer's send: nothing overtakes it
        await consumer.ack(common_pb2.Position(ledger_id=old[0], entry_id=old[1]))
        reply = await producer.stream.reply()
        assert reply.receipt.sequence_id == held_id and receipt_of(reply) > old
        await asyncio.wait_for(waiting, 15)
    assert await stored_entries(admin, topic) == stored + 2


async def test_over_its_size_quota_the_slowest_subscriptions_oldest_entries_are_evicted(
    admin: AdminClient, wire: WireClient,
) -> None:
    limit = 4 * entry_size() + entry_size() // 2
    namespace = await new_namespace(admin, backlog_quota=quota(
        limit_bytes=limit, policy=admin_pb2.CONSUMER_BACKLOG_EVICTION))
    topic = unique_topic("t", namespace)
    await admin.create_subscription(topic, "slow")
    fast = await wire.consumer(topic, "fast")
    producer = await wire.producer(topic)
    positions = await fill(producer, 12)  # never refused
    await fast.ack(common_pb2.Position(ledger_id=positions[9][0], entry_id=positions[9][1]), cumulative=True)

    async def evicted() -> admin_pb2.SubscriptionStats | None:
        stats = await subscription_stats(admin, topic, "slow")
        return stats if stats.backlog_entries == 4 else None

    slow = await eventually(evicted, "the slow subscription's backlog evicted down to the quota")
    assert slow.backlog_size <= limit
    (oldest,) = await admin.peek_messages(topic, "slow", 1)
    assert (oldest.ledger_id, oldest.entry_id) == positions[8]  # the newest four are left
    assert (await subscription_stats(admin, topic, "fast")).backlog_entries == 2  # within quota: not moved


async def test_over_its_age_quota_the_old_entries_are_evicted_live(admin: AdminClient, wire: WireClient) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    await admin.create_subscription(topic, "slow")
    producer = await wire.producer(topic)
    an_hour_ago = int(time.time() * 1000) - 3600_000
    old = await fill(producer, 3, publish_time=an_hour_ago)
    young = await fill(producer, 3, first=4)
    assert old[-1] < young[0]
    # Set while the topic is loaded, on the namespace.
    await admin.set_namespace_policies(namespace, admin_pb2.Policies(backlog_quota=quota(
        limit_seconds=60, policy=admin_pb2.CONSUMER_BACKLOG_EVICTION)))

    async def evicted() -> bool:
        return (await subscription_stats(admin, topic, "slow")).backlog_entries == 3

    await eventually(evicted, "the old entries evicted")
    (oldest,) = await admin.peek_messages(topic, "slow", 1)
    assert (oldest.ledger_id, oldest.entry_id) == young[0]


# ---- message TTL ----

async def test_messages_older_than_the_ttl_are_acknowledged_on_every_subscription(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, message_ttl_seconds=60)
    topic, never = unique_topic("t", namespace), unique_topic("t", namespace)
    await admin.set_topic_policies(never, admin_pb2.Policies(message_ttl_seconds=0))  # never expire
    an_hour_ago = int(time.time() * 1000) - 3600_000
    young: dict[str, list[tuple[int, int]]] = {}
    for name in (never, topic):
        await admin.create_subscription(name, "s")
        producer = await wire.producer(name)
        await fill(producer, 3, publish_time=an_hour_ago)
        young[name] = await fill(producer, 2, first=4)

    async def expired() -> admin_pb2.SubscriptionStats | None:
        stats = await subscription_stats(admin, topic, "s")
        return stats if stats.backlog_entries == 2 else None

    assert (await eventually(expired, "the old messages expired")).msg_expired_counter == 3
    (oldest,) = await admin.peek_messages(topic, "s", 1)
    assert (oldest.ledger_id, oldest.entry_id) == young[topic][0]
    # Checked as often, and before: the topic whose own TTL is 0 keeps them.
    stats = await subscription_stats(admin, never, "s")
    assert (stats.backlog_entries, stats.msg_expired_counter) == (5, 0)

    await admin.set_topic_policies(never, admin_pb2.Policies(message_ttl_seconds=1800))  # live

    async def expired_live() -> bool:
        return (await subscription_stats(admin, never, "s")).backlog_entries == 2

    await eventually(expired_live, "the old messages expired once the topic got a TTL")


# ---- retention ----

def retention(time_seconds: int, size_bytes: int) -> admin_pb2.RetentionPolicy:
    return admin_pb2.RetentionPolicy(time_seconds=time_seconds, size_bytes=size_bytes)


async def produce_and_consume_all(wire: WireClient, admin: AdminClient, topic: str, count: int = 10) -> list[int]:
    """Store `count` entries (rolling ledgers over every ENTRIES_PER_LEDGER), acknowledge them all
    on subscription "s", wait until the cursor says so; returns the topic's ledger ids."""
    consumer = await wire.consumer(topic, "s")
    producer = await wire.producer(topic)
    positions = await fill(producer, count)
    await consumer.ack(common_pb2.Position(ledger_id=positions[-1][0], entry_id=positions[-1][1]), cumulative=True)

    async def consumed() -> bool:
        (cursor,) = (await admin.internal_stats(topic)).cursors
        return cursor.backlog_entries == 0

    await eventually(consumed, f"everything acknowledged on {topic}")
    ledgers = sorted({ledger_id for ledger_id, _ in positions})
    assert len(ledgers) == -(-count // ENTRIES_PER_LEDGER)  # small ledgers: several of them
    return ledgers


async def ledger_ids(admin: AdminClient, topic: str) -> list[int]:
    return [ledger.ledger_id for ledger in (await admin.internal_stats(topic)).ledgers]


async def read_back(policy_standalone: StandaloneProcess, topic: str, count: int) -> int:
    """How many messages a new subscription from the earliest finds (up to `count`)."""
    async with AsyncClient(policy_standalone.service_url) as client:
        consumer = await client.subscribe(topic, unique_name("reader"), initial_position=InitialPosition.Earliest)
        found = 0
        while found < count and await consumer.receive(timeout=5) is not None:
            found += 1
        return found


async def test_retention_policies_decide_which_consumed_ledgers_are_deleted(
    admin: AdminClient, wire: WireClient, policy_standalone: StandaloneProcess,
) -> None:
    keep_nothing = await new_namespace(admin, retention=retention(0, 0))
    keep_all = await new_namespace(admin, retention=retention(-1, -1))
    forever = unique_topic("t", keep_all)
    overridden = unique_topic("t", keep_nothing)  # its own policy keeps what its namespace's would not
    await admin.set_topic_policies(overridden, admin_pb2.Policies(retention=retention(-1, -1)))
    by_size = unique_topic("t", keep_all)  # the newest 5,000 bytes: a little over one ledger
    await admin.set_topic_policies(by_size, admin_pb2.Policies(retention=retention(-1, 5000)))
    kept = {topic: await produce_and_consume_all(wire, admin, topic) for topic in (forever, overridden, by_size)}

    trimmed = unique_topic("t", keep_nothing)
    ledgers = await produce_and_consume_all(wire, admin, trimmed)

    async def only_the_open_ledger_left() -> bool:
        return await ledger_ids(admin, trimmed) == ledgers[-1:]

    await eventually(only_the_open_ledger_left, "the consumed ledgers deleted")
    assert await read_back(policy_standalone, trimmed, 10) == 10 % ENTRIES_PER_LEDGER

    async def trimmed_to_the_size() -> bool:
        return await ledger_ids(admin, by_size) == kept[by_size][1:]  # the ledgers after it hold 6,264 bytes

    await eventually(trimmed_to_the_size, "the ledger beyond the retained size deleted")
    # Checked as often as the others, and after them: retention keeps these.
    for topic in (forever, overridden):
        assert await ledger_ids(admin, topic) == kept[topic]
        assert await read_back(policy_standalone, topic, 10) == 10


async def test_a_retention_policy_changed_while_the_topic_is_loaded_applies_at_once(
    admin: AdminClient, wire: WireClient,
) -> None:
    namespace = await new_namespace(admin, retention=retention(-1, -1))
    topic = unique_topic("t", namespace)
    ledgers = await produce_and_consume_all(wire, admin, topic)
    assert await ledger_ids(admin, topic) == ledgers
    await admin.set_topic_policies(topic, admin_pb2.Policies(retention=retention(1, -1)))  # one second

    async def trimmed() -> bool:
        return await ledger_ids(admin, topic) == ledgers[-1:]

    await eventually(trimmed, "ledgers closed over a second ago deleted")


# ---- deleting topics ----

async def test_deleting_a_topic_with_clients_is_refused_unless_forced_and_leaves_nothing(
    admin: AdminClient, wire: WireClient, policy_standalone: StandaloneProcess,
) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    await admin.set_topic_policies(topic, admin_pb2.Policies(max_producers_per_topic=1))
    consumer = await wire.consumer(topic, "s", type=broker_pb2.SHARED)
    producer = await wire.producer(topic)
    old = await fill(producer, 6)
    with pytest.raises(PreconditionFailedError) as refused:
        await admin.delete_topic(topic)
    assert str(refused.value) == (
        f"Topic has active producers/consumers: {topic} has 1 producer(s) and 1 consumer(s) connected; "
        "close them first, or delete with force")
    receipt_of(await send_value(producer, 7))  # nothing changed
    assert topic in await admin.list_topics(namespace)

    await admin.delete_topic(topic, force=True)
    reply = await producer.stream.reply()  # both are told, and their streams end
    assert reply.error.code == common_pb2.SERVICE_NOT_READY, reply
    await asyncio.wait_for(producer.stream.ended.wait(), 10)
    assert (await consumer.event("error")).error.code == common_pb2.SERVICE_NOT_READY
    await asyncio.wait_for(consumer.stream.ended.wait(), 10)
    assert topic not in await admin.list_topics(namespace)
    with pytest.raises(NotFoundError, match=f"Topic {topic} does not exist"):
        await admin.delete_topic(topic)

    # Made again, it starts empty: no entries, no subscription, none of the old ledgers or policies.
    await admin.create_topic(topic)
    assert await admin.topic_policies(topic) == admin_pb2.Policies()
    stats = await admin.topic_stats(topic)
    assert (stats.msg_in_counter, stats.storage_size, list(stats.subscriptions)) == (0, 0, [])
    internal = await admin.internal_stats(topic)
    assert internal.number_of_entries == 0 and list(internal.cursors) == []
    assert not {ledger.ledger_id for ledger in internal.ledgers} & {ledger_id for ledger_id, _ in old}
    assert await read_back(policy_standalone, topic, 7) == 0


async def test_a_topic_whose_clients_left_is_deleted_without_force(admin: AdminClient, wire: WireClient) -> None:
    namespace = await new_namespace(admin)
    topic = unique_topic("t", namespace)
    consumer = await wire.consumer(topic, "s")
    producer = await wire.producer(topic)
    await fill(producer, 2)
    await producer.close()
    await consumer.close()

    async def deleted() -> bool:
        try:
            await admin.delete_topic(topic)
        except PreconditionFailedError:
            return False  # the broker has not yet seen a stream end
        return True

    await eventually(deleted, "the topic deleted once its clients left")
    assert await admin.list_topics(namespace) == []


# ---- storage quorums (a local cluster: 3 storage nodes, 2 brokers) ----

async def quorums(store: RedisMetadataStore, ledger_id: int) -> tuple[int, int, int]:
    """(ensemble size, write quorum, ack quorum) of a ledger, from its metadata (/ledgers/<id>)."""
    metadata, _ = await read_ledger_metadata(store, ledger_id)
    return len(metadata.ensemble), metadata.write_quorum, metadata.ack_quorum


def persistence(e: int, qw: int, qa: int) -> admin_pb2.PersistencePolicy:
    return admin_pb2.PersistencePolicy(ensemble_size=e, write_quorum=qw, ack_quorum=qa)


async def test_new_ledgers_get_the_storage_quorums_of_their_policies(
    make_local_cluster: Callable[..., LocalCluster],
) -> None:
    env = service_env()
    env["HERALD_BROKER_MAX_ENTRIES_PER_LEDGER"] = "2"
    env["HERALD_BROKER_MIN_LEDGER_ROLLOVER_SECONDS"] = "0"
    cluster = make_local_cluster(extra_env=env, ensemble_size=2, write_quorum=2, ack_quorum=2)
    store = RedisMetadataStore(cluster.metadata_url)
    await store.start()
    try:
        async with AdminClient(cluster.service_url, timeout=20) as admin, WireClient(cluster.lookup.port) as wire:
            namespace = await new_namespace(admin, persistence=persistence(3, 3, 2))
            topic, overridden = unique_topic("t", namespace), unique_topic("t", namespace)
            await admin.set_topic_policies(overridden, admin_pb2.Policies(persistence=persistence(2, 2, 1)))
            for name, expected in ((topic, (3, 3, 2)), (overridden, (2, 2, 1))):
                producer = await wire.producer(name)
                (position,) = await fill(producer, 1)
                assert await quorums(store, position[0]) == expected

            # Changed while the topic is loaded: the ledgers it rolls over to get the new quorums.
            producer = await wire.producer(topic)
            await admin.set_namespace_policies(namespace, admin_pb2.Policies(persistence=persistence(3, 2, 1)))

            sequences = itertools.count(50)  # past the sequence ids this producer sent

            async def rolled_over_with_new_quorums() -> bool:
                (position,) = await fill(producer, 1, first=next(sequences))
                return await quorums(store, position[0]) == (3, 2, 1)

            await eventually(rolled_over_with_new_quorums, "a new ledger with the namespace's new quorums")

            # More copies than there are storage nodes: the producer hears why it cannot write.
            greedy = await new_namespace(admin, persistence=persistence(5, 4, 2))
            error = await refused_producer(wire, unique_topic("t", greedy))
            assert error.code == common_pb2.PERSISTENCE_ERROR
            assert "could not create a ledger" in error.error.message
            assert "cannot create a ledger with E=5 Qw=4 Qa=2: it needs at least 4 healthy storage nodes" in (
                error.error.message)
    finally:
        await store.close()
