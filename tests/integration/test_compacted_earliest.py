"""read_compacted from the earliest after retention deleted the ledgers before the horizon (Pulsar's
semantics: a reader or consumer starting at Earliest sees the latest value of EVERY key in the
compacted view, then the tail), through the broker core with the real compactor over a real storage
node and metadata store. Once compacted, only the view keeps the keys of the deleted ledgers: a new
durable read_compacted subscription at EARLIEST, a read_compacted reader at the earliest (Herald's
edge or Pulsar's (-1, -1) message id), a compacted pull from the start and a seek to the earliest
each read the whole view, then the log after the horizon. A subscription that already has a
position keeps it, and one without read_compacted still starts at the log's first kept entry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from herald.broker.core.consumer import Consumer, Delivery
from herald.broker.core.ledger_list import Position
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription import SubscriptionType
from herald.broker.core.topic import PersistentTopic
from herald.common.codec.entry import open_entry

from tests.integration import test_broker_core
from tests.integration.test_broker_core import EARLIEST, TOPIC, Cluster
from tests.integration.test_compaction import LIMIT, Workload, compacted, publish, settings

cluster = test_broker_core.cluster  # the fixture: a metadata store, a storage node, brokers on demand

DEADLINE = 60.0  # bounds waits; never asserted as a duration
EXCLUSIVE = SubscriptionType.EXCLUSIVE


@dataclass
class Trimmed:
    """A compacted topic whose ledgers before the horizon retention deleted, plus a tail."""

    service: BrokerService
    topic: PersistentTopic
    workload: Workload
    horizon: Position
    first_kept: Position  # the log's first entry after the trim
    view_positions: list[Position]  # the original positions the view holds


async def trimmed_topic(cluster: Cluster) -> Trimmed:
    # No retention: once compacted, the ledgers before the horizon go (the compaction cursor was
    # all that held them), and the compacted ledger alone has their keys.
    service = await cluster.broker(settings(retention_time_seconds=0, retention_size_bytes=0))
    await service.compact(TOPIC)  # on the empty topic: its compaction cursor holds what comes next
    empty = await compacted(service)
    workload = Workload(keys=2000, seed=23)  # most keys written once: only the view keeps them once trimmed
    await publish(service, workload.entries(130))  # 40 entries a ledger: four ledgers
    await service.compact(TOPIC)
    await compacted(service, after=empty.finished_at)
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    view = topic.compaction.view
    assert view is not None
    view_positions = [p for window in await view.read_all(50) for p, _ in window]
    assert await topic.retention.trim(), "retention deleted the ledgers before the horizon"
    first_kept = topic.ledger.first_position
    assert view_positions[0] < first_kept, "the view holds keys of deleted ledgers"
    await publish(service, workload.entries(4))  # the tail, after the horizon
    return Trimmed(service, topic, workload, view.horizon, first_kept, view_positions)


def fold(table: dict[str, bytes], datas: list[bytes]) -> None:
    """Apply stored entries as a table view does: a key's latest value; empty / null: removed;
    compacted-out messages and keyless ones are not rows."""
    for data in datas:
        opened = open_entry(data)
        for record in opened.records(opened.restore(LIMIT)):
            if record.compacted_out or record.key is None:
                continue
            if record.value:
                table[record.key] = record.value
            else:
                table.pop(record.key, None)


async def receive_all(consumer: Consumer, last: Position) -> list[Delivery]:
    """Every delivery up to the topic's last entry `last`."""
    got: list[Delivery] = []
    while not got or Position(got[-1].ledger_id, got[-1].entry_id) < last:
        got += await asyncio.wait_for(consumer.next_deliveries(), DEADLINE)
    return got


def check_whole_view_then_tail(trimmed: Trimmed, got: list[Delivery]) -> None:
    positions = [Position(d.ledger_id, d.entry_id) for d in got]
    assert positions == sorted(set(positions)), "in order, none twice"
    # Every entry of the view (those of deleted ledgers first), then every entry after the horizon.
    assert [p for p in positions if p <= trimmed.horizon] == trimmed.view_positions
    table: dict[str, bytes] = {}
    fold(table, [d.data for d in got])
    assert table == trimmed.workload.latest


async def test_a_new_durable_read_compacted_subscription_at_earliest_reads_the_whole_view(cluster: Cluster) -> None:
    trimmed = await trimmed_topic(cluster)
    last = trimmed.topic.ledger.last_confirmed_position
    consumer = await trimmed.service.subscribe(TOPIC, "new", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(100_000)
    check_whole_view_then_tail(trimmed, await receive_all(consumer, last))
    # Its backlog counts what the log holds (as Pulsar's): nothing before the first kept entry.
    assert trimmed.topic.subscriptions["new"].backlog == trimmed.topic.ledger.number_of_entries_total


async def test_the_durable_subscription_keeps_its_start_before_the_log_across_a_new_broker(cluster: Cluster) -> None:
    trimmed = await trimmed_topic(cluster)
    first = await trimmed.service.subscribe(TOPIC, "new", EXCLUSIVE, EARLIEST, read_compacted=True)
    await first.close()  # created and persisted, nothing read
    await trimmed.service.close_all()
    again = await cluster.broker(settings(retention_time_seconds=0, retention_size_bytes=0))
    topic = await again.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    assert topic.subscriptions["new"].cursor.mark_delete_position < trimmed.view_positions[0]  # not snapped forward
    consumer = await again.subscribe(TOPIC, "new", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(100_000)
    check_whole_view_then_tail(trimmed, await receive_all(consumer, topic.ledger.last_confirmed_position))
    # Acknowledged up to a view entry of a deleted ledger: the next consumer goes on after it.
    acked = trimmed.view_positions[2]
    consumer.ack([(acked.ledger_id, acked.entry_id)], cumulative=True)
    await consumer.close()
    await again.close_all()  # persists the cursor
    third = await cluster.broker(settings(retention_time_seconds=0, retention_size_bytes=0))
    rest = await third.subscribe(TOPIC, "new", EXCLUSIVE, EARLIEST, read_compacted=True)
    rest.flow(100_000)
    reloaded = await third.get_topic(TOPIC)
    assert isinstance(reloaded, PersistentTopic)
    received = await receive_all(rest, reloaded.ledger.last_confirmed_position)
    assert [Position(d.ledger_id, d.entry_id) for d in received if Position(d.ledger_id, d.entry_id)
            <= trimmed.horizon] == trimmed.view_positions[3:]


async def test_a_read_compacted_reader_at_the_earliest_reads_the_whole_view(cluster: Cluster) -> None:
    trimmed = await trimmed_topic(cluster)
    last = trimmed.topic.ledger.last_confirmed_position
    # Herald's client asks for the EARLIEST edge; Pulsar's sends the message id (-1, -1), inclusive.
    herald = await trimmed.service.subscribe(TOPIC, "reader-herald", EXCLUSIVE, EARLIEST, non_durable=True,
                                             read_compacted=True)
    pulsar = await trimmed.service.subscribe(TOPIC, "reader-pulsar", EXCLUSIVE, non_durable=True,
                                             start_position=Position(-1, -1), start_inclusive=True,
                                             read_compacted=True)
    for reader in (herald, pulsar):
        reader.flow(100_000)
        check_whole_view_then_tail(trimmed, await receive_all(reader, last))


async def test_a_reader_resuming_inside_a_deleted_ledger_reads_the_rest_of_the_view(cluster: Cluster) -> None:
    # A reader that reconnects after the message it read last (exclusive start) in a deleted ledger.
    trimmed = await trimmed_topic(cluster)
    read_last = trimmed.view_positions[4]
    assert read_last < trimmed.first_kept
    reader = await trimmed.service.subscribe(TOPIC, "resumed", EXCLUSIVE, non_durable=True,
                                             start_position=read_last, start_inclusive=False, read_compacted=True)
    reader.flow(100_000)
    got = await receive_all(reader, trimmed.topic.ledger.last_confirmed_position)
    assert [Position(d.ledger_id, d.entry_id) for d in got
            if Position(d.ledger_id, d.entry_id) <= trimmed.horizon] == trimmed.view_positions[5:]


async def test_a_compacted_pull_from_the_start_reads_the_whole_view(cluster: Cluster) -> None:
    trimmed = await trimmed_topic(cluster)
    datas: list[bytes] = []
    positions: list[Position] = []
    start: Position | None = None
    while True:
        result = await trimmed.service.pull(TOPIC, start=start, max_entries=7, read_compacted=True)
        if not result.entries:
            break
        positions += [p for p, _ in result.entries]
        datas += [d for _, d in result.entries]
        start = result.next
    assert [p for p in positions if p <= trimmed.horizon] == trimmed.view_positions
    table: dict[str, bytes] = {}
    fold(table, datas)
    assert table == trimmed.workload.latest


async def test_a_seek_to_the_earliest_on_a_read_compacted_subscription_reads_the_whole_view(
        cluster: Cluster) -> None:
    trimmed = await trimmed_topic(cluster)
    last = trimmed.topic.ledger.last_confirmed_position
    # A subscription that read the deleted range before (it has a position): reconnecting does not
    # give it those messages again.
    consumer = await trimmed.service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST, read_compacted=True)
    consumer.flow(100_000)
    got = await receive_all(consumer, last)
    consumer.ack([(got[-1].ledger_id, got[-1].entry_id)], cumulative=True)
    await consumer.close()
    again = await trimmed.service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST, read_compacted=True)
    again.flow(100_000)
    await publish(trimmed.service, trimmed.workload.entries(1))
    newest = trimmed.topic.ledger.last_confirmed_position
    assert [Position(d.ledger_id, d.entry_id) for d in await receive_all(again, newest)] == [newest]
    # Seek to the earliest: the whole view again, then the log after the horizon.
    await trimmed.service.reset_cursor(TOPIC, "s", EARLIEST)
    seeker = await trimmed.service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST, read_compacted=True)
    seeker.flow(100_000)
    check_whole_view_then_tail(trimmed, await receive_all(seeker, newest))


async def test_without_read_compacted_the_earliest_is_the_logs_first_kept_entry(cluster: Cluster) -> None:
    trimmed = await trimmed_topic(cluster)
    consumer = await trimmed.service.subscribe(TOPIC, "plain", EXCLUSIVE, EARLIEST)
    consumer.flow(100_000)
    got = await receive_all(consumer, trimmed.topic.ledger.last_confirmed_position)
    assert Position(got[0].ledger_id, got[0].entry_id) == trimmed.first_kept
    assert len(got) == trimmed.topic.ledger.number_of_entries_total
    assert trimmed.topic.subscriptions["plain"].cursor.mark_delete_position == Position(
        trimmed.first_kept.ledger_id, trimmed.first_kept.entry_id - 1)
