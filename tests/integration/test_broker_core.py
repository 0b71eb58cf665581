"""The broker core (topics, managed ledgers, cursors, dedup, dispatch) in one process, over a real
embedded metadata store, a real storage node and the real storage client: no gRPC front end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from herald.broker.core.consumer import Consumer, Delivery
from herald.broker.core.cursor import InitialPosition
from herald.broker.core.managed_ledger import ManagedLedger, Position, State
from herald.broker.core.producer import ENTRY_FRAMING_ALLOWANCE
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription import SubscriptionType
from herald.broker.core.topic import PersistentTopic
from herald.broker.settings import BrokerSettings
from herald.common.codec.entry import EntryMetadata, encode_entry, read_metadata
from herald.common.errors import (
    ChecksumError,
    ConsumerBusyError,
    ConsumerClosedError,
    DuplicateUnknownError,
    FencedError,
    InvalidTopicNameError,
    MessageTooLargeError,
    MetadataError,
    NotAllowedError,
    NotOwnerError,
    PersistenceError,
    ProducerBusyError,
    TopicTerminatedError,
)
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.storage.client.storage_client import StorageClient
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings

from tests.helpers import eventually

DEADLINE = 60.0  # bounds waits; never asserted as a duration
TOPIC = "persistent://public/default/orders"
EXCLUSIVE, SHARED = SubscriptionType.EXCLUSIVE, SubscriptionType.SHARED
EARLIEST = InitialPosition.EARLIEST


class AllowAll:
    """Ownership that lets this broker serve every topic (lookup is not part of these tests)."""

    async def acquire(self, topic: str) -> None:
        return None

    async def release(self, topic: str) -> bool:
        return False


class OwnsNothing:
    async def acquire(self, topic: str) -> None:
        raise NotOwnerError(f"topic {topic} is owned by another broker")

    async def release(self, topic: str) -> bool:
        raise NotOwnerError(f"topic {topic} is owned by another broker")


@dataclass
class Cluster:
    store: EmbeddedMetadataStore
    storage_server: StorageServer
    clients: list[StorageClient]
    services: list[BrokerService]

    async def broker(self, settings: BrokerSettings | None = None, ownership: object = None) -> BrokerService:
        """A broker: a fresh storage client and service over the shared store and storage node
        (one node, so its ledgers are 1/1/1 whatever the cluster default)."""
        client = StorageClient(self.store, [self.storage_server.address])
        await client.start()
        self.clients.append(client)
        settings = settings or BrokerSettings()
        settings.ensemble_size = settings.write_quorum = settings.ack_quorum = 1
        service = BrokerService(settings, self.store, client,
                                ownership or AllowAll())  # type: ignore[arg-type]
        self.services.append(service)
        return service


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    server = StorageServer(StorageSettings(data_dir=str(tmp_path / "storage"), port=0, metrics_port=-1))
    await server.start()
    cluster = Cluster(store, server, [], [])
    try:
        yield cluster
    finally:
        for service in cluster.services:
            await service.close_all()
        for client in cluster.clients:
            await client.close()
        await cluster.storage_server.stop()  # a test may have replaced the first one
        await server.stop()
        await store.close()


def entry(producer: str, sequence_id: int, payload: bytes = b"hello", num_messages: int = 1,
          encryption_keys: tuple[str, ...] = ()) -> bytes:
    meta = EntryMetadata(producer_name=producer, sequence_id=sequence_id,
                         highest_sequence_id=sequence_id + num_messages - 1, num_messages=num_messages,
                         encryption_keys=list(encryption_keys))
    return encode_entry(meta, payload.ljust(5 * num_messages, b"."))  # room for that many (5-byte) records


async def publish_all(service: BrokerService, producer_name: str, first: int, count: int,
                      topic: str = TOPIC) -> list[tuple[int, int]]:
    """Publish count entries pipelined (all queued before any is awaited), as the adapter does."""
    producer, _ = await service.create_producer(topic, producer_name)
    futures = [producer.topic.publish(producer, seq, seq, 1, entry(producer_name, seq))
               for seq in range(first, first + count)]
    receipts = list(await asyncio.gather(*futures))
    await service.close_producer(producer)
    return receipts


async def receive(consumer: Consumer, count: int) -> list[Delivery]:
    got: list[Delivery] = []
    while len(got) < count:
        got += await asyncio.wait_for(consumer.next_deliveries(), DEADLINE)
    return got


def seqs(deliveries: list[Delivery]) -> list[int]:
    return [read_metadata(d.data).sequence_id for d in deliveries]


# ---- publish and consume ----

@pytest.mark.parametrize("cache_bytes", [64 * 1024 * 1024, 0], ids=["cached", "storage-reads"])
async def test_ten_thousand_entries_are_stored_and_delivered_in_order(cluster: Cluster, cache_bytes: int) -> None:
    settings = BrokerSettings(entry_cache_max_bytes=cache_bytes, max_entries_per_ledger=3000,
                              min_ledger_rollover_seconds=0)
    service = await cluster.broker(settings)
    consumer = await service.subscribe(TOPIC, "all", EXCLUSIVE, EARLIEST)
    consumer.flow(1_000_000)
    receipts = await publish_all(service, "p", 0, 10_000)
    assert receipts == sorted(receipts) and len(set(receipts)) == 10_000
    assert len({ledger for ledger, _ in receipts}) == 4  # rolled over every 3000 entries
    got = await receive(consumer, 10_000)
    assert seqs(got) == list(range(10_000))
    assert [(d.ledger_id, d.entry_id) for d in got] == receipts
    consumer.ack([(d.ledger_id, d.entry_id) for d in got])
    stats = await service.topic_stats(TOPIC)
    assert stats.entries == 10_000 and stats.msg_in_counter == 10_000
    assert stats.subscriptions[0].backlog_entries == 0
    assert stats.subscriptions[0].msg_out_counter == 10_000


async def test_tailing_consumer_gets_entries_as_they_are_added(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "tail", EXCLUSIVE)  # Latest: only what comes next
    await publish_all(service, "early", 0, 3)
    consumer2 = await service.subscribe(TOPIC, "tail2", EXCLUSIVE)
    consumer.flow(100)
    consumer2.flow(100)
    assert seqs(await receive(consumer, 3)) == [0, 1, 2]  # subscribed before them
    for seq in range(5):
        await publish_all(service, "p", seq, 1)
        (delivery,) = await receive(consumer, 1)
        assert seqs([delivery]) == [seq]
    assert seqs(await receive(consumer2, 5)) == list(range(5))


async def test_permits_count_messages_and_a_batch_may_overshoot(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    producer, _ = await service.create_producer(TOPIC, "p")
    for seq in (0, 10, 20):  # three entries of 10 messages each
        await producer.topic.publish(producer, seq, seq + 9, 10, entry("p", seq, num_messages=10))
    consumer.flow(5)
    (first,) = await receive(consumer, 1)  # a 10-message entry for 5 permits: sent, permits < 0
    assert consumer.permits == -5
    consumer.flow(6)  # back to 1: one more entry
    (second,) = await receive(consumer, 1)
    assert seqs([first, second]) == [0, 10] and consumer.permits == -9
    consumer.flow(19)
    assert seqs(await receive(consumer, 1)) == [20]


async def test_a_stored_entry_claiming_more_messages_than_it_holds_takes_only_the_permits_it_can_hold(
    cluster: Cluster,
) -> None:
    # Stored before brokers checked num_messages (publish refuses it now): it claims 2^31 - 1
    # messages in a payload of one. Counted as claimed, it drove the consumer's permits to about
    # -2^31 for good and nothing was dispatched after it.
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(10)
    producer, _ = await service.create_producer(TOPIC, "p")
    topic = producer.topic
    assert isinstance(topic, PersistentTopic)
    await topic.ledger.add_entry(encode_entry(EntryMetadata(
        producer_name="p", sequence_id=0, highest_sequence_id=0, num_messages=2**31 - 1), b"hello"))
    topic.subscriptions["s"].notify()  # as a publish does
    (lying,) = await receive(consumer, 1)
    assert consumer.permits == 9
    assert consumer.pending[Position(lying.ledger_id, lying.entry_id)] == 1
    await topic.publish(producer, 1, 1, 1, entry("p", 1))
    assert seqs([lying, *await receive(consumer, 1)]) == [0, 1]
    assert consumer.permits == 8


# ---- deduplication ----

async def test_duplicate_sequence_ids_are_acked_without_storing(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await publish_all(service, "p", 0, 10)
    again = await publish_all(service, "p", 0, 10)
    assert all(receipt != (-1, -1) for receipt in first)
    assert again == [(-1, -1)] * 10
    assert (await service.topic_stats(TOPIC)).entries == 10
    _, last_sequence_id = await service.create_producer(TOPIC, "p")
    assert last_sequence_id == 9


async def test_a_producer_name_unused_past_the_inactivity_is_forgotten_by_dedup(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(dedup_producer_inactivity_seconds=0.2, cursor_flush_interval=0.05))
    await publish_all(service, "used-once", 0, 3)  # closes its producer
    staying, _ = await service.create_producer(TOPIC, "staying")
    await staying.topic.publish(staying, 0, 0, 1, entry("staying", 0))
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)

    async def forgotten() -> bool:
        return "used-once" not in topic.dedup.producers

    await eventually(forgotten, "the idle producer name forgotten", timeout=DEADLINE)
    assert "staying" in topic.dedup.producers  # still connected: kept
    _, last_sequence_id = await service.create_producer(TOPIC, "used-once")
    assert last_sequence_id == -1


async def test_resend_while_the_first_copy_is_in_flight_is_unknown(cluster: Cluster) -> None:
    service = await cluster.broker()
    producer, _ = await service.create_producer(TOPIC, "p")
    first = producer.topic.publish(producer, 0, 0, 1, entry("p", 0))
    second = producer.topic.publish(producer, 0, 0, 1, entry("p", 0))  # before the first completes
    with pytest.raises(DuplicateUnknownError):
        await second
    assert (await first)[0] >= 0
    assert await producer.topic.publish(producer, 0, 0, 1, entry("p", 0)) == (-1, -1)


# ---- managed ledger ----

async def test_full_ledgers_roll_over_and_reads_cross_them(cluster: Cluster) -> None:
    # Kept by retention: there is no subscription yet.
    settings = BrokerSettings(max_entries_per_ledger=10, min_ledger_rollover_seconds=0, retention_time_seconds=-1)
    service = await cluster.broker(settings)
    receipts = await publish_all(service, "p", 0, 35)
    ledgers = sorted({ledger for ledger, _ in receipts})
    assert len(ledgers) == 4
    assert [sum(1 for r in receipts if r[0] == ledger) for ledger in ledgers] == [10, 10, 10, 5]
    topic = await service.get_topic(TOPIC)
    assert [info.entries for info in topic.ledger.ledgers] == [10, 10, 10, 5]
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(100)
    assert seqs(await receive(consumer, 35)) == list(range(35))


async def test_failed_ledger_creation_fails_adds_fast_then_recovers(cluster: Cluster) -> None:
    settings = BrokerSettings(max_entries_per_ledger=2, min_ledger_rollover_seconds=0,
                              ledger_creation_retry_seconds=0.5)
    service = await cluster.broker(settings)
    await publish_all(service, "p", 0, 2)
    producer, _ = await service.create_producer(TOPIC, "q")
    producer.topic.ledger.persistence = (2, 2, 2)  # one node: creation fails
    with pytest.raises(PersistenceError, match="could not create a ledger"):
        await producer.topic.publish(producer, 0, 0, 1, entry("q", 0))
    producer, _ = await service.create_producer(TOPIC, "q")  # the failed write closed the producer
    with pytest.raises(PersistenceError, match="retry in"):
        await producer.topic.publish(producer, 0, 0, 1, entry("q", 0))
    assert producer.topic.ledger.state is State.CLOSED_LEDGER
    producer.topic.ledger.persistence = (1, 1, 1)

    async def accepted() -> bool:
        nonlocal producer
        try:
            await producer.topic.publish(producer, 0, 0, 1, entry("q", 0))
            return True
        except PersistenceError:
            producer, _ = await service.create_producer(TOPIC, "q")
            return False

    await eventually(accepted, "an add after the retry interval", timeout=DEADLINE)
    assert producer.topic.ledger.state.value == "LedgerOpened"


async def test_storage_outage_fails_writes_then_the_log_continues_without_gaps(
    cluster: Cluster, tmp_path: Path,
) -> None:
    service = await cluster.broker(BrokerSettings(ledger_creation_retry_seconds=0.2, retention_time_seconds=-1))
    before = await publish_all(service, "p", 0, 5)
    port = cluster.storage_server.port
    await cluster.storage_server.stop()  # the only storage node goes away

    async def refused() -> bool:
        producer, _ = await service.create_producer(TOPIC, "p")
        try:
            await producer.topic.publish(producer, 5, 5, 1, entry("p", 5))
        except PersistenceError:
            return True
        return False

    await eventually(refused, "a write to fail", timeout=DEADLINE)
    topic = await service.get_topic(TOPIC)
    # Failing writes neither grow the ledger list nor keep creating ledgers: adds fail fast.
    await eventually(lambda: topic.ledger.state is State.CLOSED_LEDGER, "the rollover to give up", timeout=DEADLINE)
    assert [info.entries for info in topic.ledger.ledgers] == [5]
    # The node comes back on the same address with its data.
    cluster.storage_server = StorageServer(StorageSettings(data_dir=str(tmp_path / "storage"), port=port,
                                                           metrics_port=-1))
    await cluster.storage_server.start()
    after: list[tuple[int, int]] = []

    async def accepted() -> bool:
        producer, _ = await service.create_producer(TOPIC, "p")
        try:
            after.append(await producer.topic.publish(producer, 5, 5, 1, entry("p", 5)))
        except PersistenceError:
            return False
        await service.close_producer(producer)
        return True

    await eventually(accepted, "writes to succeed again", timeout=DEADLINE)
    assert after[0] > before[-1]
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(100)
    assert seqs(await receive(consumer, 6)) == [0, 1, 2, 3, 4, 5]
    assert topic.ledger.number_of_entries_total == 6


async def test_terminated_ledger_refuses_adds_but_serves_reads(cluster: Cluster) -> None:
    service = await cluster.broker()
    await publish_all(service, "p", 0, 3)
    topic = await service.get_topic(TOPIC)
    producer, _ = await service.create_producer(TOPIC, "p2")  # connected before the termination
    last = await topic.ledger.terminate()
    assert last == topic.ledger.last_confirmed_position
    with pytest.raises(TopicTerminatedError):
        await producer.topic.publish(producer, 0, 0, 1, entry("p2", 0))
    with pytest.raises(TopicTerminatedError):
        await service.create_producer(TOPIC, "p3")
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(10)
    assert seqs(await receive(consumer, 3)) == [0, 1, 2]


async def test_crashed_broker_ledger_is_recovered_with_dedup_state(cluster: Cluster) -> None:
    settings = BrokerSettings(dedup_snapshot_interval=7)
    old = await cluster.broker(settings)
    await publish_all(old, "p", 0, 20)
    await publish_all(old, "other", 100, 3)
    stale_topic = await old.get_topic(TOPIC)
    # The old broker "dies": nothing is closed. A new broker loads the topic from the same
    # metadata and storage; opening the ledger recovers (fences and closes) the one left open.
    new = await cluster.broker(settings)
    consumer = await new.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(100)
    got = await receive(consumer, 23)
    assert seqs(got) == [*range(20), 100, 101, 102]
    producer, last_sequence_id = await new.create_producer(TOPIC, "p")
    assert last_sequence_id == 19
    assert await producer.topic.publish(producer, 19, 19, 1, entry("p", 19)) == (-1, -1)
    assert (await new.create_producer(TOPIC, "other"))[1] == 102
    # The stale owner's writes fail: its ledger was fenced on the storage node.
    stale, _ = await stale_topic.add_producer("stale")
    with pytest.raises(FencedError):
        await stale_topic.publish(stale, 0, 0, 1, entry("stale", 0))
    await eventually(lambda: stale_topic.closed, "the fenced topic to unload", timeout=DEADLINE)
    assert (await new.topic_stats(TOPIC)).entries == 23


async def test_reopened_managed_ledger_drops_its_empty_last_ledger(cluster: Cluster) -> None:
    service = await cluster.broker()
    await publish_all(service, "p", 0, 5)
    await service.unload_topic(TOPIC)
    await service.unload_topic(TOPIC)  # idempotent
    topic = await service.get_topic(TOPIC)
    infos = topic.ledger.ledgers
    assert [info.entries for info in infos] == [5, 0]  # the old one, and a fresh one for writes
    await service.unload_topic(TOPIC)
    topic = await service.get_topic(TOPIC)
    assert [info.entries for info in topic.ledger.ledgers] == [5, 0]
    assert topic.ledger.ledgers[0].ledger_id == infos[0].ledger_id


# ---- cursors and subscriptions ----

async def test_acks_survive_a_restart_and_only_unacked_entries_return(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    receipts = await publish_all(service, "p", 0, 10)
    consumer.flow(100)
    got = await receive(consumer, 10)
    consumer.ack([(d.ledger_id, d.entry_id) for d in got if seqs([d])[0] in (0, 1, 2, 5, 7)])
    await service.close_all()
    restarted = await cluster.broker()
    consumer = await restarted.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    consumer.flow(100)
    again = await receive(consumer, 5)
    assert seqs(again) == [3, 4, 6, 8, 9]
    assert [(d.ledger_id, d.entry_id) for d in again] == [receipts[i] for i in (3, 4, 6, 8, 9)]
    assert (await restarted.topic_stats(TOPIC)).subscriptions[0].backlog_entries == 5


async def test_cursor_is_flushed_periodically_while_the_topic_runs(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(cursor_flush_interval=0.05))
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    await publish_all(service, "p", 0, 4)
    consumer.flow(10)
    got = await receive(consumer, 4)
    consumer.ack([(got[-1].ledger_id, got[-1].entry_id)], cumulative=True)
    key = "/cursors/public/default/persistent/orders/s"

    async def flushed() -> bool:
        stored = await cluster.store.get(key)
        return stored is not None and b"[%d,%d]" % (got[-1].ledger_id, got[-1].entry_id) in stored.value

    await eventually(flushed, "the cursor flush", timeout=DEADLINE)


async def test_exclusive_subscription_refuses_a_second_consumer(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    with pytest.raises(ConsumerBusyError, match=r"^Exclusive consumer is already connected$"):
        await service.subscribe(TOPIC, "s", EXCLUSIVE)
    with pytest.raises(ConsumerBusyError, match="different type"):
        await service.subscribe(TOPIC, "s", SHARED)
    await first.close()
    await first.close()  # idempotent
    second = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    assert second.name != first.name


async def test_exclusive_redelivery_resends_everything_unacked_in_order(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    await publish_all(service, "p", 0, 6)
    consumer.flow(100)
    got = await receive(consumer, 6)
    consumer.ack([(got[1].ledger_id, got[1].entry_id), (got[4].ledger_id, got[4].entry_id)])
    consumer.redeliver(None)
    again = await receive(consumer, 4)
    assert seqs(again) == [0, 2, 3, 5]
    assert [d.redelivery_count for d in again] == [1, 1, 1, 1]


async def test_shared_subscription_round_robins_between_consumers(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(dispatch_round_robin_batch=1))
    a = await service.subscribe(TOPIC, "s", SHARED, EARLIEST, "a")
    b = await service.subscribe(TOPIC, "s", SHARED, EARLIEST, "b")
    a.flow(100)
    b.flow(100)
    await publish_all(service, "p", 0, 10)
    got_a, got_b = await receive(a, 5), await receive(b, 5)
    assert sorted(seqs(got_a) + seqs(got_b)) == list(range(10))
    assert a.pending.keys().isdisjoint(b.pending.keys())


async def test_shared_round_robin_respects_priority_and_permits(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(dispatch_round_robin_batch=1))
    high = await service.subscribe(TOPIC, "s", SHARED, EARLIEST, "high", priority_level=0)
    low = await service.subscribe(TOPIC, "s", SHARED, EARLIEST, "low", priority_level=1)
    high.flow(3)
    low.flow(100)
    await publish_all(service, "p", 0, 8)
    assert seqs(await receive(high, 3)) == [0, 1, 2]  # the high-priority consumer first
    assert seqs(await receive(low, 5)) == [3, 4, 5, 6, 7]  # then, out of permits, the other


async def test_closing_a_shared_consumer_redelivers_its_unacked_entries(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(dispatch_round_robin_batch=1))
    a = await service.subscribe(TOPIC, "s", SHARED, EARLIEST, "a")
    a.flow(4)
    await publish_all(service, "p", 0, 10)
    got_a = await receive(a, 4)
    a.ack([(got_a[0].ledger_id, got_a[0].entry_id)])
    b = await service.subscribe(TOPIC, "s", SHARED, EARLIEST, "b")
    b.flow(100)
    got_b = await receive(b, 6)
    assert seqs(got_b) == [4, 5, 6, 7, 8, 9] and all(d.redelivery_count == 0 for d in got_b)
    await a.close()
    with pytest.raises(ConsumerClosedError):
        await a.next_deliveries()
    redelivered = await receive(b, 3)
    assert seqs(redelivered) == [1, 2, 3]  # lowest position first
    assert [d.redelivery_count for d in redelivered] == [1, 1, 1]
    stats = await service.topic_stats(TOPIC)
    assert stats.subscriptions[0].consumers == 1 and stats.subscriptions[0].type == "Shared"


async def test_shared_redeliver_of_given_positions_counts_each_redelivery(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED, EARLIEST)
    await publish_all(service, "p", 0, 3)
    consumer.flow(100)
    got = await receive(consumer, 3)
    for expected in (1, 2):
        consumer.redeliver([(got[1].ledger_id, got[1].entry_id)])
        (again,) = await receive(consumer, 1)
        assert seqs([again]) == [1] and again.redelivery_count == expected


async def test_cumulative_ack_is_refused_on_shared(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED, EARLIEST)
    (receipt,) = await publish_all(service, "p", 0, 1)
    with pytest.raises(NotAllowedError, match=r"^Cumulative ack is not allowed on a Shared subscription$"):
        consumer.ack([receipt], cumulative=True)


async def test_a_subscription_with_consumers_refuses_another_type(cluster: Cluster) -> None:
    service = await cluster.broker()
    await service.subscribe(TOPIC, "s", SubscriptionType.FAILOVER)
    with pytest.raises(ConsumerBusyError, match=r"^Subscription is of a different type: s is Failover"):
        await service.subscribe(TOPIC, "s", SubscriptionType.KEY_SHARED)


# ---- producers ----

async def test_publish_checks_run_in_order_with_exact_messages(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(max_message_size=1000))
    producer, _ = await service.create_producer(TOPIC, "p")
    topic = producer.topic
    corrupt = bytearray(entry("p", 0))
    corrupt[-1] ^= 0xFF
    with pytest.raises(ChecksumError, match=r"^Checksum failed on the broker$"):
        await topic.publish(producer, 0, 0, 1, bytes(corrupt))
    with pytest.raises(MessageTooLargeError, match="larger than the maximum message size of 1000 bytes"):
        await topic.publish(producer, 0, 0, 1, entry("p", 0, payload=b"x" * (1000 + ENTRY_FRAMING_ALLOWANCE)))
    # A message of exactly the limit passes: the framing around it is allowed for.
    assert (await topic.publish(producer, 0, 0, 1, entry("p", 0, payload=b"x" * 1000)))[0] >= 0
    topic.encryption_required = True
    with pytest.raises(MetadataError, match=r"^Messages must be encrypted$"):
        await topic.publish(producer, 1, 1, 1, entry("p", 1))
    assert (await topic.publish(producer, 1, 1, 1, entry("p", 1, encryption_keys=("k",))))[0] >= 0
    await service.close_producer(producer)
    with pytest.raises(PersistenceError, match=r"^Producer is closed$"):
        await topic.publish(producer, 2, 2, 1, bytes(corrupt))  # closed wins over every other check
    assert (await service.topic_stats(TOPIC)).entries == 2


async def test_producer_names_are_assigned_unique_and_busy_names_refused(cluster: Cluster) -> None:
    service = await cluster.broker()
    first, last_first = await service.create_producer(TOPIC, None)
    second, _ = await service.create_producer(TOPIC, None)
    assert first.name.startswith("standalone-") and first.name != second.name and last_first == -1
    with pytest.raises(ProducerBusyError):
        await service.create_producer(TOPIC, first.name)
    await service.close_producer(first)
    again, _ = await service.create_producer(TOPIC, first.name)
    assert again.name == first.name
    await service.close_all()
    restarted = await cluster.broker()
    third, _ = await restarted.create_producer(TOPIC, None)
    assert third.name not in (first.name, second.name)


async def test_unloading_a_topic_closes_its_producers_and_consumers(cluster: Cluster) -> None:
    service = await cluster.broker()
    producer, _ = await service.create_producer(TOPIC, "p")
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    waiting = asyncio.ensure_future(consumer.next_deliveries())
    await service.unload_topic(TOPIC)
    with pytest.raises(ConsumerClosedError):
        await waiting
    await asyncio.wait_for(producer.wait_closed(), DEADLINE)
    assert service.topic_names() == []


# ---- the service ----

async def test_concurrent_loads_share_one_topic(cluster: Cluster) -> None:
    service = await cluster.broker()
    topics = await asyncio.gather(*(service.get_topic("orders") for _ in range(10)))
    assert all(topic is topics[0] for topic in topics)
    assert service.topic_names() == [TOPIC]
    assert await service.list_topics("public/default") == [TOPIC]


async def test_bad_names_and_foreign_topics_are_refused(cluster: Cluster) -> None:
    service = await cluster.broker()
    with pytest.raises(InvalidTopicNameError):
        await service.get_topic("persistent://a/b")
    with pytest.raises(InvalidTopicNameError):
        await service.subscribe(TOPIC, "bad name", EXCLUSIVE)
    foreign = await cluster.broker(ownership=OwnsNothing())
    with pytest.raises(NotOwnerError):
        await foreign.get_topic(TOPIC)
    assert foreign.topic_names() == []


async def test_managed_ledger_positions_skip_empty_ledgers(cluster: Cluster) -> None:
    settings = BrokerSettings(max_entries_per_ledger=2, min_ledger_rollover_seconds=0, retention_time_seconds=-1)
    service = await cluster.broker(settings)
    receipts = await publish_all(service, "p", 0, 5)
    ledger: ManagedLedger = (await service.get_topic(TOPIC)).ledger
    first, last = Position(*receipts[0]), Position(*receipts[-1])
    assert ledger.first_position == first and ledger.last_confirmed_position == last
    assert ledger.number_of_entries(Position(-1, -1), last) == 5
    assert ledger.normalize(Position(first.ledger_id, 2)) == Position(*receipts[2])
    entries = await ledger.read_entries(Position(first.ledger_id, 1), 3)
    assert [p for p, _ in entries] == [Position(*r) for r in receipts[1:4]]
    assert not ledger.has_entries_from(ledger.next_position(last))


def test_settings_defaults_match_the_seeds() -> None:
    settings = BrokerSettings()
    assert settings.max_message_size == 5 * 1024 * 1024
    assert settings.ledger_creation_retry_seconds == 10.0
    assert replace(settings, port=5).address == "127.0.0.1:5"
