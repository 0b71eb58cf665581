"""Redelivery through a real `herald standalone`, over the wire, on persistent topics: redelivery
counts per entry per subscription, RedeliverUnacknowledged per subscription type, negative acks and
their delay, delayed delivery (deliver-at) per subscription type, and message TTL set by topic and
namespace policies (a standalone whose expiry check runs every 0.1 s; the broker-wide TTL setting
is proved in test_readers_pull.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import eventually, unique_name, unique_topic
from tests.wire import WireClient, WireConsumer, values_of

LONG_DELAY_MS = 60_000
TTL_SECONDS = 60


@pytest.fixture(scope="module")
def ttl_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone whose message expiry check runs every 0.1 s (no broker-wide TTL: policies set it)."""
    with running_standalone(tmp_path_factory.mktemp("redelivery") / "data",
                            message_expiry_check_interval=0.1) as server:
        yield server


@pytest.fixture
async def wire(ttl_standalone: StandaloneProcess) -> AsyncIterator[WireClient]:
    async with WireClient(ttl_standalone.port) as client:
        yield client


async def publish(wire: WireClient, topic: str, *values: bytes, **options: object) -> list[common_pb2.Position]:
    """One entry per value (make_entry options apply to each); their positions."""
    producer = await wire.producer(topic)
    positions = []
    for value in values:
        reply = await producer.send(value, **options)
        assert reply.HasField("receipt"), reply
        positions.append(common_pb2.Position(ledger_id=reply.receipt.ledger_id, entry_id=reply.receipt.entry_id))
    await producer.close()
    return positions


async def consume(wire: WireClient, topic: str, subscription: str, permits: int = 100,
                  **options: object) -> WireConsumer:
    consumer = await wire.consumer(topic, subscription, initial_position=broker_pb2.EARLIEST, **options)
    if permits:
        await consumer.flow(permits)
    return consumer


def values(entries: list[broker_pb2.DeliveredEntry]) -> list[bytes]:
    return [value for entry in entries for value in values_of(entry)]


def counted(entries: list[broker_pb2.DeliveredEntry]) -> list[tuple[bytes, int]]:
    """(value, redelivery count) of single-message entries."""
    return [(values_of(entry)[0], entry.redelivery_count) for entry in entries]


async def subscription_stats(wire: WireClient, topic: str, subscription: str) -> admin_pb2.SubscriptionStats:
    admin = await wire.admin(topic)
    stats = await admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic))
    (found,) = [s for s in stats.subscriptions if s.name == subscription]
    return found


async def unacked_of(wire: WireClient, topic: str, subscription: str) -> dict[str, int]:
    """Unacknowledged messages per consumer name."""
    stats = await subscription_stats(wire, topic, subscription)
    return {c.consumer_name: c.unacked_messages for c in stats.consumer_stats}


# ---- redelivery counts ----

@pytest.mark.parametrize("sub_type", [broker_pb2.SHARED, broker_pb2.KEY_SHARED], ids=["shared", "key_shared"])
async def test_redelivery_count_rises_per_entry_and_is_kept_per_subscription(
    wire: WireClient, sub_type: broker_pb2.SubscriptionType,
) -> None:
    topic = unique_topic("redeliver")
    first = await consume(wire, topic, "first", type=sub_type)
    second = await consume(wire, topic, "second", type=sub_type, permits=0)
    await publish(wire, topic, b"a", b"b", key="k")
    a, b = await first.receive(2)
    assert counted([a, b]) == [(b"a", 0), (b"b", 0)]
    await first.redeliver(a)
    (a,) = await first.receive(1)
    assert counted([a]) == [(b"a", 1)]
    await first.redeliver(a, b)
    again = sorted(await first.receive(2), key=lambda entry: entry.entry_id)
    assert counted(again) == [(b"a", 2), (b"b", 1)]
    # The same entries on another subscription of the topic have their own counts.
    await second.flow(100)
    assert counted(await second.receive(2)) == [(b"a", 0), (b"b", 0)]


# ---- RedeliverUnacknowledged ----

@pytest.mark.parametrize("sub_type", [broker_pb2.EXCLUSIVE, broker_pb2.FAILOVER], ids=["exclusive", "failover"])
async def test_single_consumer_types_redeliver_everything_unacknowledged_in_order(
    wire: WireClient, sub_type: broker_pb2.SubscriptionType,
) -> None:
    topic = unique_topic("redeliver")
    consumer = await consume(wire, topic, "s", type=sub_type)
    await publish(wire, topic, b"a", b"b", b"c", b"d", b"e")
    got = await consumer.receive(5)
    assert counted(got) == [(b"a", 0), (b"b", 0), (b"c", 0), (b"d", 0), (b"e", 0)]
    await consumer.ack(got[1], cumulative=True)  # a, b
    await consumer.ack(got[3])  # d
    await consumer.redeliver()
    assert counted(await consumer.receive(2)) == [(b"c", 1), (b"e", 1)]
    # Even when only some positions are named, these types redeliver everything unacknowledged.
    await consumer.redeliver(got[4])
    assert counted(await consumer.receive(2)) == [(b"c", 2), (b"e", 2)]
    assert await consumer.sent_so_far() == []


async def test_shared_redelivers_only_the_positions_given_and_never_acknowledged_ones(wire: WireClient) -> None:
    topic = unique_topic("redeliver")
    holder = await consume(wire, topic, "s", permits=3, type=broker_pb2.SHARED, consumer_name="holder")
    await publish(wire, topic, b"a", b"b", b"c")
    a, b, _ = await holder.receive(3)
    other = await consume(wire, topic, "s", type=broker_pb2.SHARED, consumer_name="other")
    await holder.ack(a)
    await holder.redeliver(a, b)  # a is acknowledged: only b comes back
    assert counted(await other.receive(1)) == [(b"b", 1)]
    assert await other.sent_so_far() == []
    assert await unacked_of(wire, topic, "s") == {"holder": 1, "other": 1}  # c stays with its consumer
    await holder.redeliver()  # everything this consumer holds: c
    assert counted(await other.receive(1)) == [(b"c", 1)]
    assert await holder.sent_so_far() == [] and await other.sent_so_far() == []
    assert await unacked_of(wire, topic, "s") == {"holder": 0, "other": 2}


# ---- negative acks ----

async def test_a_negatively_acked_entry_comes_back_after_its_delay_with_its_count_raised(wire: WireClient) -> None:
    topic = unique_topic("redeliver")
    consumer = await consume(wire, topic, "s", type=broker_pb2.SHARED)
    await publish(wire, topic, b"a", b"b")
    a, b = await consumer.receive(2)
    await consumer.ack(b)
    await consumer.nack(a, delay_ms=200)
    (a,) = await consumer.receive(1)
    assert counted([a]) == [(b"a", 1)]
    await consumer.nack(a, delay_ms=-1)
    error = await consumer.event("error")
    assert error.error.code == common_pb2.INVALID_ARGUMENT and "must not be negative, got -1" in error.error.message
    await consumer.nack(a, delay_ms=200)  # the refused nack changed nothing: the count goes on from 1
    assert counted(await consumer.receive(1)) == [(b"a", 2)]


async def test_a_long_nack_delay_holds_the_entry_while_others_keep_flowing(wire: WireClient) -> None:
    topic = unique_topic("redeliver")
    consumer = await consume(wire, topic, "s", type=broker_pb2.SHARED)
    await publish(wire, topic, b"a")
    (a,) = await consumer.receive(1)
    await consumer.nack(a, delay_ms=LONG_DELAY_MS)
    await publish(wire, topic, b"b", b"c")
    later = await consumer.receive(2)
    assert counted(later) == [(b"b", 0), (b"c", 0)]
    await consumer.ack(*later)
    await consumer.handled()
    assert await consumer.sent_so_far() == []
    stats = await subscription_stats(wire, topic, "s")
    assert (stats.backlog_entries, stats.unacked_messages) == (1, 0)  # a waits, unacknowledged


async def test_a_nack_of_several_entries_redelivers_just_those(wire: WireClient) -> None:
    topic = unique_topic("redeliver")
    consumer = await consume(wire, topic, "s", type=broker_pb2.SHARED)
    await publish(wire, topic, b"a", b"b", b"c", b"d")
    a, _, c, _ = await consumer.receive(4)
    await consumer.nack(a, c, delay_ms=100)
    again = sorted(await consumer.receive(2), key=lambda entry: entry.entry_id)
    assert counted(again) == [(b"a", 1), (b"c", 1)]
    assert await consumer.sent_so_far() == []


async def test_a_nack_on_exclusive_redelivers_everything_unacknowledged(wire: WireClient) -> None:
    # As Pulsar's client does on the single-consumer types: a nack means "redeliver all".
    topic = unique_topic("redeliver")
    consumer = await consume(wire, topic, "s", type=broker_pb2.EXCLUSIVE)
    await publish(wire, topic, b"a", b"b", b"c")
    a, _, c = await consumer.receive(3)
    await consumer.ack(a)
    await consumer.nack(c, delay_ms=100)
    assert counted(await consumer.receive(2)) == [(b"b", 1), (b"c", 1)]
    assert await consumer.sent_so_far() == []


# ---- delayed delivery ----

@pytest.mark.parametrize("sub_type", [broker_pb2.SHARED, broker_pb2.KEY_SHARED], ids=["shared", "key_shared"])
async def test_an_entry_is_held_until_its_deliver_at_time_while_later_ones_flow(
    wire: WireClient, sub_type: broker_pb2.SubscriptionType,
) -> None:
    topic = unique_topic("delayed")
    consumer = await consume(wire, topic, "s", type=sub_type)
    # One key throughout: a delayed entry does not hold back later ones of its key.
    await publish(wire, topic, b"late", key="k", deliver_at=int(time.time() * 1000) + LONG_DELAY_MS)
    await publish(wire, topic, b"now", key="k")
    assert counted(await consumer.receive(1)) == [(b"now", 0)]
    stats = await subscription_stats(wire, topic, "s")
    assert (stats.delayed_messages, stats.backlog_entries) == (1, 2)
    soon_at = int(time.time() * 1000) + 1_000
    await publish(wire, topic, b"soon", key="k", deliver_at=soon_at)
    (soon,) = await consumer.receive(1, timeout=30)
    assert counted([soon]) == [(b"soon", 0)]
    assert int(time.time() * 1000) >= soon_at  # held until due, then delivered
    assert await consumer.sent_so_far() == []  # the late one is still held
    assert (await subscription_stats(wire, topic, "s")).delayed_messages == 1


@pytest.mark.parametrize("sub_type", [broker_pb2.EXCLUSIVE, broker_pb2.FAILOVER], ids=["exclusive", "failover"])
async def test_single_consumer_types_deliver_a_delayed_entry_at_once(
    wire: WireClient, sub_type: broker_pb2.SubscriptionType,
) -> None:
    topic = unique_topic("delayed")
    consumer = await consume(wire, topic, "s", type=sub_type)
    await publish(wire, topic, b"late", deliver_at=int(time.time() * 1000) + LONG_DELAY_MS)
    await publish(wire, topic, b"now")
    assert counted(await consumer.receive(2)) == [(b"late", 0), (b"now", 0)]
    assert (await subscription_stats(wire, topic, "s")).delayed_messages == 0


async def test_a_delayed_entry_redelivered_before_it_is_due_is_still_held(wire: WireClient) -> None:
    # A held entry was never sent: asking for everything again must not release it early.
    topic = unique_topic("delayed")
    consumer = await consume(wire, topic, "s", type=broker_pb2.SHARED)
    await publish(wire, topic, b"late", deliver_at=int(time.time() * 1000) + LONG_DELAY_MS)
    await publish(wire, topic, b"now")
    assert counted(await consumer.receive(1)) == [(b"now", 0)]
    await consumer.redeliver()
    assert counted(await consumer.receive(1)) == [(b"now", 1)]
    assert await consumer.sent_so_far() == []
    assert (await subscription_stats(wire, topic, "s")).delayed_messages == 1



async def receive_all(consumers: list[WireConsumer], count: int, seconds: float = 10.0,
                      ) -> list[list[broker_pb2.DeliveredEntry]]:
    """What each consumer receives (acknowledging it) until `count` entries came in all."""
    got: list[list[broker_pb2.DeliveredEntry]] = [[] for _ in consumers]
    deadline = time.monotonic() + seconds
    while sum(map(len, got)) < count and time.monotonic() < deadline:
        for consumer, into in zip(consumers, got, strict=True):
            entries = await consumer.receive(count, timeout=0.05)
            if entries:
                await consumer.ack(*entries)
                into.extend(entries)
    return got


async def test_a_key_shared_consumer_joining_while_an_entry_is_delayed_gets_its_keys_at_once(
    wire: WireClient,
) -> None:
    # The delayed entry is unacknowledged, but no consumer holds it: it must not keep a joining
    # consumer waiting (for the mark-delete position to pass its join) until it is due and acked.
    topic = unique_topic("delayed")
    first = await consume(wire, topic, "s", type=broker_pb2.KEY_SHARED, consumer_name="first")
    await publish(wire, topic, b"late", key="late", deliver_at=int(time.time() * 1000) + LONG_DELAY_MS)

    async def held() -> bool:
        return (await subscription_stats(wire, topic, "s")).delayed_messages == 1

    await eventually(held, "the delayed entry to be held")
    second = await consume(wire, topic, "s", type=broker_pb2.KEY_SHARED, consumer_name="second")
    keys = [f"key-{i}" for i in range(20)]
    for key in keys:
        await publish(wire, topic, key.encode(), key=key)
    got = await receive_all([first, second], len(keys))
    assert sorted(value for entries in got for value in values(entries)) == sorted(k.encode() for k in keys)
    assert got[0] and got[1]  # both consumers own some of the keys


# ---- message TTL by policy ----

async def publish_old_and_young(wire: WireClient, topic: str) -> None:
    old = int(time.time() * 1000) - 2 * TTL_SECONDS * 1000
    await publish(wire, topic, b"old-1", b"old-2", publish_time=old)
    await publish(wire, topic, b"young")


async def expired(wire: WireClient, topic: str, subscription: str = "s") -> tuple[int, int]:
    """(messages expired, backlog entries) of the subscription."""
    stats = await subscription_stats(wire, topic, subscription)
    return stats.msg_expired_counter, stats.backlog_entries


async def test_a_topic_message_ttl_policy_expires_old_messages(wire: WireClient) -> None:
    topic = unique_topic("ttl")
    consumer = await consume(wire, topic, "s", permits=0)
    await publish_old_and_young(wire, topic)
    admin = await wire.admin(topic)
    # What every expiry check of the topic reads: no TTL, so nothing expires (and nothing has).
    effective = await admin.GetEffectivePolicies(admin_pb2.TopicRequest(topic=topic))
    assert effective.message_ttl_seconds == 0
    assert await expired(wire, topic) == (0, 3)
    await admin.SetTopicPolicies(admin_pb2.SetPoliciesRequest(
        topic=topic, policies=admin_pb2.Policies(message_ttl_seconds=TTL_SECONDS)))

    async def old_ones_expired() -> bool:
        return await expired(wire, topic) == (2, 1)

    await eventually(old_ones_expired, "the two old messages to expire under the topic's TTL")
    await consumer.flow(100)
    assert values(await consumer.receive(1)) == [b"young"]


async def test_a_namespace_message_ttl_policy_expires_old_messages_unless_a_topic_overrides_it(
    wire: WireClient,
) -> None:
    namespace = f"public/{unique_name('ttl')}"
    admin = await wire.admin()
    await admin.CreateNamespace(admin_pb2.CreateNamespaceRequest(namespace=namespace))
    expiring, kept = unique_topic("ttl", namespace), unique_topic("ttl", namespace)
    for topic in (expiring, kept):
        await consume(wire, topic, "s", permits=0)  # the subscription whose backlog expires
    for topic in (expiring, kept):
        await publish_old_and_young(wire, topic)
    await (await wire.admin(kept)).SetTopicPolicies(admin_pb2.SetPoliciesRequest(
        topic=kept, policies=admin_pb2.Policies(message_ttl_seconds=0)))  # the topic's own: no TTL
    # Both topics are loaded already: the namespace's change applies to them live.
    await admin.SetNamespacePolicies(admin_pb2.SetPoliciesRequest(
        namespace=namespace, policies=admin_pb2.Policies(message_ttl_seconds=TTL_SECONDS)))

    async def old_ones_expired() -> bool:
        return await expired(wire, expiring) == (2, 1)

    await eventually(old_ones_expired, "the two old messages to expire under the namespace's TTL")
    # The topic's own policy is what its expiry checks read: no TTL, nothing expired...
    kept_admin = await wire.admin(kept)
    effective = await kept_admin.GetEffectivePolicies(admin_pb2.TopicRequest(topic=kept))
    assert effective.message_ttl_seconds == 0
    assert await expired(wire, kept) == (0, 3)
    # ... and it alone held them back: cleared, the namespace's TTL expires them too.
    await kept_admin.SetTopicPolicies(admin_pb2.SetPoliciesRequest(topic=kept, clear=["message_ttl_seconds"]))

    async def kept_ones_expired() -> bool:
        return await expired(wire, kept) == (2, 1)

    await eventually(kept_ones_expired, "the old messages of the topic expiring once its own TTL is cleared")
