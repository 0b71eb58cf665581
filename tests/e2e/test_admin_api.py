"""The admin API over real gRPC against `herald standalone`, through herald.client.admin: every
AdminService call, the exact errors of misuse, and stats that move as messages are produced,
consumed and acknowledged."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest
from herald.api.v1 import admin_pb2, admin_pb2_grpc, broker_pb2
from herald.broker.grpc.admin_forwarding import FORWARDED_BY
from herald.client import InitialPosition
from herald.client.admin import AdminClient, SyncAdminClient
from herald.common.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    PreconditionFailedError,
)

from tests.conftest import StandaloneProcess
from tests.helpers import unique_name, unique_topic
from tests.wire import WireClient, WireProducer, make_entry, values_of


async def send_entries(producer: WireProducer, count: int, values_per_entry: int = 1,
                       publish_times: list[int] | None = None) -> list[tuple[int, int, int]]:
    """Send `count` entries of equal size; returns (ledger id, entry id, entry size) of each."""
    sent = []
    for i in range(count):
        sequence_id = 1 + i * values_per_entry  # never 0: proto3 leaves a 0 out, and sizes would differ
        options = {"publish_time": publish_times[i]} if publish_times else {}
        values = [b"value-%02d-%d" % (i, v) for v in range(values_per_entry)]
        data = make_entry(producer.name, sequence_id, *values, **options)
        reply = await producer.send_entry(data, sequence_id, values_per_entry)
        assert reply.HasField("receipt"), reply
        sent.append((reply.receipt.ledger_id, reply.receipt.entry_id, len(data)))
    return sent


# ---- tenants ----

async def test_tenants_are_created_listed_updated_and_deleted(admin: AdminClient) -> None:
    name = unique_name("tenant")
    created = await admin.create_tenant(name, admin_roles=["ops"], allowed_clusters=["standalone"])
    assert (created.name, list(created.admin_roles), list(created.allowed_clusters)) == (name, ["ops"], ["standalone"])
    assert name in await admin.list_tenants()
    updated = await admin.update_tenant(name, admin_roles=["ops", "dev"])
    assert list(updated.admin_roles) == ["ops", "dev"]
    assert list((await admin.get_tenant(name)).admin_roles) == ["ops", "dev"]
    await admin.delete_tenant(name)
    assert name not in await admin.list_tenants()


async def test_tenant_errors(admin: AdminClient) -> None:
    name = unique_name("tenant")
    await admin.create_tenant(name)
    with pytest.raises(AlreadyExistsError, match=f"Tenant {name} already exists"):
        await admin.create_tenant(name)
    with pytest.raises(NotFoundError, match="Tenant no-such-tenant does not exist"):
        await admin.get_tenant("no-such-tenant")
    with pytest.raises(NotFoundError, match="Tenant no-such-tenant does not exist"):
        await admin.update_tenant("no-such-tenant", admin_roles=["x"])
    with pytest.raises(NotFoundError, match="Tenant no-such-tenant does not exist"):
        await admin.delete_tenant("no-such-tenant")
    with pytest.raises(InvalidArgumentError, match="tenant name"):
        await admin.create_tenant("bad name")
    await admin.create_namespace(f"{name}/ns")
    with pytest.raises(PreconditionFailedError, match=f"Tenant {name} has namespaces \\({name}/ns\\)"):
        await admin.delete_tenant(name)


async def test_errors_carry_their_code_and_a_matching_grpc_status(admin: AdminClient, wire: WireClient) -> None:
    stub = admin_pb2_grpc.AdminServiceStub(wire.channel(await admin.broker_address()))
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stub.GetTenant(admin_pb2.TenantRequest(name="no-such-tenant"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert missing.value.details() == "24:Tenant no-such-tenant does not exist"
    with pytest.raises(grpc.aio.AioRpcError) as exists:
        await stub.CreateTenant(admin_pb2.Tenant(name="public"))
    assert (exists.value.code(), exists.value.details()) == (
        grpc.StatusCode.ALREADY_EXISTS, "25:Tenant public already exists")


async def test_an_error_naming_a_huge_value_is_cut_to_fit_the_status_and_keeps_its_code(
    admin: AdminClient, wire: WireClient,
) -> None:
    # An error's text travels in the call's trailing metadata, which clients take up to 16 KiB of:
    # one quoting a 70,000-character name was dropped by the client's gRPC, the call failing with
    # RESOURCE_EXHAUSTED "received metadata size exceeds hard limit" (found by tests/fuzz).
    stub = admin_pb2_grpc.AdminServiceStub(wire.channel(await admin.broker_address()))
    topic = unique_topic("huge-name")
    await admin.create_topic(topic)
    for name in ("s" * 70_000, "é" * 30_000):  # UTF-8, then escaped: three times longer again
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.DeleteSubscription(admin_pb2.DeleteSubscriptionRequest(topic=topic, subscription=name))
        details = refused.value.details() or ""
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND, (refused.value.code(), details[:200])
        assert details.startswith(f"24:subscription '{name[:100]}")
        assert details.endswith(" characters of this message cut)")
        assert len(details.encode()) <= 4096


# ---- namespaces and policies ----

async def test_namespaces_with_policies_are_created_changed_cleared_and_deleted(admin: AdminClient) -> None:
    tenant = unique_name("tenant")
    await admin.create_tenant(tenant)
    namespace = f"{tenant}/orders"
    created = await admin.create_namespace(namespace, admin_pb2.Policies(
        retention=admin_pb2.RetentionPolicy(time_seconds=3600, size_bytes=-1)))
    assert created.retention.time_seconds == 3600 and not created.HasField("message_ttl_seconds")
    assert await admin.list_namespaces(tenant) == [namespace]

    changed = await admin.set_namespace_policies(namespace, admin_pb2.Policies(
        message_ttl_seconds=60, max_consumers_per_topic=2,
        backlog_quota=admin_pb2.BacklogQuota(limit_bytes=1 << 20, limit_seconds=-1,
                                             policy=admin_pb2.PRODUCER_EXCEPTION),
        persistence=admin_pb2.PersistencePolicy(ensemble_size=1, write_quorum=1, ack_quorum=1)))
    assert changed.retention.time_seconds == 3600  # fields not given are kept
    assert (changed.message_ttl_seconds, changed.max_consumers_per_topic) == (60, 2)
    assert changed.backlog_quota.policy == admin_pb2.PRODUCER_EXCEPTION
    assert await admin.namespace_policies(namespace) == changed

    cleared = await admin.set_namespace_policies(namespace, clear=["message_ttl_seconds", "retention"])
    assert not cleared.HasField("message_ttl_seconds") and not cleared.HasField("retention")
    assert cleared.max_consumers_per_topic == 2

    await admin.delete_namespace(namespace)
    assert await admin.list_namespaces(tenant) == []


async def test_namespace_errors(admin: AdminClient, wire: WireClient) -> None:
    tenant = unique_name("tenant")
    await admin.create_tenant(tenant)
    namespace = f"{tenant}/ns"
    await admin.create_namespace(namespace)
    with pytest.raises(NotFoundError, match="Tenant no-such-tenant does not exist"):
        await admin.create_namespace("no-such-tenant/ns")
    with pytest.raises(NotFoundError, match="Tenant no-such-tenant does not exist"):
        await admin.list_namespaces("no-such-tenant")
    with pytest.raises(NotFoundError, match=f"Namespace {tenant}/missing does not exist"):
        await admin.namespace_policies(f"{tenant}/missing")
    with pytest.raises(AlreadyExistsError, match=f"Namespace {namespace} already exists"):
        await admin.create_namespace(namespace)
    with pytest.raises(InvalidArgumentError, match="persistence 1/2/1 is invalid: write quorum 2 > ensemble size 1"):
        await admin.set_namespace_policies(namespace, admin_pb2.Policies(
            persistence=admin_pb2.PersistencePolicy(ensemble_size=1, write_quorum=2, ack_quorum=1)))
    with pytest.raises(InvalidArgumentError, match="'ttl' is not a policy"):
        await admin.set_namespace_policies(namespace, clear=["ttl"])
    topic = f"persistent://{namespace}/busy"
    producer = await wire.producer(topic)
    await send_entries(producer, 1)
    with pytest.raises(PreconditionFailedError, match=f"Namespace {namespace} has 1 topics \\({topic}\\)"):
        await admin.delete_namespace(namespace)


async def test_topic_policies_override_the_namespace_and_the_broker(admin: AdminClient) -> None:
    tenant = unique_name("tenant")
    await admin.create_tenant(tenant)
    namespace = f"{tenant}/ns"
    await admin.create_namespace(namespace, admin_pb2.Policies(message_ttl_seconds=600, max_producers_per_topic=5))
    topic = f"persistent://{namespace}/t"
    await admin.create_topic(topic)  # reads of a topic's policies need the topic (issue 22, item 1)
    assert await admin.topic_policies(topic) == admin_pb2.Policies()
    own = await admin.set_topic_policies(topic, admin_pb2.Policies(message_ttl_seconds=30))
    assert own.message_ttl_seconds == 30 and not own.HasField("max_producers_per_topic")
    effective = await admin.effective_policies(topic)
    assert effective.message_ttl_seconds == 30  # the topic's
    assert effective.max_producers_per_topic == 5  # the namespace's
    assert effective.persistence.ensemble_size == 1  # the broker's (standalone: 1/1/1)
    assert all(effective.HasField(f.name) for f in admin_pb2.Policies.DESCRIPTOR.fields)
    cleared = await admin.set_topic_policies(topic, clear=["message_ttl_seconds"])
    assert cleared == admin_pb2.Policies()
    assert (await admin.effective_policies(topic)).message_ttl_seconds == 600
    with pytest.raises(NotFoundError, match=f"Namespace {tenant}/missing does not exist"):
        await admin.topic_policies(f"persistent://{tenant}/missing/t")


# ---- topics ----

async def test_topics_are_created_listed_and_deleted(admin: AdminClient, wire: WireClient) -> None:
    tenant = unique_name("tenant")
    await admin.create_tenant(tenant)
    namespace = f"{tenant}/ns"
    await admin.create_namespace(namespace)
    plain, partitioned = f"persistent://{namespace}/plain", f"persistent://{namespace}/parted"
    await admin.create_topic(plain)
    await admin.create_topic(partitioned, partitions=3)
    assert await admin.list_topics(namespace) == sorted([plain, partitioned])
    assert (await admin.get_partitions(plain), await admin.get_partitions(partitioned)) == (0, 3)
    with pytest.raises(AlreadyExistsError, match=f"Topic {plain} already exists"):
        await admin.create_topic(plain)

    producer = await wire.producer(plain)
    with pytest.raises(PreconditionFailedError, match="connected"):
        await admin.delete_topic(plain)
    await admin.delete_topic(plain, force=True)
    await producer.close()
    await admin.delete_topic(partitioned)
    assert await admin.list_topics(namespace) == []
    with pytest.raises(NotFoundError, match=f"Namespace {tenant}/missing does not exist"):
        await admin.list_topics(f"{tenant}/missing")


async def test_partitions_grow_and_never_shrink(admin: AdminClient) -> None:
    topic = unique_topic("grow")
    await admin.create_topic(topic, partitions=2)
    assert await admin.update_partitions(topic, 4) == 4
    assert await admin.get_partitions(topic) == 4
    with pytest.raises(NotAllowedError, match=f"cannot shrink from 4 to 3 partitions: topic {topic} can only grow"):
        await admin.update_partitions(topic, 3)
    with pytest.raises(NotFoundError, match="does not exist"):
        await admin.update_partitions(unique_topic("never-made"), 2)


async def test_a_bad_topic_name_is_refused(admin: AdminClient) -> None:
    with pytest.raises(InvalidArgumentError, match="topic name 'a b' is invalid"):
        await admin.topic_stats("a b")
    with pytest.raises(InvalidArgumentError, match="the domain must be 'persistent' or 'non-persistent'"):
        await admin.list_subscriptions("kafka://public/default/t")


# ---- stats ----

async def test_stats_move_as_messages_are_produced_consumed_and_acknowledged(
    admin: AdminClient, wire: WireClient,
) -> None:
    topic = unique_topic("stats")
    producer = await wire.producer(topic, properties={"app": "billing"})
    await admin.create_subscription(topic, "sub", InitialPosition.Earliest)
    before = await admin.topic_stats(topic)
    assert (before.msg_in_counter, before.entries, before.subscriptions[0].backlog_entries) == (0, 0, 0)

    sent = await send_entries(producer, 3, values_per_entry=2)
    sizes = [size for _, _, size in sent]
    assert len(set(sizes)) == 1, "entries of equal size make the backlog's bytes exact"
    consumer = await wire.consumer(topic, "sub", type=broker_pb2.SHARED, consumer_name="c1",
                                   properties={"team": "ops"})
    await consumer.flow(4)  # permits count messages: two entries of two
    first, second = await consumer.receive(2)
    await consumer.ack(first)

    async def settled() -> admin_pb2.TopicStats:
        for _ in range(100):
            stats = await admin.topic_stats(topic)
            if stats.subscriptions[0].backlog_entries == 2:
                return stats
            await asyncio.sleep(0.05)
        raise AssertionError(f"the ack never showed: {stats}")

    stats = await settled()
    assert stats.topic == topic and stats.persistent and not stats.terminated and stats.partitions == 0
    assert (stats.msg_in_counter, stats.bytes_in_counter) == (6, sum(sizes))
    assert (stats.entries, stats.storage_size) == (3, sum(sizes))
    assert stats.msg_rate_in > 0 and stats.msg_throughput_in > 0
    [producer_stats] = stats.producers
    assert (producer_stats.producer_name, producer_stats.msg_in_counter, producer_stats.bytes_in_counter) == (
        producer.name, 6, sum(sizes))
    assert producer_stats.msg_rate_in > 0 and producer_stats.msg_throughput_in > 0
    assert dict(producer_stats.properties) == {"app": "billing"}

    [sub] = stats.subscriptions
    assert (sub.name, sub.type, sub.consumers, sub.durable) == ("sub", "Shared", 1, True)
    assert (sub.backlog_entries, sub.msg_backlog, sub.backlog_size) == (2, 4, 2 * sizes[0])
    assert (sub.msg_out_counter, sub.unacked_messages) == (4, 2)
    assert (sub.dead_letters, sub.delayed_messages, sub.msg_expired_counter) == (0, 0, 0)
    assert sub.msg_rate_out > 0 and sub.msg_throughput_out > 0
    [consumer_stats] = sub.consumer_stats
    assert consumer_stats.consumer_name == "c1" and dict(consumer_stats.properties) == {"team": "ops"}
    assert (consumer_stats.msg_out_counter, consumer_stats.bytes_out_counter) == (4, 2 * sizes[0])
    assert (consumer_stats.unacked_messages, consumer_stats.available_permits) == (2, 0)
    assert consumer_stats.priority_level == 0 and consumer_stats.msg_rate_out > 0
    assert (stats.msg_out_counter, stats.bytes_out_counter) == (4, 2 * sizes[0])
    assert stats.msg_rate_out == pytest.approx(sub.msg_rate_out)
    assert stats.backlog_size == sub.backlog_size

    await consumer.ack(second)
    await consumer.flow(10)
    [third] = await consumer.receive(1)
    await consumer.ack(third)
    for _ in range(100):
        drained = (await admin.topic_stats(topic)).subscriptions[0]
        if drained.backlog_entries == 0:
            break
        await asyncio.sleep(0.05)
    assert (drained.backlog_entries, drained.msg_backlog, drained.backlog_size, drained.unacked_messages) == (
        0, 0, 0, 0)
    assert drained.consumer_stats[0].available_permits == 8
    assert (drained.msg_out_counter, drained.bytes_out_counter) == (6, sum(sizes))

    await consumer.close()  # what went out stays counted after the consumer has gone
    for _ in range(100):
        left = await admin.topic_stats(topic)
        if left.subscriptions[0].consumers == 0:
            break
        await asyncio.sleep(0.05)
    assert (left.msg_out_counter, left.bytes_out_counter) == (6, sum(sizes))
    assert (left.subscriptions[0].msg_out_counter, left.subscriptions[0].bytes_out_counter) == (6, sum(sizes))


async def test_a_partitioned_topics_stats_sum_its_partitions(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("summed")
    await admin.create_topic(topic, partitions=3)
    await admin.create_subscription(topic, "sub", InitialPosition.Earliest)  # on every partition
    for index, count in ((0, 2), (2, 3)):
        producer = await wire.producer(f"{topic}-partition-{index}")
        await send_entries(producer, count)
    stats = await admin.topic_stats(topic)
    assert (stats.topic, stats.partitions) == (topic, 3)
    assert [p.topic for p in stats.partition_stats] == [f"{topic}-partition-{i}" for i in range(3)]
    assert [p.msg_in_counter for p in stats.partition_stats] == [2, 0, 3]
    assert (stats.msg_in_counter, stats.entries) == (5, 5)
    assert stats.storage_size == sum(p.storage_size for p in stats.partition_stats)
    assert len(stats.producers) == 2
    [sub] = stats.subscriptions
    assert (sub.name, sub.backlog_entries, sub.msg_backlog) == ("sub", 5, 5)
    assert sorted(await admin.list_subscriptions(topic)) == ["sub"]
    assert await admin.list_subscriptions(f"{topic}-partition-1") == ["sub"]
    assert await admin.skip_messages(topic, "sub") == 5
    assert (await admin.topic_stats(topic)).subscriptions[0].backlog_entries == 0
    with pytest.raises(InvalidArgumentError, match="internal stats are per partition"):
        await admin.internal_stats(topic)


async def test_a_call_on_a_partitioned_topic_answers_once_every_partition_has(admin: AdminClient) -> None:
    # Partition 1 refuses at once (the subscription exists there); partition 0 has no owner yet, so
    # its call goes through lookup to its owner. The answer used to come with partition 1's error
    # while partition 0's call still ran, reading the finished call's metadata (garbage: found by
    # tests/fuzz/test_hostile_fuzz.py): the subscription was not there when the caller looked.
    for _ in range(3):
        topic = unique_topic("fan-out")
        await admin.create_topic(topic, partitions=2)
        await admin.create_subscription(f"{topic}-partition-1", "s", InitialPosition.Earliest)
        with pytest.raises(AlreadyExistsError, match=f"subscription 's' already exists on {topic}-partition-1"):
            await admin.create_subscription(topic, "s", InitialPosition.Earliest)
        assert await admin.list_subscriptions(f"{topic}-partition-0") == ["s"]


async def test_internal_stats_show_ledgers_and_cursors(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("internal")
    producer = await wire.producer(topic)
    await admin.create_subscription(topic, "sub", InitialPosition.Earliest)
    sent = await send_entries(producer, 3)
    consumer = await wire.consumer(topic, "sub", type=broker_pb2.SHARED)
    await consumer.flow(3)
    entries = await consumer.receive(3)
    await consumer.ack(entries[1])  # an individual ack above the mark-delete position
    ledger_id = sent[0][0]
    for _ in range(100):
        stats = await admin.internal_stats(topic)
        if stats.cursors[0].backlog_entries == 2:
            break
        await asyncio.sleep(0.05)
    assert (stats.topic, stats.state, stats.number_of_entries) == (topic, "LedgerOpened", 3)
    assert stats.total_size == sum(size for _, _, size in sent)
    assert stats.current_ledger_id == ledger_id
    assert (stats.last_confirmed_entry.ledger_id, stats.last_confirmed_entry.entry_id) == (ledger_id, 2)
    assert [(x.ledger_id, x.entries, x.size) for x in stats.ledgers] == [(ledger_id, 3, stats.total_size)]
    [cursor] = stats.cursors
    assert (cursor.name, cursor.durable, cursor.backlog_entries) == ("sub", True, 2)
    assert (cursor.mark_delete_position.ledger_id, cursor.mark_delete_position.entry_id) == (ledger_id, -1)
    assert [(p.ledger_id, p.entry_id) for p in cursor.individually_acked_ranges] == [(ledger_id, 1), (ledger_id, 1)]
    assert (cursor.read_position.ledger_id, cursor.read_position.entry_id) == (ledger_id, 3)


async def test_non_persistent_topic_stats(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("np", persistent=False)
    producer = await wire.producer(topic)
    await producer.send(b"dropped: nobody listens")
    stats = await admin.topic_stats(topic)
    assert (stats.topic, stats.persistent, stats.msg_in_counter) == (topic, False, 1)
    with pytest.raises(NotAllowedError, match="not supported on non-persistent topics"):
        await admin.internal_stats(topic)


# ---- unload and terminate ----

async def test_unload_then_stats_reload_the_topic(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("unload")
    producer = await wire.producer(topic)
    await send_entries(producer, 2)
    await admin.unload_topic(topic)
    # Its ownership was released: the stats call looks the owner up again (forwarding, once).
    stats = await admin.topic_stats(topic)
    assert (stats.entries, stats.msg_in_counter, stats.producers) == (2, 0, [])


async def test_terminate_refuses_further_writes(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("terminate")
    producer = await wire.producer(topic)
    sent = await send_entries(producer, 2)
    last = await admin.terminate_topic(topic)
    assert (last.ledger_id, last.entry_id) == sent[-1][:2]
    assert (await admin.topic_stats(topic)).terminated
    with pytest.raises(NotAllowedError, match="partitioned topic: terminate its partitions one by one"):
        topic_parted = unique_topic("terminate-parted")
        await admin.create_topic(topic_parted, partitions=2)
        await admin.terminate_topic(topic_parted)


# ---- subscriptions ----

async def test_subscriptions_start_where_asked(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("starts")
    producer = await wire.producer(topic)
    sent = await send_entries(producer, 3)
    await admin.create_subscription(topic, "earliest", InitialPosition.Earliest)
    await admin.create_subscription(topic, "latest")
    await admin.create_subscription(topic, "second", sent[1][:2])
    assert await admin.list_subscriptions(topic) == ["earliest", "latest", "second"]
    backlogs = {s.name: s.backlog_entries for s in (await admin.topic_stats(topic)).subscriptions}
    assert backlogs == {"earliest": 3, "latest": 0, "second": 2}
    with pytest.raises(AlreadyExistsError, match=f"subscription 'latest' already exists on {topic}"):
        await admin.create_subscription(topic, "latest")
    with pytest.raises(InvalidArgumentError, match="subscription name 'a b' is invalid"):
        await admin.create_subscription(topic, "a b")


async def test_peek_skip_and_reset_move_a_subscription(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("cursor")
    producer = await wire.producer(topic)
    sent = await send_entries(producer, 4, publish_times=[1000, 2000, 3000, 4000])
    await admin.create_subscription(topic, "sub", InitialPosition.Earliest)

    peeked = await admin.peek_messages(topic, "sub", 2)
    assert [(e.ledger_id, e.entry_id, e.redelivery_count) for e in peeked] == [(*s[:2], 0) for s in sent[:2]]
    assert values_of(peeked[0]) == [b"value-00-0"]
    assert len(await admin.peek_messages(topic, "sub")) == 1

    assert await admin.skip_messages(topic, "sub", 1) == 1
    assert [e.entry_id for e in await admin.peek_messages(topic, "sub", 1)] == [sent[1][1]]
    assert await admin.skip_messages(topic, "sub") == 3
    assert await admin.peek_messages(topic, "sub", 1) == []

    async def backlog() -> int:
        return (await admin.topic_stats(topic)).subscriptions[0].backlog_entries

    await admin.reset_cursor(topic, "sub", edge=InitialPosition.Earliest)
    assert await backlog() == 4
    await admin.reset_cursor(topic, "sub", position=sent[2][:2])
    assert await backlog() == 2
    await admin.reset_cursor(topic, "sub", publish_time=2000)
    assert await backlog() == 3
    await admin.reset_cursor(topic, "sub", edge=InitialPosition.Latest)
    assert await backlog() == 0


async def test_subscription_errors(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("sub-errors")
    producer = await wire.producer(topic)
    await send_entries(producer, 1)
    for call in (admin.peek_messages(topic, "missing"), admin.skip_messages(topic, "missing", 1),
                 admin.reset_cursor(topic, "missing", edge=InitialPosition.Earliest),
                 admin.delete_subscription(topic, "missing")):
        with pytest.raises(NotFoundError, match=f"subscription 'missing' does not exist on {topic}"):
            await call
    with pytest.raises(InvalidArgumentError, match="skip count must be at least 1"):
        await admin.skip_messages(topic, "missing", 0)
    with pytest.raises(InvalidArgumentError, match="exactly one of position, publish_time, edge"):
        await admin.reset_cursor(topic, "sub")

    # Raw requests the client refuses to make: the broker checks them too.
    stub = admin_pb2_grpc.AdminServiceStub(wire.channel(await admin.broker_address()))
    await admin.create_subscription(topic, "sub", InitialPosition.Earliest)
    with pytest.raises(grpc.aio.AioRpcError, match="skip count 0 is invalid"):
        await stub.SkipMessages(admin_pb2.SkipMessagesRequest(topic=topic, subscription="sub"))
    with pytest.raises(grpc.aio.AioRpcError, match="reset cursor needs a target"):
        await stub.ResetCursor(admin_pb2.ResetCursorRequest(topic=topic, subscription="sub"))


async def test_deleting_a_subscription_with_consumers_needs_force(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("unsubscribe")
    consumer = await wire.consumer(topic, "sub")
    with pytest.raises(PreconditionFailedError, match="has 1 other consumer\\(s\\) connected"):
        await admin.delete_subscription(topic, "sub")
    await admin.delete_subscription(topic, "sub", force=True)
    assert await admin.list_subscriptions(topic) == []
    await consumer.close()


# ---- brokers, addressing, the blocking facade ----

async def test_brokers_are_listed(admin: AdminClient, shared_standalone: StandaloneProcess) -> None:
    [broker] = await admin.list_brokers()
    assert (broker.broker_id, broker.address, broker.cluster) == (
        "standalone", f"127.0.0.1:{shared_standalone.broker_port}", "standalone")


async def test_a_broker_address_works_as_the_url(shared_standalone: StandaloneProcess) -> None:
    async with AdminClient(f"127.0.0.1:{shared_standalone.broker_port}") as direct:
        assert "public" in await direct.list_tenants()
    with pytest.raises(InvalidArgumentError, match="admin URL 'nowhere' is invalid"):
        AdminClient("nowhere")
    with pytest.raises(InvalidArgumentError, match="has scheme 'http'"):
        AdminClient("http://127.0.0.1:1")


async def test_a_forwarded_call_is_never_forwarded_again(admin: AdminClient, wire: WireClient) -> None:
    topic = unique_topic("forwarded")
    await admin.create_topic(topic)  # admin reads need the topic (issue 22, item 1)
    await admin.unload_topic(topic)  # no owner now: a plain call would look one up and forward
    stub = admin_pb2_grpc.AdminServiceStub(wire.channel(await admin.broker_address()))
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic), metadata=((FORWARDED_BY, "test"),))
    assert failure.value.details().startswith("6:topic")  # NOT_OWNER, answered here
    assert (await admin.topic_stats(topic)).topic == topic


def test_the_blocking_facade(shared_standalone: StandaloneProcess) -> None:
    with SyncAdminClient(shared_standalone.service_url) as admin:
        tenant = unique_name("sync-tenant")
        assert admin.create_tenant(tenant).name == tenant
        assert tenant in admin.list_tenants()
        with pytest.raises(NotFoundError, match="Tenant no-such-tenant does not exist"):
            admin.get_tenant("no-such-tenant")
