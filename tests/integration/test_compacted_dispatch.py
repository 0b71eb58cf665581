"""read_compacted through the broker core (dispatchers, cursors, pulls) over a real storage node and
metadata store, in one process. The compacted view is a stand-in with the compactor's read
interface (broker.core.compacted_reads.CompactedView): it keeps, of the topic's entries up to a
horizon, the latest per key, read from the real ledger. The compactor itself (and the process
tests that compact through the admin call) are tests/e2e/test_read_compacted.py's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from herald.broker.core.consumer import Consumer, Delivery
from herald.broker.core.cursor import InitialPosition
from herald.broker.core.managed_ledger import Position
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription import SubscriptionType
from herald.broker.core.topic import PersistentTopic
from herald.common.codec.compacted_out import FLAG_COMPACTED_OUT
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record, read_metadata
from herald.common.codec.herald_entry import RECORD_HEADER
from herald.common.errors import EntryNotFoundError, NotAllowedError

from tests.integration.test_broker_core import Cluster, cluster, publish_all  # noqa: F401 - the fixture

DEADLINE = 60.0  # bounds waits; never asserted as a duration
TOPIC = "persistent://public/default/table"
EXCLUSIVE, FAILOVER = SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER
EARLIEST = InitialPosition.EARLIEST
KEYS = 5  # an entry's key is its sequence id mod KEYS


class StandInView:
    """The latest entry per key among the topic's entries up to `horizon`, as the compactor's view
    would hold them (at their original positions)."""

    def __init__(self, horizon: Position, entries: list[tuple[Position, bytes]]) -> None:
        self.horizon = horizon
        latest: dict[int, tuple[Position, bytes]] = {}
        for position, data in entries:
            if position <= horizon:
                latest[read_metadata(data).sequence_id % KEYS] = (position, data)
        self.entries = sorted(latest.values())
        self.reads: list[Position] = []
        self.deleted = False  # a replaced view whose ledger is gone: reads fail

    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        self.reads.append(start)
        if self.deleted:
            raise EntryNotFoundError("the compacted ledger was deleted")
        return [e for e in self.entries if e[0] >= start][:max_entries]


class StandInCompaction:
    def __init__(self) -> None:
        self.view: StandInView | None = None


async def compact(topic: PersistentTopic, compaction: StandInCompaction) -> StandInView:
    """Publish a view of the topic as it is now (horizon: its last entry)."""
    horizon = topic.ledger.last_confirmed_position
    entries = await topic.ledger.read_entries(topic.ledger.first_position, 10_000)
    view = StandInView(horizon, entries)
    compaction.view = view
    return view


async def receive(consumer: Consumer, count: int) -> list[Delivery]:
    got: list[Delivery] = []
    while len(got) < count:
        got += await asyncio.wait_for(consumer.next_deliveries(), DEADLINE)
    return got


def seqs(deliveries: list[Delivery]) -> list[int]:
    return [read_metadata(d.data).sequence_id for d in deliveries]


def positions(deliveries: list[Delivery]) -> list[tuple[int, int]]:
    return [(d.ledger_id, d.entry_id) for d in deliveries]


@pytest.fixture
async def service(cluster: Cluster) -> AsyncIterator[BrokerService]:  # noqa: F811 - the imported fixture
    yield await cluster.broker()


async def compacted_topic(service: BrokerService, count: int = 20) -> tuple[PersistentTopic, StandInCompaction]:
    """`count` entries (sequence ids 0..count-1, KEYS keys) compacted into a stand-in view."""
    await publish_all(service, "p", 0, count, TOPIC)
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    compaction = StandInCompaction()
    topic.compaction = compaction
    await compact(topic, compaction)
    return topic, compaction


async def test_read_compacted_reads_the_view_then_the_tail_in_order(service: BrokerService) -> None:
    await compacted_topic(service, 20)  # keys 0..4: latest are sequence ids 15..19
    await publish_all(service, "tail", 100, 3, TOPIC)  # after the horizon: all delivered
    consumer = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(1000)
    assert seqs(await receive(consumer, 8)) == [15, 16, 17, 18, 19, 100, 101, 102]
    await publish_all(service, "live", 200, 2, TOPIC)  # the live tail keeps coming
    assert seqs(await receive(consumer, 2)) == [200, 201]


async def test_without_read_compacted_everything_is_delivered(service: BrokerService) -> None:
    await compacted_topic(service, 20)
    consumer = await service.subscribe(TOPIC, "all", EXCLUSIVE, EARLIEST)
    consumer.flow(1000)
    assert seqs(await receive(consumer, 20)) == list(range(20))


async def test_a_topic_without_a_view_is_read_from_the_log(service: BrokerService) -> None:
    await publish_all(service, "p", 0, 6, TOPIC)
    consumer = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(1000)
    assert seqs(await receive(consumer, 6)) == list(range(6))


async def test_the_boundary_loses_and_repeats_nothing_with_one_permit_at_a_time(service: BrokerService) -> None:
    # One entry per round: every read stops at a different place across the view and the horizon.
    await compacted_topic(service, 20)
    await publish_all(service, "tail", 100, 3, TOPIC)
    consumer = await service.subscribe(TOPIC, "compacted", FAILOVER, EARLIEST, read_compacted=True)
    got: list[Delivery] = []
    for _ in range(8):
        consumer.flow(1)
        got += await receive(consumer, 1)
    assert seqs(got) == [15, 16, 17, 18, 19, 100, 101, 102]
    assert positions(got) == sorted(positions(got))


async def test_a_new_view_while_reading_continues_from_the_read_position(service: BrokerService) -> None:
    topic, compaction = await compacted_topic(service, 20)
    first = compaction.view
    assert first is not None
    consumer = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(2)
    part = await receive(consumer, 2)
    assert seqs(part) == [15, 16]
    # More writes, a new compaction: its view covers them too; the old view's ledger is deleted.
    await publish_all(service, "p", 20, 7, TOPIC)  # sequence ids 20..26: keys 0, 1 updated twice
    await compact(topic, compaction)
    first.deleted = True
    consumer.flow(1000)
    # From the read position on, in the new view: the latest of keys 2..4 (22, 23, 24) and 0, 1 (25, 26).
    rest = await receive(consumer, 5)
    assert seqs(rest) == [22, 23, 24, 25, 26]
    assert positions(part + rest) == sorted(positions(part + rest))


async def test_a_view_replaced_during_a_read_is_read_again_in_the_new_one(service: BrokerService) -> None:
    topic, compaction = await compacted_topic(service, 10)
    old = compaction.view
    assert old is not None
    await publish_all(service, "p", 10, 5, TOPIC)
    new = StandInView(topic.ledger.last_confirmed_position,
                      await topic.ledger.read_entries(topic.ledger.first_position, 100))
    old.deleted = True

    class SwapsOnRead(StandInView):
        async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
            compaction.view = new  # published while this read was in flight, and this one deleted
            raise EntryNotFoundError("the compacted ledger was deleted")

    compaction.view = SwapsOnRead(old.horizon, [])
    consumer = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(1000)
    assert seqs(await receive(consumer, 5)) == [10, 11, 12, 13, 14]


async def test_redelivery_reads_the_view_again_from_the_mark_delete_position(service: BrokerService) -> None:
    await compacted_topic(service, 20)
    consumer = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(1000)
    got = await receive(consumer, 5)
    consumer.ack([positions(got)[0]])
    consumer.redeliver(None)
    again = await receive(consumer, 4)
    assert seqs(again) == [16, 17, 18, 19]  # the acknowledged one is not read again
    assert all(d.redelivery_count == 1 for d in again)


async def test_acks_on_original_positions_survive_a_reconnect(service: BrokerService) -> None:
    await compacted_topic(service, 20)
    consumer = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(1000)
    got = await receive(consumer, 5)
    consumer.ack([positions(got)[2]], cumulative=True)  # up to sequence id 17's original position
    await consumer.close()
    again = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    again.flow(1000)
    assert seqs(await receive(again, 2)) == [18, 19]


async def test_a_seek_inside_the_compacted_range_reads_the_view_again(service: BrokerService) -> None:
    await compacted_topic(service, 20)
    await publish_all(service, "tail", 100, 2, TOPIC)
    consumer = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(1000)
    got = await receive(consumer, 7)
    consumer.ack(positions(got), cumulative=True)
    await service.reset_cursor(TOPIC, "compacted", InitialPosition.EARLIEST)
    again = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    again.flow(1000)
    assert seqs(await receive(again, 7)) == [15, 16, 17, 18, 19, 100, 101]


@pytest.mark.parametrize("sub_type", [SubscriptionType.SHARED, SubscriptionType.KEY_SHARED])
async def test_read_compacted_is_refused_on_shared_subscriptions(
    service: BrokerService, sub_type: SubscriptionType,
) -> None:
    await compacted_topic(service, 3)
    with pytest.raises(NotAllowedError) as refused:
        await service.subscribe(TOPIC, "s", sub_type, EARLIEST, read_compacted=True)
    assert str(refused.value).startswith(
        f"read_compacted is only allowed on Exclusive and Failover subscriptions (and readers), not on a "
        f"{sub_type.label} subscription")
    topic = await service.get_topic(TOPIC)
    assert "s" not in topic.subscriptions or not topic.subscriptions["s"].consumers


async def test_read_compacted_is_refused_on_a_non_persistent_topic(service: BrokerService) -> None:
    with pytest.raises(NotAllowedError, match=r"^read_compacted needs a persistent topic"):
        await service.subscribe("non-persistent://public/default/np", "s", EXCLUSIVE, read_compacted=True)


async def test_a_reader_reads_the_view_from_its_start(service: BrokerService) -> None:
    _, compaction = await compacted_topic(service, 20)
    view = compaction.view
    assert view is not None
    start = view.entries[2][0]  # sequence id 17's position, inclusive
    reader = await service.subscribe(TOPIC, "reader-1", EXCLUSIVE, non_durable=True, start_position=start,
                                     start_inclusive=True, read_compacted=True)
    reader.flow(1000)
    assert seqs(await receive(reader, 3)) == [17, 18, 19]


async def test_a_compacted_pull_reads_the_view_then_the_log(service: BrokerService) -> None:
    await compacted_topic(service, 20)
    await publish_all(service, "tail", 100, 3, TOPIC)
    got: list[int] = []
    start: Position | None = None
    while len(got) < 8:
        result = await service.pull(TOPIC, -1, start, max_entries=2, read_compacted=True)
        assert result.entries, f"the pull from {start} found nothing after {got}"
        got += [read_metadata(data).sequence_id for _, data in result.entries]
        start = result.next
    assert got == [15, 16, 17, 18, 19, 100, 101, 102]
    plain = await service.pull(TOPIC, -1, None, max_entries=100)
    assert len(plain.entries) == 23  # without read_compacted: every entry


async def test_a_compacted_batch_is_delivered_to_a_reader_with_the_mask_of_the_messages_it_keeps(
    service: BrokerService,
) -> None:
    # Pulsar's C++ client shows compacted-out messages (as empty ones) unless MESSAGE.ack_set leaves
    # them out; but it acknowledges a batch only once each of its messages was: a durable
    # subscription's consumer gets the batch whole.
    topic, compaction = await compacted_topic(service, 3)
    payload = bytearray()
    pack_record(payload, b"kept", "a")
    payload += RECORD_HEADER.pack(0, FLAG_COMPACTED_OUT)
    pack_record(payload, b"kept too", "b")
    rewritten = encode_entry(EntryMetadata(producer_name="p", sequence_id=0, highest_sequence_id=2, num_messages=3,
                                           batched=True, uncompressed_size=len(payload)), bytes(payload))
    view = StandInView(topic.ledger.last_confirmed_position, [])
    first = (await topic.ledger.read_entries(topic.ledger.first_position, 1))[0][0]
    view.entries = [(first, rewritten)]
    compaction.view = view
    reader = await service.subscribe(TOPIC, "reader-1", EXCLUSIVE, EARLIEST, non_durable=True, read_compacted=True)
    reader.flow(1000)
    (delivery,) = await receive(reader, 1)
    assert delivery.ack_set == 0b101 and delivery.data == rewritten
    durable = await service.subscribe(TOPIC, "compacted", EXCLUSIVE, EARLIEST, read_compacted=True)
    durable.flow(1000)
    (whole,) = await receive(durable, 1)
    assert whole.ack_set is None and whole.data == rewritten
    plain = await service.subscribe(TOPIC, "plain", EXCLUSIVE, EARLIEST)
    plain.flow(1000)
    assert all(d.ack_set is None for d in await receive(plain, 3))  # the log's entries: every message
