"""Discovery through real processes (SEEDS §5): partitioned-topic metadata, route info, cluster
info and the topics of a namespace, asked of lookup's gRPC contract by hand (tests/wire.py), against
`herald standalone` and, where two brokers matter, a local cluster of processes: each route names
the broker that really serves its partition, and follows the partition when its broker dies."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio
import pytest
from herald.api.v1 import broker_pb2, common_pb2, lookup_pb2
from herald.client.admin import AdminClient
from herald.common.errors import NotAllowedError
from herald.local_cluster import LocalCluster

from tests.conftest import StandaloneProcess, service_env
from tests.helpers import eventually, unique_name, unique_topic
from tests.wire import WireClient, WireError, values_of


async def refused(call: Awaitable[object]) -> grpc.aio.AioRpcError:
    """The error a unary call fails with (the test fails when it succeeds)."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def partitions_of(wire: WireClient, topic: str) -> int:
    reply = await wire.lookup.GetPartitionedTopicMetadata(lookup_pb2.PartitionedTopicMetadataRequest(topic=topic))
    return int(reply.partitions)


async def route_of(wire: WireClient, topic: str) -> lookup_pb2.TopicRouteResponse:
    reply: lookup_pb2.TopicRouteResponse = await wire.lookup.GetTopicRoute(lookup_pb2.TopicRouteRequest(topic=topic))
    return reply


async def brokers_of(wire: WireClient) -> dict[str, lookup_pb2.BrokerInfo]:
    reply = await wire.lookup.GetClusterInfo(lookup_pb2.ClusterInfoRequest())
    return {broker.broker_id: broker for broker in reply.brokers}


async def topics_of(wire: WireClient, namespace: str, domain: int = lookup_pb2.ALL_DOMAINS) -> list[str]:
    reply = await wire.lookup.GetTopicsOfNamespace(
        lookup_pb2.TopicsOfNamespaceRequest(namespace=namespace, domain=domain))  # type: ignore[arg-type]
    return list(reply.topics)


async def assert_round_trip(wire: WireClient, topic: str, value: bytes) -> None:
    """A producer on `topic` (wherever lookup sends it) is acknowledged, and a new subscription
    from the earliest message receives exactly what was sent there."""
    producer = await wire.producer(topic)
    reply = await producer.send(value)
    assert reply.HasField("receipt"), reply
    consumer = await wire.consumer(topic, "check", initial_position=broker_pb2.EARLIEST)
    await consumer.flow(10)
    assert [values_of(entry) for entry in await consumer.receive(1)] == [[value]]
    await producer.close()
    await consumer.close()


# ---- partitioned-topic metadata ----

async def test_partition_count_is_answered_for_the_base_name_only(admin: AdminClient, wire: WireClient) -> None:
    local = unique_name("orders")
    topic, plain = f"persistent://public/default/{local}", unique_topic("plain")
    await admin.create_topic(topic, partitions=3)
    await admin.create_topic(plain)
    assert await partitions_of(wire, topic) == 3
    assert await partitions_of(wire, local) == 3  # the short name means public/default
    assert await partitions_of(wire, plain) == 0
    assert await partitions_of(wire, f"{topic}-partition-0") == 0  # a partition is a topic of its own
    assert await partitions_of(wire, unique_topic("never-made")) == 0
    assert await partitions_of(wire, f"non-persistent://public/default/{local}") == 0  # domains are apart
    non_persistent = unique_topic("np-orders", persistent=False)
    await admin.create_topic(non_persistent, partitions=2)
    assert await partitions_of(wire, non_persistent) == 2


async def test_each_partition_is_looked_up_owned_and_served_like_a_topic(
    admin: AdminClient, wire: WireClient,
) -> None:
    topic = unique_topic("served")
    await admin.create_topic(topic, partitions=3)
    [broker] = (await brokers_of(wire)).values()
    for index in range(3):
        partition = f"{topic}-partition-{index}"
        owner = await wire.lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=partition))
        assert (owner.broker_address, owner.broker_id, owner.redirect) == (broker.address, broker.broker_id, False)
        await assert_round_trip(wire, partition, b"on partition %d" % index)  # each holds only its own


async def test_grown_partitions_are_routable_and_usable_and_a_refused_shrink_changes_nothing(
    admin: AdminClient, wire: WireClient,
) -> None:
    topic = unique_topic("growing")
    await admin.create_topic(topic, partitions=2)
    await assert_round_trip(wire, f"{topic}-partition-1", b"before growing")
    past = f"{topic}-partition-2"
    why = f"{common_pb2.NOT_FOUND}:Topic {past} does not exist: {topic} has 2 partitions (0 to 1)"
    for call in (wire.owner(past), route_of(wire, past)):  # refused until the topic grows
        error = await refused(call)
        assert (error.code(), error.details()) == (grpc.StatusCode.NOT_FOUND, why)
    assert await admin.update_partitions(topic, 4) == 4
    assert await partitions_of(wire, topic) == 4
    route = await route_of(wire, topic)
    assert (route.partitions, [r.partition for r in route.routes]) == (4, [0, 1, 2, 3])
    assert [r.topic for r in route.routes] == [f"{topic}-partition-{i}" for i in range(4)]
    for index in (2, 3):
        await assert_round_trip(wire, f"{topic}-partition-{index}", b"after growing %d" % index)
    with pytest.raises(NotAllowedError, match=f"cannot shrink from 4 to 3 partitions: topic {topic} can only grow"):
        await admin.update_partitions(topic, 3)
    assert await partitions_of(wire, topic) == 4
    assert (await route_of(wire, topic)).partitions == 4
    assert (await refused(wire.owner(f"{topic}-partition-4"))).code() == grpc.StatusCode.NOT_FOUND


async def test_the_broker_refuses_a_partitioned_topics_base_name_and_partitions_past_its_count(
    admin: AdminClient, wire: WireClient, shared_standalone: StandaloneProcess,
) -> None:
    """A partitioned topic's data lives in its partitions: a producer or consumer on its base name
    would make a hidden topic beside them, and one dialling the broker with a partition past the
    count (lookup refuses it) would make a partition that cannot exist."""
    broker = f"127.0.0.1:{shared_standalone.broker_port}"
    topic = unique_topic("based")
    await admin.create_topic(topic, partitions=2)
    why = (f"topic {topic} is partitioned (2 partitions): producers and consumers use its partitions, "
           f"{topic}-partition-0 to -1")
    with pytest.raises(WireError) as producing:
        await wire.producer(topic)
    assert (producing.value.code, producing.value.error.message) == (common_pb2.NOT_ALLOWED, why)
    with pytest.raises(WireError) as consuming:
        await wire.consumer(topic, "s")
    assert (consuming.value.code, consuming.value.error.message) == (common_pb2.NOT_ALLOWED, why)
    past = f"{topic}-partition-2"
    with pytest.raises(WireError) as beyond:
        await wire.producer(past, address=broker)
    assert (beyond.value.code, beyond.value.error.message) == (
        common_pb2.NOT_FOUND, f"Topic {past} does not exist: {topic} has 2 partitions (0 to 1)")
    listed = await topics_of(wire, "public/default")
    assert listed.count(topic) == 1 and past not in listed  # no hidden topic was made
    await assert_round_trip(wire, f"{topic}-partition-1", b"the partitions still serve")


# ---- route info ----

async def test_route_names_every_partition_with_its_index_name_and_owner(
    admin: AdminClient, wire: WireClient,
) -> None:
    topic = unique_topic("routed", persistent=False)
    await admin.create_topic(topic, partitions=4)
    [broker] = (await brokers_of(wire)).values()
    route = await route_of(wire, topic)
    assert route.partitions == 4
    assert [(r.partition, r.topic, r.broker_address, r.broker_id) for r in route.routes] == [
        (i, f"{topic}-partition-{i}", broker.address, broker.broker_id) for i in range(4)
    ]
    for r in route.routes:  # the route and a lookup of the partition agree
        assert await wire.owner(r.topic) == r.broker_address


async def test_route_of_a_non_partitioned_topic_is_one_route_with_partition_minus_one(wire: WireClient) -> None:
    local = unique_name("single")
    [broker] = (await brokers_of(wire)).values()
    route = await route_of(wire, local)
    assert route.partitions == 0
    assert [(r.partition, r.topic, r.broker_address, r.broker_id) for r in route.routes] == [
        (-1, f"persistent://public/default/{local}", broker.address, broker.broker_id)
    ]


async def test_invalid_topic_names_are_refused_by_every_topic_discovery_call(wire: WireClient) -> None:
    calls = (
        lambda topic: wire.lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic)),
        lambda topic: wire.lookup.GetPartitionedTopicMetadata(lookup_pb2.PartitionedTopicMetadataRequest(topic=topic)),
        lambda topic: wire.lookup.GetTopicRoute(lookup_pb2.TopicRouteRequest(topic=topic)),
    )
    cases = {
        "bad name": "names may use letters, digits",
        "public/default": "expected <name> or <tenant>/<namespace>/<name>",
        "http://public/default/t": "the domain must be 'persistent' or 'non-persistent'",
        "persistent://public/default": "expected <domain>://<tenant>/<namespace>/<name>",
    }
    for call in calls:
        for topic, reason in cases.items():
            error = await refused(call(topic))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, topic
            assert f"topic name {topic!r} is invalid: {reason}" in (error.details() or ""), error.details()
        empty = await refused(call(""))
        assert (empty.code(), "topic name is empty" in (empty.details() or "")) == (
            grpc.StatusCode.INVALID_ARGUMENT, True)


# ---- topics of a namespace ----

async def test_topics_of_a_namespace_are_the_existing_ones_with_partitions_folded_into_their_base(
    admin: AdminClient, wire: WireClient,
) -> None:
    """A topic of a namespace is one that exists: a partitioned topic (listed once, by its base
    name, however many of its partitions were used), a persistent topic with a managed ledger
    (created through admin or by its first producer or consumer), and a non-persistent topic a
    broker has served (recorded until it is deleted). Being looked up, routed or asked for partition
    metadata creates nothing. A used `x-partition-<i>` whose `x` is not partitioned is a topic of
    its own, listed by its full name."""
    namespace = f"public/{unique_name('discovery')}"
    await admin.create_namespace(namespace)
    assert await topics_of(wire, namespace) == []
    persistent, non_persistent = f"persistent://{namespace}", f"non-persistent://{namespace}"
    await admin.create_topic(f"{persistent}/parted", partitions=3)
    await admin.create_topic(f"{non_persistent}/np-parted", partitions=2)
    await admin.create_topic(f"{persistent}/created")
    for used in (f"{persistent}/parted-partition-1", f"{non_persistent}/np-parted-partition-0",
                 f"{persistent}/produced", f"{non_persistent}/np-produced", f"{persistent}/lonely-partition-0"):
        await (await wire.producer(used)).send(b"x")
    looked_up = f"{persistent}/looked-up"
    await wire.lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=looked_up))
    await route_of(wire, f"{persistent}/routed")
    await partitions_of(wire, f"{non_persistent}/asked")

    expected_persistent = [f"{persistent}/{name}" for name in ("created", "lonely-partition-0", "parted", "produced")]
    expected_non_persistent = [f"{non_persistent}/{name}" for name in ("np-parted", "np-produced")]
    assert await topics_of(wire, namespace) == sorted(expected_persistent + expected_non_persistent)
    assert await topics_of(wire, namespace, lookup_pb2.PERSISTENT) == expected_persistent
    assert await topics_of(wire, namespace, lookup_pb2.NON_PERSISTENT) == expected_non_persistent
    assert await admin.list_topics(namespace) == await topics_of(wire, namespace)  # admin agrees
    assert await topics_of(wire, "public/default", lookup_pb2.NON_PERSISTENT) == [
        t for t in await topics_of(wire, "public/default") if t.startswith("non-persistent://")
    ]


async def test_topics_of_an_unknown_namespace_are_not_found_and_of_a_malformed_one_invalid(
    wire: WireClient,
) -> None:
    missing = f"public/{unique_name('missing')}"
    for namespace, message in ((missing, f"Namespace {missing} does not exist"),
                               ("no-such-tenant/ns", "Tenant no-such-tenant does not exist")):
        error = await refused(topics_of(wire, namespace))
        assert error.code() == grpc.StatusCode.NOT_FOUND, error
        assert error.details() == f"{common_pb2.NOT_FOUND}:{message}"
    for namespace in ("", "public", "public/default/extra", "/default", "public/bad name"):
        error = await refused(topics_of(wire, namespace))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, namespace
        assert f"namespace {namespace!r} is invalid" in (error.details() or ""), error.details()
    error = await refused(topics_of(wire, "public/default", domain=7))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "topic domain 7 is unknown" in (error.details() or "")


# ---- two brokers, as processes ----

async def test_partitions_spread_over_both_brokers_and_each_route_names_the_broker_serving_it(
    make_local_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_local_cluster(extra_env={**service_env(), "HERALD_BROKER_CLUSTER": "east"})
    topic = unique_topic("spread")
    async with WireClient(cluster.lookup.port) as wire, AdminClient(cluster.service_url, timeout=30) as admin:
        brokers = await brokers_of(wire)
        assert {(b.broker_id, b.address, b.cluster) for b in brokers.values()} == {
            (p.name, p.address, "east") for p in cluster.brokers
        }
        assert all((b.owned_topics, b.load.topics, b.load.producers) == (0, 0, 0) for b in brokers.values())
        await admin.create_topic(topic, partitions=8)
        route = await route_of(wire, topic)
        assert (route.partitions, [r.partition for r in route.routes]) == (8, list(range(8)))
        assert sorted(Counter(r.broker_id for r in route.routes).values()) == [4, 4]  # fewest assigned first
        for r in route.routes:
            assert r.broker_address == brokers[r.broker_id].address
            producer = await wire.producer(r.topic, address=r.broker_address)
            assert (await producer.send(b"to %d" % r.partition)).HasField("receipt")
            [other] = [b.address for b in brokers.values() if b.address != r.broker_address]
            with pytest.raises(WireError) as not_owner:
                await wire.producer(r.topic, address=other)
            assert not_owner.value.code == common_pb2.NOT_OWNER, not_owner.value

        async def counted() -> bool:  # each broker reports its 4 partitions and their producers
            now = await brokers_of(wire)
            return all((b.owned_topics, b.load.topics, b.load.producers) == (4, 4, 4) for b in now.values())

        await eventually(counted, "heartbeats reporting 4 topics and 4 producers per broker")
        before = {b.broker_id: b.last_heartbeat for b in brokers.values()}

        async def heartbeats_recorded() -> bool:
            return all(b.last_heartbeat > before[b.broker_id] for b in (await brokers_of(wire)).values())

        await eventually(heartbeats_recorded, "a newer heartbeat from every broker")


async def test_a_killed_broker_leaves_cluster_info_and_routes_name_the_survivor(local_cluster: LocalCluster) -> None:
    topic = unique_topic("failover")
    async with WireClient(local_cluster.lookup.port) as wire, AdminClient(local_cluster.service_url,
                                                                           timeout=30) as admin:
        await admin.create_topic(topic, partitions=8)
        route = await route_of(wire, topic)
        victim = route.routes[0].broker_id
        [survivor] = [b for b in (await brokers_of(wire)).values() if b.broker_id != victim]
        moved = [r.topic for r in route.routes if r.broker_id == victim]
        assert moved  # the victim owns some partitions, the survivor the rest
        assert len(moved) < 8
        await assert_round_trip(wire, moved[0], b"before the kill")

        local_cluster.process(victim).kill()

        async def only_survivor() -> bool:
            return list(await brokers_of(wire)) == [survivor.broker_id]

        await eventually(only_survivor, f"{victim} expiring from cluster info")
        after = await route_of(wire, topic)
        assert [(r.partition, r.broker_id, r.broker_address) for r in after.routes] == [
            (i, survivor.broker_id, survivor.address) for i in range(8)
        ]
        producer = await wire.producer(moved[0], address=survivor.address)
        assert (await producer.send(b"after the kill")).HasField("receipt")
        consumer = await wire.consumer(moved[0], "after", initial_position=broker_pb2.EARLIEST)
        await consumer.flow(10)
        assert [values_of(e) for e in await consumer.receive(2)] == [[b"before the kill"], [b"after the kill"]]
