"""Non-persistent topics in the broker core, in-process over a real metadata store and storage node:
receipts (-1, -1), delivery only to consumers connected (with permits) at publish time, the pending
limit, nothing stored, the producer checks, and the operations refused because nothing is stored."""

from __future__ import annotations

import asyncio

import pytest
from herald.broker.core.consumer import ActiveConsumerChanged, Consumer, ConsumerEvent, Delivery
from herald.broker.core.key_shared import key_hash
from herald.broker.core.nonpersistent_topic import NonPersistentTopic, registration_key
from herald.broker.core.producer import ENTRY_FRAMING_ALLOWANCE
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription import SubscriptionType
from herald.broker.settings import BrokerSettings
from herald.common.codec.entry import EntryMetadata, encode_entry, read_metadata
from herald.common.codec.names import TopicName
from herald.common.errors import (
    ChecksumError,
    ConsumerBusyError,
    ConsumerClosedError,
    MessageTooLargeError,
    NotAllowedError,
    NotFoundError,
    PersistenceError,
    PreconditionFailedError,
    ProducerBusyError,
)

from tests.integration import test_broker_core
from tests.integration.test_broker_core import DEADLINE, Cluster, entry, receive, seqs

cluster = test_broker_core.cluster  # the fixture: a metadata store, a storage node, brokers on demand

TOPIC = "non-persistent://public/default/ticks"
EXCLUSIVE, SHARED = SubscriptionType.EXCLUSIVE, SubscriptionType.SHARED
FAILOVER, KEY_SHARED = SubscriptionType.FAILOVER, SubscriptionType.KEY_SHARED


async def publish(service: BrokerService, first: int, count: int, topic: str = TOPIC,
                  name: str = "p") -> list[tuple[int, int]]:
    producer, _ = await service.create_producer(topic, name)
    try:
        return [await producer.topic.publish(producer, seq, seq, 1, entry(name, seq))
                for seq in range(first, first + count)]
    finally:
        await service.close_producer(producer)


async def loaded(service: BrokerService, topic: str = TOPIC) -> NonPersistentTopic:
    found = await service.get_topic(topic)
    assert isinstance(found, NonPersistentTopic)
    return found


async def nothing_buffered(consumer: Consumer) -> list[Delivery]:
    """What the consumer has buffered right now (nothing waits: every publish is synchronous)."""
    got: list[Delivery] = []
    while consumer.buffered_positions():
        got += await consumer.next_deliveries()
    return got


async def next_event(consumer: Consumer) -> ConsumerEvent:
    return await asyncio.wait_for(consumer.next_event(), DEADLINE)


# ---- receipts and storage ----

async def test_receipts_are_minus_one_and_nothing_is_stored(cluster: Cluster) -> None:
    service = await cluster.broker()
    assert await publish(service, 0, 3) == [(-1, -1)] * 3
    assert await cluster.store.list("/managed-ledgers/") == {}
    assert await cluster.store.list("/ledgers/") == {}
    assert await cluster.store.list("/dedup/") == {}
    assert await cluster.store.get("/non-persistent-topics/public/default/ticks") is not None
    stats = (await loaded(service)).stats()
    assert (stats.persistent, stats.msg_in_counter, stats.entries, stats.storage_size) == (False, 3, 0, 0)
    assert stats.producers == []  # the producer closed
    assert service.topic_names() == [TOPIC]


async def test_a_producer_starts_from_nothing_and_names_are_unique(cluster: Cluster) -> None:
    service = await cluster.broker()
    first, last_sequence_id = await service.create_producer(TOPIC)
    assert last_sequence_id == -1  # nothing is deduplicated
    second, _ = await service.create_producer(TOPIC)
    assert first.name != second.name
    with pytest.raises(ProducerBusyError, match=f"producer '{first.name}' is already connected to {TOPIC}"):
        await service.create_producer(TOPIC, first.name)
    # Publishing the same sequence ids again is not a duplicate: there is no dedup.
    assert await first.topic.publish(first, 0, 0, 1, entry(first.name, 0)) == (-1, -1)
    assert await first.topic.publish(first, 0, 0, 1, entry(first.name, 0)) == (-1, -1)
    assert (await loaded(service)).msg_in_counter == 2


async def test_producers_registering_at_once_never_pass_the_limit_together(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(max_producers_per_topic=2))
    await loaded(service)
    # Unnamed producers wait for a name from the store: all four are in flight at once.
    results = await asyncio.gather(*(service.create_producer(TOPIC) for _ in range(4)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 2 and all(isinstance(r, ProducerBusyError) for r in refused), results
    assert str(refused[0]) == f"Topic reached max producers limit (2): {TOPIC} has 2 producers"
    assert len((await loaded(service)).producers) == 2


async def test_producer_checks_still_apply(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(max_message_size=1000))
    topic = await loaded(service)
    topic.encryption_required = True
    producer, _ = await service.create_producer(TOPIC, "p")
    corrupt = bytearray(entry("p", 0, encryption_keys=("k",)))
    corrupt[-1] ^= 0xFF
    with pytest.raises(ChecksumError, match="Checksum failed on the broker"):
        await topic.publish(producer, 0, 0, 1, bytes(corrupt))
    with pytest.raises(Exception, match="Messages must be encrypted"):
        await topic.publish(producer, 0, 0, 1, entry("p", 0))
    big = entry("p", 0, b"x" * (1000 + ENTRY_FRAMING_ALLOWANCE + 1), encryption_keys=("k",))
    with pytest.raises(MessageTooLargeError, match="larger than the maximum message size of 1000 bytes"):
        await topic.publish(producer, 0, 0, 1, big)
    assert await topic.publish(producer, 0, 0, 1, entry("p", 0, encryption_keys=("k",))) == (-1, -1)
    await service.close_producer(producer)
    with pytest.raises(PersistenceError, match="Producer is closed"):
        await topic.publish(producer, 1, 1, 1, entry("p", 1, encryption_keys=("k",)))
    assert topic.msg_in_counter == 1  # refused entries count nowhere


# ---- delivery ----

async def test_exclusive_consumer_gets_what_is_published_while_it_is_connected(cluster: Cluster) -> None:
    service = await cluster.broker()
    assert await publish(service, 0, 2) == [(-1, -1)] * 2  # no subscription yet: gone
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    consumer.flow(10)
    await publish(service, 2, 3)
    got = await receive(consumer, 3)
    assert seqs(got) == [2, 3, 4]
    assert [(d.ledger_id, d.entry_id, d.redelivery_count) for d in got] == [(-1, 0, 0), (-1, 1, 0), (-1, 2, 0)]
    with pytest.raises(ConsumerBusyError, match="Exclusive consumer is already connected"):
        await service.subscribe(TOPIC, "s", EXCLUSIVE)
    with pytest.raises(ConsumerBusyError, match="s is Exclusive and has consumers"):
        await service.subscribe(TOPIC, "s", SHARED)


async def test_shared_consumers_take_turns(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await service.subscribe(TOPIC, "s", SHARED, consumer_name="a")
    second = await service.subscribe(TOPIC, "s", SHARED, consumer_name="b")
    first.flow(10)
    second.flow(10)
    await publish(service, 0, 4)
    assert seqs(await receive(first, 2)) == [0, 2]
    assert seqs(await receive(second, 2)) == [1, 3]


async def test_shared_prefers_the_highest_priority_level_with_permits(cluster: Cluster) -> None:
    service = await cluster.broker()
    high = await service.subscribe(TOPIC, "s", SHARED, consumer_name="high", priority_level=0)
    low = await service.subscribe(TOPIC, "s", SHARED, consumer_name="low", priority_level=1)
    high.flow(2)
    low.flow(10)
    await publish(service, 0, 4)
    assert seqs(await receive(high, 2)) == [0, 1]
    assert seqs(await receive(low, 2)) == [2, 3]  # once the high one is out of permits


async def test_every_subscription_gets_its_copy(cluster: Cluster) -> None:
    service = await cluster.broker()
    one = await service.subscribe(TOPIC, "one", EXCLUSIVE)
    two = await service.subscribe(TOPIC, "two", SHARED)
    one.flow(10)
    two.flow(10)
    await publish(service, 0, 2)
    assert seqs(await receive(one, 2)) == seqs(await receive(two, 2)) == [0, 1]


async def test_an_entry_no_consumer_can_take_is_missed_for_good(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED)
    await publish(service, 0, 2)  # no permits yet
    consumer.flow(10)
    await publish(service, 2, 1)
    assert seqs(await receive(consumer, 1)) == [2]
    assert await nothing_buffered(consumer) == []
    stats = (await loaded(service)).stats()
    (sub,) = stats.subscriptions
    assert (sub.msg_dropped_counter, sub.msg_out_counter, sub.durable, sub.backlog_entries) == (2, 1, False, 0)
    assert stats.msg_dropped_counter == 0  # missed by a subscription, not refused by the topic


async def test_a_full_consumer_buffer_misses_entries(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(consumer_max_buffered_entries=2))
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    consumer.flow(100)
    await publish(service, 0, 4)
    assert seqs(await nothing_buffered(consumer)) == [0, 1]
    assert (await loaded(service)).subscriptions["s"].msg_dropped_counter == 2


async def test_batch_entries_take_permits_per_message(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    consumer.flow(3)
    producer, _ = await service.create_producer(TOPIC, "p")
    assert await producer.topic.publish(producer, 0, 2, 3, entry("p", 0, num_messages=3)) == (-1, -1)
    assert await producer.topic.publish(producer, 3, 3, 1, entry("p", 3)) == (-1, -1)  # no permits left
    assert seqs(await nothing_buffered(consumer)) == [0]
    assert consumer.permits == 0
    stats = (await loaded(service)).stats()
    assert (stats.msg_in_counter, stats.subscriptions[0].msg_dropped_counter) == (4, 1)


async def test_failover_delivers_to_the_active_consumer_and_hands_over(cluster: Cluster) -> None:
    service = await cluster.broker()
    b = await service.subscribe(TOPIC, "s", FAILOVER, consumer_name="b")
    assert await next_event(b) == ActiveConsumerChanged(is_active=True)
    a = await service.subscribe(TOPIC, "s", FAILOVER, consumer_name="a")  # ranks first by name
    assert await next_event(a) == ActiveConsumerChanged(is_active=True)
    assert await next_event(b) == ActiveConsumerChanged(is_active=False)
    low = await service.subscribe(TOPIC, "s", FAILOVER, consumer_name="0", priority_level=1)
    assert await next_event(low) == ActiveConsumerChanged(is_active=False)
    for consumer in (a, b, low):
        consumer.flow(10)
    await publish(service, 0, 2)
    assert seqs(await receive(a, 2)) == [0, 1]
    await a.close()
    assert await next_event(b) == ActiveConsumerChanged(is_active=True)
    await publish(service, 2, 1)
    assert seqs(await receive(b, 1)) == [2]
    assert await nothing_buffered(low) == []
    stats = (await loaded(service)).stats()
    assert {c.consumer_name: c.is_active for c in stats.subscriptions[0].consumer_stats} == {"b": True, "0": False}


async def test_failover_on_a_partition_spreads_the_active_consumer(cluster: Cluster) -> None:
    service = await cluster.broker()
    topic = "non-persistent://public/default/ticks-partition-1"
    a = await service.subscribe(topic, "s", FAILOVER, consumer_name="a")
    b = await service.subscribe(topic, "s", FAILOVER, consumer_name="b")
    assert await next_event(a) == ActiveConsumerChanged(is_active=True)  # alone: index 1 mod 1
    assert await next_event(b) == ActiveConsumerChanged(is_active=True)  # index 1 mod 2 is "b"
    assert await next_event(a) == ActiveConsumerChanged(is_active=False)


async def test_key_shared_sends_one_key_to_one_consumer(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await service.subscribe(TOPIC, "s", KEY_SHARED, consumer_name="a")
    second = await service.subscribe(TOPIC, "s", KEY_SHARED, consumer_name="b")
    first.flow(100)
    second.flow(100)
    keys = [f"key-{i}" for i in range(20)]
    producer, _ = await service.create_producer(TOPIC, "p")
    for round_ in range(3):
        for i, key in enumerate(keys):
            seq = round_ * len(keys) + i
            metadata = EntryMetadata(producer_name="p", sequence_id=seq, highest_sequence_id=seq, num_messages=1,
                                     partition_key=key)
            await producer.topic.publish(producer, seq, seq, 1, encode_entry(metadata, key.encode()))
    owner: dict[str, str] = {}
    for consumer in (first, second):
        for delivery in await nothing_buffered(consumer):
            key = read_metadata(delivery.data).partition_key
            assert owner.setdefault(key, consumer.name) == consumer.name
    assert len(owner) == len(keys) and set(owner.values()) == {"a", "b"}
    # Auto-split: the second consumer took the lower half of the first one's (whole) range.
    assert all((owner[key] == "b") == (key_hash(key.encode()) < 32768) for key in keys)
    (sub_stats,) = (await loaded(service)).stats().subscriptions
    assert {c.consumer_name: c.key_hash_ranges for c in sub_stats.consumer_stats} == {
        "a": [(32768, 65535)], "b": [(0, 32767)]}
    await second.close()
    await producer.topic.publish(producer, 100, 100, 1, encode_entry(EntryMetadata(
        producer_name="p", sequence_id=100, highest_sequence_id=100, num_messages=1, partition_key="k"), b"k" * 5))
    assert seqs(await nothing_buffered(first)) == [100]  # the whole range is the first one's again


# ---- the pending limit ----

async def test_over_the_pending_limit_entries_are_dropped_and_counted(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(non_persistent_max_pending=3))
    stalled = await service.subscribe(TOPIC, "stalled", EXCLUSIVE)  # its stream takes nothing
    also = await service.subscribe(TOPIC, "also", SHARED)
    stalled.flow(100)
    also.flow(100)
    assert await publish(service, 0, 5) == [(-1, -1)] * 5
    topic = await loaded(service)
    assert len(topic.pending) == 3  # one per entry, however many subscriptions it went to
    assert seqs(await nothing_buffered(also)) == [0, 1, 2]
    assert len(topic.pending) == 3  # still on their way to the stalled consumer
    stats = topic.stats()
    assert (stats.msg_in_counter, stats.msg_dropped_counter) == (3, 2)
    assert [s.msg_dropped_counter for s in stats.subscriptions] == [0, 0]
    # Once the stalled stream takes its entries, publishing goes through again.
    assert seqs(await nothing_buffered(stalled)) == [0, 1, 2]
    assert len(topic.pending) == 0
    await publish(service, 5, 1)
    assert seqs(await receive(also, 1)) == seqs(await receive(stalled, 1)) == [5]


async def test_a_leaving_consumer_frees_its_pending_entries(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(non_persistent_max_pending=2))
    stalled = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    stalled.flow(100)
    await publish(service, 0, 2)
    topic = await loaded(service)
    assert len(topic.pending) == 2
    await stalled.close()
    assert len(topic.pending) == 0
    assert topic.subscriptions == {}  # gone with its last consumer
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    consumer.flow(10)
    await publish(service, 2, 1)
    assert seqs(await receive(consumer, 1)) == [2]
    assert topic.msg_dropped_counter == 0


# ---- what a consumer sends ----

async def test_acks_and_redelivery_requests_are_accepted_and_ignored(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED)
    consumer.flow(10)
    await publish(service, 0, 3)
    got = await receive(consumer, 3)
    assert consumer.pending == {}  # nothing is tracked for acknowledgement
    consumer.ack([(got[0].ledger_id, got[0].entry_id)])
    consumer.ack([(got[2].ledger_id, got[2].entry_id)], cumulative=True)
    consumer.redeliver(None)
    consumer.redeliver([(got[1].ledger_id, got[1].entry_id)])
    assert await nothing_buffered(consumer) == []
    assert consumer.permits == 7


async def test_a_subscription_lives_only_while_it_has_consumers(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await service.subscribe(TOPIC, "s", SHARED)
    second = await service.subscribe(TOPIC, "s", SHARED)
    topic = await loaded(service)
    await first.close()
    assert list(topic.subscriptions) == ["s"]
    await second.close()
    assert topic.subscriptions == {}
    # A new subscriber under the same name may pick another type: nothing of the old one is left.
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    assert topic.subscriptions["s"].type is EXCLUSIVE
    await consumer.close()
    # A refused subscribe leaves no subscription behind.
    with pytest.raises(Exception, match="subscription name"):
        await service.subscribe(TOPIC, "bad name", EXCLUSIVE)
    assert topic.subscriptions == {}


async def test_unsubscribe_needs_force_or_the_only_consumer_asking(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await service.subscribe(TOPIC, "s", SHARED)
    second = await service.subscribe(TOPIC, "s", SHARED)
    topic = await loaded(service)
    with pytest.raises(NotFoundError, match="subscription 'other' does not exist on " + TOPIC):
        await service.unsubscribe(TOPIC, "other")
    with pytest.raises(PreconditionFailedError, match="has 2 other consumer"):
        await service.unsubscribe(TOPIC, "s")
    with pytest.raises(PreconditionFailedError, match="has 1 other consumer"):
        await service.unsubscribe(TOPIC, "s", requester=first)
    await second.close()
    await service.unsubscribe(TOPIC, "s", requester=first)  # the only one left asks
    assert topic.subscriptions == {} and await service.list_subscriptions(TOPIC) == []
    assert first.closed and first.close_reason == "the subscription was deleted"
    third = await service.subscribe(TOPIC, "s", SHARED)
    await service.unsubscribe(TOPIC, "s", force=True)
    with pytest.raises(ConsumerClosedError, match="the subscription was deleted"):
        await third.next_deliveries()


# ---- the service ----

async def test_operations_on_stored_data_are_refused(cluster: Cluster) -> None:
    service = await cluster.broker()
    with pytest.raises(NotAllowedError, match=r"^seek is not supported on non-persistent topics \(" + TOPIC):
        await service._persistent(TOPIC, "seek")
    assert service.topic_names() == []  # refused before loading anything
    persistent = await service._persistent("persistent://public/default/orders", "seek")
    assert persistent.name == "persistent://public/default/orders"


async def test_delete_is_refused_while_clients_are_connected_unless_forced(cluster: Cluster) -> None:
    service = await cluster.broker()
    with pytest.raises(NotFoundError, match=f"Topic {TOPIC} does not exist"):
        await service._delete_non_persistent(TopicName.parse(TOPIC), force=False)
    producer, _ = await service.create_producer(TOPIC, "p")
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    with pytest.raises(PreconditionFailedError,
                       match=r"Topic has active producers/consumers: .* 1 producer.* and 1 consumer"):
        await service._delete_non_persistent(TopicName.parse(TOPIC), force=False)
    await service._delete_non_persistent(TopicName.parse(TOPIC), force=True)
    with pytest.raises(ConsumerClosedError, match="the topic was deleted"):
        await consumer.next_deliveries()
    await asyncio.wait_for(producer.wait_closed(), DEADLINE)
    assert service.topic_names() == []
    assert await cluster.store.get(registration_key(TopicName.parse(TOPIC))) is None
    # Deleted with no one connected: no force needed.
    await publish(service, 0, 1)
    await service._delete_non_persistent(TopicName.parse(TOPIC), force=False)
    assert await cluster.store.get(registration_key(TopicName.parse(TOPIC))) is None


async def test_unload_disconnects_clients_and_the_topic_comes_back_empty(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED)
    producer, _ = await service.create_producer(TOPIC, "p")
    await service.unload_topic(TOPIC)
    with pytest.raises(ConsumerClosedError, match="the topic was unloaded"):
        await consumer.next_deliveries()
    await asyncio.wait_for(producer.wait_closed(), DEADLINE)
    assert service.topic_names() == []
    assert await cluster.store.get(registration_key(TopicName.parse(TOPIC))) is not None  # still exists
    topic = await loaded(service)
    assert (topic.subscriptions, topic.producers, topic.msg_in_counter) == ({}, {}, 0)


async def test_the_load_report_counts_both_kinds(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED)
    consumer.flow(10)
    await service.create_producer("persistent://public/default/orders", "q")
    await publish(service, 0, 2)
    load = service.load()
    assert (load.topics, load.producers, load.consumers) == (2, 1, 1)
    await service.close_all()
    assert consumer.closed and consumer.close_reason == "the topic was unloaded"
