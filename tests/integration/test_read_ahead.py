"""Catch-up reads (broker.core.read_ahead): a cursor reading a backlog that is not cached reads ahead
from storage into a buffer bounded per cursor and per broker, and never through the entry cache, so
the entries tail readers need stay cached. One process: a real metadata store, storage node and
storage client, brokers restarted over them so that nothing is cached."""

from __future__ import annotations

import asyncio

import pytest
from herald.broker.core.consumer import Delivery
from herald.broker.core.cursor import InitialPosition
from herald.broker.core.dispatcher import Dispatcher
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription import SubscriptionType
from herald.broker.settings import BrokerSettings
from herald.common.codec.entry import EntryMetadata, encode_entry, read_metadata
from herald.common.errors import InvalidArgumentError

from tests.helpers import eventually
from tests.integration import test_broker_core
from tests.integration.test_broker_core import Cluster, receive

DEADLINE = 60.0  # bounds waits; never asserted as a duration
TOPIC = "persistent://public/default/backlog"
PAYLOAD = 1000  # bytes of each entry's one message
EXCLUSIVE = SubscriptionType.EXCLUSIVE


cluster = test_broker_core.cluster  # the fixture: one metadata store and storage node, brokers over them


@pytest.fixture
async def core(cluster: Cluster) -> Cluster:
    """test_broker_core's broker over one metadata store and storage node."""
    return cluster


async def fresh_broker(core: Cluster, settings: BrokerSettings | None = None) -> BrokerService:
    """A broker with nothing cached: the ones before it are closed (a restart)."""
    for service in core.services:
        await service.close_all()
    return await core.broker(settings)


async def publish(service: BrokerService, first: int, count: int) -> None:
    producer, _ = await service.create_producer(TOPIC, f"p{first}")
    futures = []
    for seq in range(first, first + count):
        meta = EntryMetadata(producer_name=producer.name, sequence_id=seq, highest_sequence_id=seq, num_messages=1)
        futures.append(producer.topic.publish(producer, seq, seq, 1, encode_entry(meta, b"x" * PAYLOAD)))
    await asyncio.gather(*futures)
    await service.close_producer(producer)


def seqs(deliveries: list[Delivery]) -> list[int]:
    return [read_metadata(d.data).sequence_id for d in deliveries]


async def dispatcher_of(service: BrokerService, subscription: str) -> Dispatcher:
    topic = await service.get_topic(TOPIC)
    dispatcher = topic.subscriptions[subscription].dispatcher
    assert dispatcher is not None
    return dispatcher


async def test_a_backlog_is_read_ahead_up_to_the_bound_then_resumes_as_it_is_consumed(core: Cluster) -> None:
    await publish(await fresh_broker(core), 0, 200)
    bound = 20 * (PAYLOAD + 100)  # about 20 entries
    settings = BrokerSettings(read_ahead_max_bytes=bound, read_ahead_max_entries=8)
    service = await fresh_broker(core, settings)  # restarted: nothing cached
    consumer = await service.subscribe(TOPIC, "catch-up", EXCLUSIVE, InitialPosition.EARLIEST)
    read_ahead = (await dispatcher_of(service, "catch-up")).read_ahead
    consumer.flow(1)
    first = await receive(consumer, 1)
    # With one entry asked for, the cursor reads on ahead: several reads of at most 8 entries,
    # until the buffer holds as much as its bound allows, and then no read is in flight.
    await eventually(lambda: not read_ahead.reading and read_ahead.buffered_bytes + PAYLOAD > bound,
                     "the read-ahead buffer filled up to its bound")
    assert read_ahead.reads >= 2
    assert read_ahead.buffered_bytes <= bound and read_ahead.peak_bytes <= bound
    reads_at_bound = read_ahead.reads
    # Consuming the rest makes it read ahead again, within its bound throughout.
    consumer.flow(1000)
    rest = await receive(consumer, 199)
    assert seqs(first + rest) == list(range(200))
    assert read_ahead.reads > reads_at_bound
    assert read_ahead.peak_bytes <= bound
    assert read_ahead.buffered_bytes == 0 and service.entry_cache.read_ahead.used == 0
    # What was read ahead went to the consumer, not into the entry cache.
    assert service.entry_cache.entries == 0


async def test_cursors_reading_ahead_together_stay_within_the_broker_bound(core: Cluster) -> None:
    await publish(await fresh_broker(core), 0, 150)
    per_cursor = 20 * (PAYLOAD + 100)
    total = 30 * (PAYLOAD + 100)
    settings = BrokerSettings(read_ahead_max_bytes=per_cursor, read_ahead_total_max_bytes=total,
                              read_ahead_max_entries=5)
    service = await fresh_broker(core, settings)
    consumers = [await service.subscribe(TOPIC, name, EXCLUSIVE, InitialPosition.EARLIEST) for name in ("a", "b")]
    read_aheads = [(await dispatcher_of(service, name)).read_ahead for name in ("a", "b")]
    for consumer in consumers:
        consumer.flow(1)
        await receive(consumer, 1)
    budget = service.entry_cache.read_ahead
    # Both stop reading ahead once the broker's budget has no room for another entry.
    await eventually(lambda: not any(r.reading for r in read_aheads) and budget.used + PAYLOAD > total,
                     "the read-ahead of both cursors stopped at the broker's bound")
    assert sum(r.buffered_bytes for r in read_aheads) <= total and budget.peak <= total
    for consumer in consumers:
        consumer.flow(1000)
        assert seqs(await receive(consumer, 149)) == list(range(1, 150))
    assert budget.peak <= total and budget.used == 0


async def test_a_catch_up_reader_leaves_the_tail_readers_entries_in_the_cache(core: Cluster) -> None:
    await publish(await fresh_broker(core), 0, 300)  # 300 KB of backlog
    service = await fresh_broker(core, BrokerSettings(entry_cache_max_bytes=40 * (PAYLOAD + 100)))
    tail = await service.subscribe(TOPIC, "tail", EXCLUSIVE, InitialPosition.LATEST)
    tail.flow(1000)
    await publish(service, 300, 20)  # the tail: cached as it is added
    assert seqs(await receive(tail, 20)) == list(range(300, 320))
    cached = service.entry_cache.entries
    assert cached == 20
    catch_up = await service.subscribe(TOPIC, "catch-up", EXCLUSIVE, InitialPosition.EARLIEST)
    catch_up.flow(1000)
    assert seqs(await receive(catch_up, 320)) == list(range(320))
    # The backlog (seven times the cache) went past the cache: nothing of the tail was evicted.
    assert service.entry_cache.evictions == 0
    assert service.entry_cache.entries == cached


async def test_a_seek_drops_what_was_read_ahead_and_reads_from_the_new_position(core: Cluster) -> None:
    await publish(await fresh_broker(core), 0, 100)
    settings = BrokerSettings(read_ahead_max_bytes=10 * (PAYLOAD + 100), read_ahead_max_entries=4)
    service = await fresh_broker(core, settings)
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, InitialPosition.EARLIEST)
    read_ahead = (await dispatcher_of(service, "s")).read_ahead
    consumer.flow(30)
    assert seqs(await receive(consumer, 30)) == list(range(30))
    await eventually(lambda: read_ahead.buffered_bytes > 0 and not read_ahead.reading, "entries read ahead")
    await service.reset_cursor(TOPIC, "s", InitialPosition.EARLIEST)  # closes the consumer, as Pulsar's does
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, InitialPosition.EARLIEST)
    consumer.flow(1000)
    assert seqs(await receive(consumer, 100)) == list(range(100))


async def test_entries_larger_than_the_buffer_are_read_when_asked_never_ahead(core: Cluster) -> None:
    await publish(await fresh_broker(core), 0, 50)
    service = await fresh_broker(core, BrokerSettings(read_ahead_max_bytes=PAYLOAD // 2))
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, InitialPosition.EARLIEST)
    read_ahead = (await dispatcher_of(service, "s")).read_ahead
    consumer.flow(1000)
    assert seqs(await receive(consumer, 50)) == list(range(50))
    assert read_ahead.reads == 0 and read_ahead.peak_bytes == 0
    assert service.entry_cache.read_ahead.peak == 0


@pytest.mark.parametrize("setting", ["read_ahead_max_bytes", "read_ahead_total_max_bytes", "read_ahead_max_entries"])
def test_read_ahead_settings_out_of_range_are_refused(setting: str) -> None:
    with pytest.raises(InvalidArgumentError, match=setting):
        BrokerSettings(**{setting: -1})  # type: ignore[arg-type]


async def test_a_full_buffer_is_refilled_in_one_read_once_half_of_it_is_free(core: Cluster) -> None:
    await publish(await fresh_broker(core), 0, 200)
    bound = 20 * (PAYLOAD + 100)  # about 20 entries
    service = await fresh_broker(core, BrokerSettings(read_ahead_max_bytes=bound, read_ahead_max_entries=100))
    consumer = await service.subscribe(TOPIC, "catch-up", EXCLUSIVE, InitialPosition.EARLIEST)
    read_ahead = (await dispatcher_of(service, "catch-up")).read_ahead
    consumer.flow(1)
    got = await receive(consumer, 1)
    await eventually(lambda: not read_ahead.reading and read_ahead.buffered_bytes + PAYLOAD > bound,
                     "the read-ahead buffer filled up to its bound")
    reads = read_ahead.reads
    # Taking a few entries from a full buffer starts no read (each take used to start one, of
    # as many entries as were taken): the decision is made as the entries are taken.
    for _ in range(3):
        consumer.flow(1)
        got += await receive(consumer, 1)
        assert not read_ahead.reading and read_ahead.reads == reads
    # Once half of it is free, one read fills it up again.
    consumer.flow(10)
    got += await receive(consumer, 10)
    await eventually(lambda: not read_ahead.reading and read_ahead.reads > reads, "the buffer was refilled")
    assert read_ahead.reads == reads + 1 and read_ahead.buffered_bytes > bound // 2
    consumer.flow(1000)
    got += await receive(consumer, 200 - len(got))
    assert seqs(got) == list(range(200))
