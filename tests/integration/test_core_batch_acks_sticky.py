"""The broker core, in one process (as test_broker_core): batch-index acknowledgements and STICKY
Key_Shared consumers, with no front end."""

from __future__ import annotations

import pytest
from herald.broker.core.hash_ranges import KeySharedMeta, KeySharedMode, key_hash
from herald.broker.core.subscription import SubscriptionType
from herald.common.codec.entry import EntryMetadata, encode_entry, read_metadata
from herald.common.errors import ConsumerBusyError

from tests.integration.test_broker_core import EARLIEST, EXCLUSIVE, TOPIC, Cluster, entry, receive
from tests.integration.test_broker_core import cluster as cluster  # the fixture

KEY_SHARED = SubscriptionType.KEY_SHARED


async def test_a_partly_acked_batch_comes_again_with_the_messages_still_to_deliver(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    producer, _ = await service.create_producer(TOPIC, "p")
    await producer.topic.publish(producer, 0, 5, 6, entry("p", 0, num_messages=6))
    consumer.flow(100)
    (first,) = await receive(consumer, 1)
    assert first.ack_set is None
    position = (first.ledger_id, first.entry_id)
    consumer.ack([position], ack_sets={position: 0b100101})  # 1, 3 and 4 acknowledged
    await consumer.close()
    again = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    again.flow(100)
    (redelivered,) = await receive(again, 1)
    assert (redelivered.ledger_id, redelivered.entry_id) == position and redelivered.ack_set == 0b100101
    again.ack([position], ack_sets={position: 0b000100})  # 0 and 5 too: only 2 left
    again.redeliver()
    (third,) = await receive(again, 1)
    assert third.ack_set == 0b000100
    again.ack([position], ack_sets={position: 0})  # an empty set: the batch whole
    stats = await service.topic_stats(TOPIC)
    assert stats.subscriptions[0].backlog_entries == 0


async def test_a_cumulative_ack_inside_a_batch_acks_what_is_before_it(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    producer, _ = await service.create_producer(TOPIC, "p")
    for seq in (0, 4):
        await producer.topic.publish(producer, seq, seq + 3, 4, entry("p", seq, num_messages=4))
    consumer.flow(100)
    _, second = await receive(consumer, 2)
    position = (second.ledger_id, second.entry_id)
    consumer.ack([position], cumulative=True, ack_sets={position: 0b1100})  # up to index 1 of the second
    await consumer.close()
    again = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    again.flow(100)
    (redelivered,) = await receive(again, 1)
    assert (redelivered.ledger_id, redelivered.entry_id) == position and redelivered.ack_set == 0b1100


def keyed(sequence_id: int, key: str) -> bytes:
    metadata = EntryMetadata(producer_name="p", sequence_id=sequence_id, highest_sequence_id=sequence_id,
                             num_messages=1, partition_key=key)
    return encode_entry(metadata, b"value")


async def test_sticky_consumers_get_the_keys_of_their_ranges_and_conflicts_are_refused(cluster: Cluster) -> None:
    service = await cluster.broker()
    low = await service.subscribe(TOPIC, "s", KEY_SHARED, EARLIEST,
                                  key_shared=KeySharedMeta(KeySharedMode.STICKY, ((0, 32767),)))
    with pytest.raises(ConsumerBusyError, match=r"^Range conflict: \[32000, 40000\] overlaps \[0, 32767\]"):
        await service.subscribe(TOPIC, "s", KEY_SHARED,
                                key_shared=KeySharedMeta(KeySharedMode.STICKY, ((32000, 40000),)))
    with pytest.raises(ConsumerBusyError, match="has consumers in STICKY mode"):
        await service.subscribe(TOPIC, "s", KEY_SHARED)  # AUTO_SPLIT
    high = await service.subscribe(TOPIC, "s", KEY_SHARED,
                                   key_shared=KeySharedMeta(KeySharedMode.STICKY, ((32768, 65535),)))
    keys = [f"key-{i}" for i in range(30)]
    producer, _ = await service.create_producer(TOPIC, "p")
    for seq, key in enumerate(keys):
        await producer.topic.publish(producer, seq, seq, 1, keyed(seq, key))
    low.flow(100)
    high.flow(100)
    mine_low = [k for k in keys if key_hash(k.encode()) < 32768]
    got_low = await receive(low, len(mine_low))
    got_high = await receive(high, len(keys) - len(mine_low))
    assert [read_metadata(d.data).partition_key for d in got_low] == mine_low
    assert [read_metadata(d.data).partition_key for d in got_high] == [k for k in keys if k not in mine_low]


async def test_allow_out_of_order_delivery_lets_a_joining_consumer_take_its_keys_at_once(cluster: Cluster) -> None:
    # Without it, a consumer joining while entries are outstanding gets none newer than its join
    # until those are acknowledged (per-key order); with it (Pulsar's allowOutOfOrderDelivery) it
    # gets its keys' new entries straight away.
    service = await cluster.broker()
    relaxed = KeySharedMeta(allow_out_of_order_delivery=True)
    first = await service.subscribe(TOPIC, "s", KEY_SHARED, EARLIEST, key_shared=relaxed)
    producer, _ = await service.create_producer(TOPIC, "p")
    keys = [f"key-{i}" for i in range(30)]
    for seq, key in enumerate(keys):
        await producer.topic.publish(producer, seq, seq, 1, keyed(seq, key))
    first.flow(1000)
    await receive(first, len(keys))  # outstanding: not acknowledged
    with pytest.raises(ConsumerBusyError, match="key order kept"):
        await service.subscribe(TOPIC, "s", KEY_SHARED)  # the subscription allows out of order
    second = await service.subscribe(TOPIC, "s", KEY_SHARED, key_shared=relaxed)
    second.flow(1000)
    (start, end), = first.subscription.hash_ranges_of(second)
    theirs = [k for k in keys if start <= key_hash(k.encode()) <= end]
    for seq, key in enumerate(keys, start=len(keys)):
        await producer.topic.publish(producer, seq, seq, 1, keyed(seq, key))
    got = await receive(second, len(theirs))
    assert [read_metadata(d.data).partition_key for d in got] == theirs
