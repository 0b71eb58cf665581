"""Subscription types through a real `herald standalone`, over the wire, on persistent topics:
Failover (the active consumer by priority then name, spread over partitions, told to each consumer,
and the take-over at the cursor when the active one leaves or is killed), Key_Shared (one consumer
per key, the auto-split hash ranges, per-key order across joins and leaves, no cumulative ack),
Shared with priority levels (SEEDS §3's dispatch order) and the refusals, with their exact errors."""

from __future__ import annotations

import itertools

import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2
from herald.broker.core.key_shared import key_hash
from herald.client.admin import AdminClient
from herald.common.codec.entry import decode_entry

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_topic
from tests.wire import WireClient, WireConsumer, WireError, WireProducer, abandon, values_of

FAILOVER, SHARED, KEY_SHARED = broker_pb2.FAILOVER, broker_pb2.SHARED, broker_pb2.KEY_SHARED
EXCLUSIVE, EARLIEST = broker_pb2.EXCLUSIVE, broker_pb2.EARLIEST


# ---- helpers ----

async def topic_stats(wire: WireClient, topic: str) -> admin_pb2.TopicStats:
    admin = await wire.admin(topic)
    stats: admin_pb2.TopicStats = await admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic))
    return stats


async def subscription_stats(wire: WireClient, topic: str, subscription: str) -> admin_pb2.SubscriptionStats:
    stats = await topic_stats(wire, topic)
    (sub,) = [s for s in stats.subscriptions if s.name == subscription]
    return sub


async def backlog_is(wire: WireClient, topic: str, subscription: str, entries: int) -> None:
    """Wait until the broker has processed acks (they travel on the consumer's stream, unanswered)."""
    async def check() -> bool:
        return (await subscription_stats(wire, topic, subscription)).backlog_entries == entries

    await eventually(check, f"backlog of {subscription} on {topic} reaching {entries}")


async def permits_arrived(wire: WireClient, topic: str, consumers: int) -> None:
    """Wait until the broker has seen a flow from each of `consumers` consumers (they travel on
    other streams than the sends that follow)."""
    async def check() -> bool:
        stats = await topic_stats(wire, topic)
        return sum(c.available_permits > 0 for s in stats.subscriptions for c in s.consumer_stats) >= consumers

    await eventually(check, f"permits of {consumers} consumers on {topic}")


async def is_active(consumer: WireConsumer) -> bool:
    """The next active_change the consumer was told."""
    reply = await consumer.event("active_change")
    return bool(reply.active_change.is_active)


def told_active_change(consumer: WireConsumer) -> bool:
    """Whether an active_change reply has arrived and was not taken yet."""
    return any(reply.WhichOneof("reply") == "active_change" for reply in consumer.events)


async def publish(producer: WireProducer, *values: bytes, key: str = "") -> None:
    """One entry per value, each acknowledged before the next is sent."""
    for value in values:
        reply = await producer.send(value, key=key)
        assert reply.HasField("receipt"), reply


def values(entries: list[broker_pb2.DeliveredEntry]) -> list[bytes]:
    return [value for entry in entries for value in values_of(entry)]


def key_of(entry: broker_pb2.DeliveredEntry) -> str:
    metadata, _ = decode_entry(entry.data)
    return metadata.partition_key


def keys_hashing_into(low: int, high: int, count: int) -> list[str]:
    """`count` keys whose hash is in low..high (inclusive)."""
    keys = (f"key-{i}" for i in itertools.count())
    return list(itertools.islice((key for key in keys if low <= key_hash(key.encode()) <= high), count))


async def leave(consumer: WireConsumer, how: str) -> None:
    """"close": the client closes its consumer; "killed": its stream is cut as a killed client's is."""
    if how == "close":
        await consumer.close()
    else:
        await abandon(consumer)


# ---- Failover ----

async def test_failover_active_consumer_is_chosen_by_priority_then_name_and_each_is_told(wire: WireClient) -> None:
    topic = unique_topic("failover-elect")
    c_b = await wire.consumer(topic, "fo", type=FAILOVER, consumer_name="c-b")
    assert await is_active(c_b) is True
    c_a = await wire.consumer(topic, "fo", type=FAILOVER, consumer_name="c-a")  # joins later, sorts first
    assert await is_active(c_a) is True
    assert await is_active(c_b) is False  # told again: it is no longer the active one
    low = await wire.consumer(topic, "fo", type=FAILOVER, consumer_name="a-low", priority_level=1)
    assert await is_active(low) is False  # sorts first by name, but its priority level is lower
    stats = await subscription_stats(wire, topic, "fo")
    assert stats.type == "Failover"
    assert {c.consumer_name: c.is_active for c in stats.consumer_stats} == {"c-a": True, "c-b": False, "a-low": False}

    # Only the active consumer receives.
    for consumer in (c_a, c_b, low):
        await consumer.flow(100)
    await permits_arrived(wire, topic, 3)
    producer = await wire.producer(topic)
    await publish(producer, b"m0", b"m1", b"m2")
    got = await c_a.receive(3)
    assert values(got) == [b"m0", b"m1", b"m2"]
    assert await c_b.sent_so_far() == [] and await low.sent_so_far() == []
    await c_a.ack(*got)
    await backlog_is(wire, topic, "fo", 0)

    # The active one leaves: the next by priority then name takes over; the others hear nothing new.
    await c_a.close()
    assert await is_active(c_b) is True
    await publish(producer, b"m3")
    assert values(await c_b.receive(1)) == [b"m3"]
    assert await low.sent_so_far() == []
    assert not told_active_change(low)
    # Only the lower priority level is left: it becomes active, and gets what c-b did not acknowledge.
    await c_b.close()
    assert await is_active(low) is True
    await publish(producer, b"m4")
    assert values(await low.receive(2)) == [b"m3", b"m4"]


@pytest.mark.parametrize("how", ["close", "killed"])
async def test_failover_takes_over_at_the_cursor_when_the_active_consumer_leaves(wire: WireClient, how: str) -> None:
    topic = unique_topic(f"failover-takeover-{how}")
    first = await wire.consumer(topic, "fo", type=FAILOVER, consumer_name="c-a", initial_position=EARLIEST)
    second = await wire.consumer(topic, "fo", type=FAILOVER, consumer_name="c-b")
    assert (await is_active(first), await is_active(second)) == (True, False)
    producer = await wire.producer(topic)
    await publish(producer, *[b"m%d" % i for i in range(6)])
    await first.flow(4)  # m4 and m5 are never sent to it
    await second.flow(100)
    got = await first.receive(4)
    assert values(got) == [b"m0", b"m1", b"m2", b"m3"]
    await first.ack(got[0], got[1], got[3])  # m2 stays unacknowledged, a hole before m3
    await backlog_is(wire, topic, "fo", 3)

    await leave(first, how)
    assert await is_active(second) is True
    taken_over = await second.receive(3)
    assert values(taken_over) == [b"m2", b"m4", b"m5"]
    assert await second.sent_so_far() == []  # m0, m1 and m3 were acknowledged: never again
    await publish(producer, b"m6")
    assert values(await second.receive(1)) == [b"m6"]
    stats = await subscription_stats(wire, topic, "fo")
    assert [(c.consumer_name, c.is_active) for c in stats.consumer_stats] == [("c-b", True)]


async def test_failover_higher_priority_consumer_joining_takes_over_what_the_active_one_had_not_acked(
    wire: WireClient,
) -> None:
    topic = unique_topic("failover-displaced")
    low = await wire.consumer(topic, "fo", type=FAILOVER, consumer_name="a-low", priority_level=1,
                              initial_position=EARLIEST)
    assert await is_active(low) is True
    producer = await wire.producer(topic)
    await publish(producer, b"m0", b"m1", b"m2", b"m3")
    await low.flow(100)
    got = await low.receive(4)
    assert values(got) == [b"m0", b"m1", b"m2", b"m3"]
    await low.ack(got[0], got[2])
    await backlog_is(wire, topic, "fo", 2)

    high = await wire.consumer(topic, "fo", type=FAILOVER, consumer_name="z-high", priority_level=0)
    assert (await is_active(high), await is_active(low)) == (True, False)
    await high.flow(100)
    assert values(await high.receive(2)) == [b"m1", b"m3"]
    await publish(producer, b"m4")
    assert values(await high.receive(1)) == [b"m4"]
    assert await low.sent_so_far() == []


async def test_failover_spreads_active_consumers_over_partitions_by_index(
    wire: WireClient, shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("failover-parted")
    async with AdminClient(shared_standalone.service_url, timeout=20) as admin:
        await admin.create_topic(topic, partitions=3)
    partitions = [f"{topic}-partition-{i}" for i in range(3)]
    names = ["c-c", "c-b", "c-a"]  # connected in reverse order of their names
    consumers: dict[tuple[int, str], WireConsumer] = {}
    for index, partition in enumerate(partitions):
        for name in names:
            consumers[index, name] = consumer = await wire.consumer(partition, "fo", type=FAILOVER, consumer_name=name)
            await consumer.flow(100)

    async def actives() -> list[str]:
        found = []
        for partition in partitions:
            stats = await subscription_stats(wire, partition, "fo")
            found.append(",".join(c.consumer_name for c in stats.consumer_stats if c.is_active))
        return found

    # Partition i: the (i mod 3)-th consumer by name.
    assert await actives() == ["c-a", "c-b", "c-c"]
    for index, partition in enumerate(partitions):
        producer = await wire.producer(partition)
        await publish(producer, b"p%d" % index)
    for index in range(3):  # each partition's message at its active consumer ...
        assert values(await consumers[index, sorted(names)[index]].receive(1)) == [b"p%d" % index], index
    for index in range(3):  # ... and at no other
        for name in names:
            if name != sorted(names)[index]:
                assert await consumers[index, name].sent_so_far() == [], (index, name)

    # c-b leaves partition 1: of c-a and c-c, the (1 mod 2)-th by name takes it.
    await consumers[1, "c-b"].close()
    # c-c was told at each change on partition 1: active alone (and beside c-b), inactive once c-a
    # came, active again now.
    told = [await is_active(consumers[1, "c-c"]) for _ in range(3)]
    assert told == [True, False, True]

    async def moved() -> bool:
        return await actives() == ["c-a", "c-c", "c-c"]

    await eventually(moved, "c-c becoming active on partition 1")


# ---- Key_Shared ----

async def test_key_shared_sends_each_key_to_one_consumer_in_publish_order_by_auto_split_ranges(
    wire: WireClient,
) -> None:
    topic = unique_topic("key-shared-keys")
    # Joining in this order, a owns 32768..65535, then b takes 0..32767, then c takes 0..16383 of b's.
    a, b, c = [await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name=name) for name in "abc"]
    owners = {"a": (32768, 65535), "b": (16384, 32767), "c": (0, 16383)}
    stats = await subscription_stats(wire, topic, "ks")
    assert {c.consumer_name: [(r.start, r.end) for r in c.key_hash_ranges] for c in stats.consumer_stats} == {
        name: [owned] for name, owned in owners.items()}  # the stats show the split
    keys = {name: keys_hashing_into(low, high, 4) for name, (low, high) in owners.items()}
    for consumer in (a, b, c):
        await consumer.flow(1000)
    await permits_arrived(wire, topic, 3)
    producer = await wire.producer(topic)
    for round_ in range(5):
        for key in itertools.chain(*zip(*keys.values(), strict=True)):  # keys of all three interleaved
            await publish(producer, f"{key}:{round_}".encode(), key=key)

    received = {name: await consumer.receive(20) for name, consumer in zip("abc", (a, b, c), strict=True)}
    for consumer in (a, b, c):
        assert await consumer.sent_so_far() == []
    at: dict[str, set[str]] = {}
    for name, entries in received.items():
        for entry in entries:
            at.setdefault(key_of(entry), set()).add(name)
    assert at == {key: {name} for name, owned in keys.items() for key in owned}  # each key at one consumer
    for name, entries in received.items():
        for key in keys[name]:
            assert [v for v in values(entries) if v.startswith(f"{key}:".encode())] == [
                f"{key}:{r}".encode() for r in range(5)]


async def test_key_shared_joining_consumer_takes_part_of_the_range_and_gets_its_keys_afterwards(
    wire: WireClient,
) -> None:
    topic = unique_topic("key-shared-join")
    lowest, lower, upper = keys_hashing_into(0, 16383, 3), keys_hashing_into(16384, 32767, 3), \
        keys_hashing_into(32768, 65535, 3)
    producer = await wire.producer(topic)
    a = await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name="a")
    await a.flow(1000)
    await permits_arrived(wire, topic, 1)

    async def round_of(tag: str) -> None:
        for key in lowest + lower + upper:
            await publish(producer, f"{tag}:{key}".encode(), key=key)

    def sent(tag: str, keys: list[str]) -> list[bytes]:
        return [f"{tag}:{key}".encode() for key in keys]

    await round_of("alone")
    got = await a.receive(9)
    assert values(got) == sent("alone", lowest + lower + upper)  # the first consumer owns everything
    await a.ack(*got)
    await backlog_is(wire, topic, "ks", 0)

    b = await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name="b")  # takes 0..32767
    await b.flow(1000)
    await permits_arrived(wire, topic, 2)
    await round_of("two")
    got_a, got_b = await a.receive(3), await b.receive(6)
    assert (values(got_a), values(got_b)) == (sent("two", upper), sent("two", lowest + lower))
    await a.ack(*got_a)
    await b.ack(*got_b)
    await backlog_is(wire, topic, "ks", 0)

    c = await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name="c")  # takes 0..16383 of b's
    await c.flow(1000)
    await permits_arrived(wire, topic, 3)
    await round_of("three")
    got_a, got_b, got_c = await a.receive(3), await b.receive(3), await c.receive(3)
    assert (values(got_a), values(got_b), values(got_c)) == (
        sent("three", upper), sent("three", lower), sent("three", lowest))
    for consumer in (a, b, c):
        assert await consumer.sent_so_far() == []


async def test_key_shared_joining_consumer_waits_for_earlier_entries_of_its_keys_to_be_acked(
    wire: WireClient,
) -> None:
    topic = unique_topic("key-shared-join-order")
    (key,) = keys_hashing_into(0, 32767, 1)  # moves from a to b when b joins
    producer = await wire.producer(topic)
    a = await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name="a")
    await a.flow(100)
    await permits_arrived(wire, topic, 1)
    await publish(producer, b"k0", key=key)
    (held,) = await a.receive(1)
    b = await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name="b")
    await b.flow(100)
    await permits_arrived(wire, topic, 2)
    await publish(producer, b"k1", key=key)
    # a still holds k0: b must not overtake it with k1. A marker of a key that stays a's, published
    # after k1, reaches a: the broker has dispatched what it could of k1 by then.
    (marker_key,) = keys_hashing_into(32768, 65535, 1)
    await publish(producer, b"marker", key=marker_key)
    assert values(await a.receive(1)) == [b"marker"]
    assert await b.sent_so_far() == [] and await a.sent_so_far() == []
    await a.ack(held)
    assert values(await b.receive(1)) == [b"k1"]


@pytest.mark.parametrize("how", ["close", "killed"])
async def test_key_shared_redelivers_a_leaving_consumers_entries_before_newer_ones_of_their_key(
    wire: WireClient, how: str,
) -> None:
    topic = unique_topic(f"key-shared-leave-{how}")
    (moving,) = keys_hashing_into(0, 32767, 1)  # b's while b is connected
    (staying,) = keys_hashing_into(32768, 65535, 1)  # always a's
    a = await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name="a")
    b = await wire.consumer(topic, "ks", type=KEY_SHARED, consumer_name="b")
    await a.flow(100)
    await b.flow(3)  # k3 and k4 wait for b's permits
    await permits_arrived(wire, topic, 2)
    producer = await wire.producer(topic)
    for i in range(5):
        await publish(producer, b"k%d" % i, key=moving)
        if i < 2:
            await publish(producer, b"s%d" % i, key=staying)
    held = await b.receive(3)
    assert values(held) == [b"k0", b"k1", b"k2"]
    assert values(await a.receive(2)) == [b"s0", b"s1"]
    await b.ack(held[0])
    await backlog_is(wire, topic, "ks", 6)  # k1..k4, s0, s1

    await leave(b, how)
    await publish(producer, b"k5", key=moving)
    await publish(producer, b"k6", key=moving)
    taken_over = await a.receive(6)
    assert values(taken_over) == [b"k1", b"k2", b"k3", b"k4", b"k5", b"k6"]
    assert [e.redelivery_count for e in taken_over] == [1, 1, 0, 0, 0, 0]  # only b had seen k1, k2
    assert await a.sent_so_far() == []  # k0 was acknowledged


async def test_cumulative_ack_on_key_shared_is_refused(wire: WireClient) -> None:
    topic = unique_topic("key-shared-cumulative")
    consumer = await wire.consumer(topic, "ks", type=KEY_SHARED)
    await consumer.flow(10)
    await permits_arrived(wire, topic, 1)
    producer = await wire.producer(topic)
    await publish(producer, b"x", key="one")
    await publish(producer, b"y", key="two")
    got = await consumer.receive(2)
    await consumer.ack(got[-1], cumulative=True)
    refused = (await consumer.event("error")).error
    assert (refused.code, refused.message) == (
        common_pb2.NOT_ALLOWED, "Cumulative ack is not allowed on a Key_Shared subscription")
    assert (await subscription_stats(wire, topic, "ks")).backlog_entries == 2  # nothing was acked
    await consumer.ack(*got)  # the stream goes on: individual acks are taken
    await backlog_is(wire, topic, "ks", 0)


# ---- Shared with priority levels ----

async def test_shared_dispatch_serves_the_highest_priority_level_with_permits_round_robin(wire: WireClient) -> None:
    """SEEDS §3: C1 (level 0, 2 permits), C2 (0, 1), C3 (0, 1), C4 (1, 2), C5 (1, 1) are served
    C1, C2, C3, C1, C4, C5, C4 (dispatch_round_robin_batch is 1 by default)."""
    topic = unique_topic("shared-priority")
    layout = [("C1", 0, 2), ("C2", 0, 1), ("C3", 0, 1), ("C4", 1, 2), ("C5", 1, 1)]
    consumers = {}
    for name, level, permits in layout:
        consumers[name] = consumer = await wire.consumer(topic, "sh", type=SHARED, consumer_name=name,
                                                         priority_level=level)
        await consumer.flow(permits)
    await permits_arrived(wire, topic, 5)
    producer = await wire.producer(topic)
    await publish(producer, *[b"%d" % i for i in range(7)])
    order: dict[int, str] = {}
    for name, _, permits in layout:
        for value in values(await consumers[name].receive(permits)):
            order[int(value)] = name
    assert [order.get(i) for i in range(7)] == ["C1", "C2", "C3", "C1", "C4", "C5", "C4"]
    for consumer in consumers.values():
        assert await consumer.sent_so_far() == []


# ---- refusals ----

async def test_subscribing_with_another_type_while_the_subscription_has_consumers_is_refused(
    wire: WireClient,
) -> None:
    topic = unique_topic("other-type")
    failover = await wire.consumer(topic, "s", type=FAILOVER)
    for other in (SHARED, KEY_SHARED, EXCLUSIVE):
        with pytest.raises(WireError) as refused:
            await wire.consumer(topic, "s", type=other)
        assert (refused.value.code, refused.value.error.message) == (
            common_pb2.CONSUMER_BUSY,
            "Subscription is of a different type: s is Failover and has consumers; close them or subscribe as Failover")
    await failover.close()

    async def no_consumers() -> bool:
        return (await subscription_stats(wire, topic, "s")).consumers == 0

    await eventually(no_consumers, "the Failover consumer leaving")
    await wire.consumer(topic, "s", type=SHARED)  # without consumers, the type may change
    assert (await subscription_stats(wire, topic, "s")).type == "Shared"


async def test_a_second_consumer_on_an_exclusive_subscription_is_refused(wire: WireClient) -> None:
    topic = unique_topic("exclusive")
    first = await wire.consumer(topic, "s", type=EXCLUSIVE, consumer_name="first")
    with pytest.raises(WireError) as refused:
        await wire.consumer(topic, "s", type=EXCLUSIVE, consumer_name="second")
    assert (refused.value.code, refused.value.error.message) == (
        common_pb2.CONSUMER_BUSY, "Exclusive consumer is already connected")
    stats = await subscription_stats(wire, topic, "s")
    assert [c.consumer_name for c in stats.consumer_stats] == ["first"]
    await first.close()

    async def no_consumers() -> bool:
        return (await subscription_stats(wire, topic, "s")).consumers == 0

    await eventually(no_consumers, "the first consumer leaving")
    await wire.consumer(topic, "s", type=EXCLUSIVE, consumer_name="second")


@pytest.mark.parametrize("kind", ["persistent", "non-persistent"])
async def test_a_negative_priority_level_is_refused_and_leaves_no_subscription(wire: WireClient, kind: str) -> None:
    topic = unique_topic("negative-priority").replace("persistent", kind, 1)
    for sub_type in (SHARED, FAILOVER):
        with pytest.raises(WireError) as refused:
            await wire.consumer(topic, "s", type=sub_type, priority_level=-1)
        assert (refused.value.code, refused.value.error.message) == (
            common_pb2.INVALID_ARGUMENT, "priority level must be 0 (the highest) or more, got -1")
    assert [s.name for s in (await topic_stats(wire, topic)).subscriptions] == []
