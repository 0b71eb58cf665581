"""Retention on the broker core over a real embedded metadata store, storage node and storage client:
consumed ledgers past retention are deleted from the managed ledger's list and from storage; what a
subscription still needs, what retention keeps and the open ledger stay; and a broker that takes
over after trimming recovers dedup and cursors without the deleted ledgers."""

from __future__ import annotations

import json
import time

import pytest
from herald.broker.core.ledger_list import LedgerInfo
from herald.broker.core.retention import RetentionPolicy, trimmable
from herald.broker.core.service import BrokerService
from herald.broker.core.topic import PersistentTopic
from herald.broker.settings import BrokerSettings
from herald.common.errors import LedgerNotFoundError
from herald.storage.client.ledger_metadata import ledger_key

from tests.integration import test_broker_core
from tests.integration.test_broker_core import (
    EARLIEST,
    EXCLUSIVE,
    TOPIC,
    Cluster,
    entry,
    eventually,
    publish_all,
    receive,
    seqs,
)

cluster = test_broker_core.cluster  # the fixture: a metadata store, a storage node, brokers on demand

ML_KEY = "/managed-ledgers/public/default/persistent/orders"
DEDUP_KEY = "/dedup/public/default/persistent/orders"


def settings(**overrides: object) -> BrokerSettings:
    """Ledgers of 10 entries; no retention (consumed ledgers go); trimming only when a test asks
    (or after a rollover)."""
    base = BrokerSettings(max_entries_per_ledger=10, min_ledger_rollover_seconds=0,
                          retention_check_interval=3600, cursor_flush_interval=3600,
                          retention_time_seconds=0, retention_size_bytes=0)
    for name, value in overrides.items():
        setattr(base, name, value)
    return base


async def listed_ledgers(cluster: Cluster) -> list[int]:
    stored = await cluster.store.get(ML_KEY)
    assert stored is not None
    return [item["ledger_id"] for item in json.loads(stored.value)["ledgers"]]


async def assert_deleted_everywhere(cluster: Cluster, ledger_ids: list[int]) -> None:
    async def gone() -> bool:
        return all([await cluster.store.get(ledger_key(i)) is None for i in ledger_ids])

    await eventually(gone, f"ledgers {ledger_ids} to be deleted from storage")
    for ledger_id in ledger_ids:
        assert ledger_id not in await listed_ledgers(cluster)
        with pytest.raises(LedgerNotFoundError):
            await cluster.clients[0].open_ledger(ledger_id, recover=False)
        with pytest.raises(LedgerNotFoundError):
            async for _ in cluster.storage_server.store.read_entries(ledger_id, 0, 0):
                pass


async def consume_and_ack(service: BrokerService, subscription: str, count: int, ack: int) -> None:
    """Receive count entries on a subscription and acknowledge the first `ack` of them."""
    consumer = await service.subscribe(TOPIC, subscription, EXCLUSIVE, EARLIEST)
    consumer.flow(1000)
    got = await receive(consumer, count)
    if ack:
        consumer.ack([(got[ack - 1].ledger_id, got[ack - 1].entry_id)], cumulative=True)
    await consumer.close()


async def published_topic(service: BrokerService, count: int = 35, subscriptions: tuple[str, ...] = ("s",),
                          ) -> tuple[PersistentTopic, list[int]]:
    """A topic with subscriptions from the start and count entries in ledgers of 10."""
    for name in subscriptions:
        await (await service.subscribe(TOPIC, name, EXCLUSIVE, EARLIEST)).close()
    receipts = await publish_all(service, "p", 0, count)
    topic = await service.get_topic(TOPIC)
    ledger_ids = sorted({ledger for ledger, _ in receipts})
    return topic, ledger_ids


# ---- what is deleted, what is kept ----

async def test_consumed_ledgers_past_retention_are_deleted_from_metadata_and_storage(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    topic, ledgers = await published_topic(service)
    assert [info.entries for info in topic.ledger.ledgers] == [10, 10, 10, 5]
    await consume_and_ack(service, "s", 35, ack=25)  # all of the first two ledgers, half the third
    assert await topic.retention.trim() == ledgers[:2]
    assert [info.ledger_id for info in topic.ledger.ledgers] == ledgers[2:]
    assert await listed_ledgers(cluster) == ledgers[2:]
    await assert_deleted_everywhere(cluster, ledgers[:2])
    # The partly consumed ledger and the open one stay, and what is unacked is still delivered.
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(100)
    assert seqs(await receive(consumer, 10)) == list(range(25, 35))
    assert (await service.topic_stats(TOPIC)).subscriptions[0].backlog_entries == 10
    assert await topic.retention.trim() == []


async def test_a_subscription_that_has_not_acked_keeps_everything(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    topic, ledgers = await published_topic(service, subscriptions=("fast", "slow"))
    await consume_and_ack(service, "fast", 35, ack=35)
    assert await topic.retention.trim() == []
    assert [info.ledger_id for info in topic.ledger.ledgers] == ledgers
    await consume_and_ack(service, "slow", 35, ack=12)  # now the first ledger is consumed by both
    assert await topic.retention.trim() == ledgers[:1]


async def test_retention_time_keeps_consumed_ledgers_until_they_are_old_enough(cluster: Cluster) -> None:
    service = await cluster.broker(settings(retention_time_seconds=3600, retention_size_bytes=-1))
    topic, ledgers = await published_topic(service)
    await consume_and_ack(service, "s", 35, ack=35)
    assert await topic.retention.trim() == []
    topic.retention.clock = lambda: time.time() + 3601
    assert await topic.retention.trim() == ledgers[:3]  # all but the open one
    await assert_deleted_everywhere(cluster, ledgers[:3])


async def test_retention_size_keeps_the_newest_ledgers(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    topic, ledgers = await published_topic(service)
    await consume_and_ack(service, "s", 35, ack=35)
    sizes = [info.size for info in topic.ledger.ledgers]
    # The newest three ledgers make the budget: the first is beyond it, the second within it.
    topic.retention.policy = RetentionPolicy(time_seconds=-1, size_bytes=sum(sizes[1:]))
    assert await topic.retention.trim() == ledgers[:1]
    topic.retention.policy = RetentionPolicy(time_seconds=-1, size_bytes=-1)
    assert await topic.retention.trim() == []


async def test_the_open_ledger_is_never_deleted(cluster: Cluster) -> None:
    service = await cluster.broker(settings(max_entries_per_ledger=1000))
    topic, ledgers = await published_topic(service, count=5)
    await consume_and_ack(service, "s", 5, ack=5)
    assert len(ledgers) == 1 and ledgers[0] == topic.ledger.current_ledger_id
    assert await topic.retention.trim() == []
    assert [info.ledger_id for info in topic.ledger.ledgers] == ledgers
    # Reloaded, the topic writes to a new ledger: the old one, consumed, goes.
    await service.unload_topic(TOPIC)
    topic = await service.get_topic(TOPIC)
    assert await topic.retention.trim() == ledgers
    assert len(topic.ledger.ledgers) == 1


async def test_without_subscriptions_only_retention_keeps_data(cluster: Cluster) -> None:
    keeper = await cluster.broker(settings(retention_time_seconds=-1, retention_size_bytes=-1))
    topic, ledgers = await published_topic(keeper, subscriptions=())
    assert await topic.retention.trim() == []
    await keeper.close_all()
    service = await cluster.broker(settings())
    topic = await service.get_topic(TOPIC)
    assert await topic.retention.trim() == ledgers  # the reload opened a new one
    consumer = await service.subscribe(TOPIC, "late", EXCLUSIVE, EARLIEST)
    consumer.flow(10)
    await publish_all(service, "p", 100, 1)
    assert seqs(await receive(consumer, 1)) == [100]  # Earliest is the first entry still kept


def test_trimmable_takes_a_consumed_head_not_kept_by_the_policy() -> None:
    ledgers = [LedgerInfo(i, entries=10, size=100, created_at=0.0, closed_at=1000.0 + i) for i in (1, 2, 3, 4)]
    keep_nothing = RetentionPolicy(0, 0)
    assert [i.ledger_id for i in trimmable(ledgers, 4, keep_nothing, now=2000)] == [1, 2, 3]
    assert [i.ledger_id for i in trimmable(ledgers, 3, keep_nothing, now=2000)] == [1, 2]
    assert trimmable(ledgers, 9, RetentionPolicy(-1, -1), now=2000) == []
    # As in Pulsar, a limit of 0 keeps nothing whatever the other limit says.
    assert [i.ledger_id for i in trimmable(ledgers, 9, RetentionPolicy(-1, 0), now=2000)] == [1, 2, 3]
    assert [i.ledger_id for i in trimmable(ledgers, 9, RetentionPolicy(0, -1), now=2000)] == [1, 2, 3]
    # Closed less than 998.5 s ago: ledger 2 (closed at 1002) and after are kept.
    assert [i.ledger_id for i in trimmable(ledgers, 9, RetentionPolicy(998.5, -1), now=2000)] == [1]
    # The newest 200 bytes are kept: ledger 2 has exactly 200 after it, so it goes.
    assert [i.ledger_id for i in trimmable(ledgers, 9, RetentionPolicy(-1, 200), now=2000)] == [1, 2]
    assert [i.ledger_id for i in trimmable(ledgers, 9, RetentionPolicy(-1, 201), now=2000)] == [1]
    # A ledger is kept only while within BOTH limits.
    assert [i.ledger_id for i in trimmable(ledgers, 9, RetentionPolicy(10_000, 150), now=2000)] == [1, 2]
    assert [i.ledger_id for i in trimmable(ledgers, 9, RetentionPolicy(998.5, 250), now=2000)] == [1]


# ---- when it runs ----

async def test_trimming_runs_after_a_rollover(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    topic, ledgers = await published_topic(service, count=25, subscriptions=())
    # No subscription: every ledger but the open one went as the rollovers closed them.
    await eventually(lambda: _true(len(topic.ledger.ledgers) == 1), "trimming after the rollovers")
    await assert_deleted_everywhere(cluster, ledgers[:2])


async def test_trimming_runs_periodically(cluster: Cluster) -> None:
    service = await cluster.broker(settings(retention_check_interval=0.05, retention_time_seconds=-1,
                                                retention_size_bytes=-1))
    topic, ledgers = await published_topic(service)
    topic.retention.policy = RetentionPolicy(0, 0)
    await consume_and_ack(service, "s", 35, ack=20)
    await eventually(lambda: _true(len(topic.ledger.ledgers) == 2), "the periodic trim")
    assert [info.ledger_id for info in topic.ledger.ledgers] == ledgers[2:]


async def _true(value: bool) -> bool:
    return value


# ---- recovery after trimming ----

async def test_a_broker_taking_over_after_trimming_recovers_dedup_and_cursors(cluster: Cluster) -> None:
    # Dedup snapshots only every 1000 entries, and cursors are never flushed on their own: the
    # trim itself must take the snapshot, and the cursor's stored position is in a deleted ledger.
    old = await cluster.broker(settings(dedup_snapshot_interval=1000))
    topic, ledgers = await published_topic(old, count=25)
    assert await cluster.store.get(DEDUP_KEY) is None  # no snapshot yet
    await consume_and_ack(old, "s", 25, ack=20)
    assert await topic.retention.trim() == ledgers[:2]
    snapshot = await cluster.store.get(DEDUP_KEY)
    assert snapshot is not None and tuple(json.loads(snapshot.value)["position"]) >= (ledgers[1], 9)
    stored_cursor = await cluster.store.get("/cursors/public/default/persistent/orders/s")
    assert stored_cursor is not None and json.loads(stored_cursor.value)["mark_delete"][0] == ledgers[0]
    # The old broker dies without closing anything; another takes the topic over.
    new = await cluster.broker(settings(dedup_snapshot_interval=1000))
    producer, last_sequence_id = await new.create_producer(TOPIC, "p")
    assert last_sequence_id == 24
    assert await producer.topic.publish(producer, 7, 7, 1, entry("p", 7)) == (-1, -1)  # a deleted entry's
    assert await producer.topic.publish(producer, 22, 22, 1, entry("p", 22)) == (-1, -1)
    assert (await producer.topic.publish(producer, 25, 25, 1, entry("p", 25)))[0] >= 0
    consumer = await new.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(100)
    # The stored mark-delete position was never flushed past the start: it lies in a deleted
    # ledger, which means "before the first kept entry".
    assert seqs(await receive(consumer, 6)) == [20, 21, 22, 23, 24, 25]
    assert (await new.topic_stats(TOPIC)).entries == 6


async def test_a_clean_restart_after_trimming_resumes_where_acks_left_off(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    topic, ledgers = await published_topic(service, count=25)
    await consume_and_ack(service, "s", 25, ack=22)
    assert await topic.retention.trim() == ledgers[:2]
    await service.close_all()
    restarted = await cluster.broker(settings())
    _, last_sequence_id = await restarted.create_producer(TOPIC, "p")
    assert last_sequence_id == 24
    consumer = await restarted.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(100)
    assert seqs(await receive(consumer, 3)) == [22, 23, 24]

