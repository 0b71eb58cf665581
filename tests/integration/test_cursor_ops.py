"""Cursors moved and read by the broker core, over a real embedded metadata store, storage node and
storage client: reset (to a position, a publish time, an edge), skip, peek, subscriptions created,
listed and deleted, readers (non-durable subscriptions), the last message id, pull by offset with
long polling, message TTL and termination."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from herald.broker.core.consumer import Consumer, EndOfTopic
from herald.broker.core.cursor import InitialPosition, PublishTime
from herald.broker.core.managed_ledger import Position
from herald.broker.core.service import BrokerService
from herald.broker.core.topic import PersistentTopic
from herald.broker.settings import BrokerSettings
from herald.common.codec.entry import EntryMetadata, encode_entry, read_metadata
from herald.common.errors import (
    AlreadyExistsError,
    ConsumerClosedError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    PreconditionFailedError,
    TopicTerminatedError,
)
from herald.metadata.resources import partitioned_key

from tests.integration import test_broker_core
from tests.integration.test_broker_core import (
    DEADLINE,
    EARLIEST,
    EXCLUSIVE,
    SHARED,
    TOPIC,
    Cluster,
    eventually,
    receive,
    seqs,
)

cluster = test_broker_core.cluster  # the fixture: a metadata store, a storage node, brokers on demand

LATEST = InitialPosition.LATEST
CURSOR_KEY = "/cursors/public/default/persistent/orders/"


def timed_entry(sequence_id: int, publish_time: int, num_messages: int = 1, batched: bool = False,
                producer: str = "p") -> bytes:
    metadata = EntryMetadata(producer_name=producer, sequence_id=sequence_id,
                             highest_sequence_id=sequence_id + num_messages - 1, num_messages=num_messages,
                             publish_time=publish_time, batched=batched)
    return encode_entry(metadata, b"x" * max(10, 5 * num_messages))  # room for that many (5-byte) records


async def publish(service: BrokerService, count: int, first: int = 0, publish_times: list[int] | None = None,
                  topic: str = TOPIC) -> list[Position]:
    """Publish `count` single-message entries with sequence ids from `first` (publish times given
    or now); their positions."""
    producer, _ = await service.create_producer(topic, f"p{first}")
    now = int(time.time() * 1000)
    times = publish_times or [now] * count
    futures = [producer.topic.publish(producer, seq, seq, 1, timed_entry(seq, times[seq - first],
                                                                         producer=producer.name))
               for seq in range(first, first + count)]
    positions = [Position(*receipt) for receipt in await asyncio.gather(*futures)]
    await service.close_producer(producer)
    return positions


async def persistent(service: BrokerService, topic: str = TOPIC) -> PersistentTopic:
    loaded = await service.get_topic(topic)
    assert isinstance(loaded, PersistentTopic)
    return loaded


async def next_event(consumer: Consumer) -> object:
    return await asyncio.wait_for(consumer.next_event(), DEADLINE)


async def stored_mark_delete(cluster: Cluster, subscription: str) -> list[int]:
    stored = await cluster.store.get(CURSOR_KEY + subscription)
    assert stored is not None
    return list(json.loads(stored.value)["mark_delete"])


# ---- reset cursor ----

async def test_reset_to_a_position_disconnects_consumers_and_redelivers_from_there(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    positions = await publish(service, 6)
    consumer.flow(100)
    got = await receive(consumer, 6)
    consumer.ack([(d.ledger_id, d.entry_id) for d in got])
    await service.reset_cursor(TOPIC, "s", positions[2])
    assert consumer.closed and "reset" in consumer.close_reason
    with pytest.raises(ConsumerClosedError):
        await consumer.next_deliveries()
    again = await service.subscribe(TOPIC, "s", EXCLUSIVE)
    again.flow(100)
    assert seqs(await receive(again, 4)) == [2, 3, 4, 5]
    # Persisted at once: the stored mark-delete position is just before the target.
    assert await stored_mark_delete(cluster, "s") == [positions[1].ledger_id, positions[1].entry_id]


async def test_reset_by_publish_time_finds_the_first_entry_at_or_after_it(cluster: Cluster) -> None:
    settings = BrokerSettings(max_entries_per_ledger=3, min_ledger_rollover_seconds=0)
    service = await cluster.broker(settings)
    await service.create_subscription(TOPIC, "s", EARLIEST)
    await publish(service, 8, publish_times=[1000 * (i + 1) for i in range(8)])  # 1000 .. 8000, 3 ledgers
    topic = await persistent(service)
    for when, first_seq in ((2500, 2), (3000, 2), (1, 0), (8000, 7)):
        await service.reset_cursor(TOPIC, "s", PublishTime(when))
        (oldest,) = await service.peek_messages(TOPIC, "s", 1)
        assert read_metadata(oldest[1]).sequence_id == first_seq, when
    await service.reset_cursor(TOPIC, "s", PublishTime(9000))  # after every entry: the end
    assert topic.subscriptions["s"].backlog == 0
    with pytest.raises(InvalidArgumentError, match="publish time -5 is invalid"):
        await service.reset_cursor(TOPIC, "s", PublishTime(-5))


async def test_reset_to_the_edges_and_past_the_end(cluster: Cluster) -> None:
    service = await cluster.broker()
    await service.create_subscription(TOPIC, "s", LATEST)
    positions = await publish(service, 4)
    topic = await persistent(service)
    sub = topic.subscriptions["s"]
    assert sub.backlog == 4
    await service.reset_cursor(TOPIC, "s", LATEST)
    assert sub.backlog == 0
    await service.reset_cursor(TOPIC, "s", EARLIEST)
    assert sub.backlog == 4
    await service.reset_cursor(TOPIC, "s", Position(positions[-1].ledger_id, 1000))  # past the end: the end
    assert sub.backlog == 0
    await publish(service, 1, first=10)  # the next entry is not skipped
    assert sub.backlog == 1


async def test_reset_forgets_redelivery_counts_and_acks_above_the_target(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED, EARLIEST)
    await publish(service, 4)
    consumer.flow(100)
    got = await receive(consumer, 4)
    consumer.ack([(got[3].ledger_id, got[3].entry_id)])
    consumer.redeliver()
    redelivered = await receive(consumer, 3)
    assert [d.redelivery_count for d in redelivered] == [1, 1, 1]
    await service.reset_cursor(TOPIC, "s", EARLIEST)
    again = await service.subscribe(TOPIC, "s", SHARED)
    again.flow(100)
    fresh = await receive(again, 4)
    assert seqs(fresh) == [0, 1, 2, 3] and [d.redelivery_count for d in fresh] == [0, 0, 0, 0]


async def test_reset_of_an_unknown_subscription_is_not_found(cluster: Cluster) -> None:
    service = await cluster.broker()
    await service.topics.get_topic(TOPIC)  # made as a producer makes it: an admin reset never does (issue 22)
    with pytest.raises(NotFoundError, match="subscription 'nope' does not exist"):
        await service.reset_cursor(TOPIC, "nope", EARLIEST)


# ---- skip and peek ----

async def test_skip_acknowledges_the_oldest_and_is_persisted(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(cursor_flush_interval=3600))
    await service.create_subscription(TOPIC, "s", LATEST)
    positions = await publish(service, 5)
    assert await service.skip_messages(TOPIC, "s", 2) == 2
    assert await stored_mark_delete(cluster, "s") == list(positions[1])
    assert await service.skip_messages(TOPIC, "s", None) == 3
    assert await stored_mark_delete(cluster, "s") == list(positions[4])
    assert await service.skip_messages(TOPIC, "s", 10) == 0
    with pytest.raises(InvalidArgumentError, match="cannot skip -1 messages"):
        await service.skip_messages(TOPIC, "s", -1)
    with pytest.raises(NotFoundError):
        await service.skip_messages(TOPIC, "missing", 1)


async def test_peek_shows_the_oldest_unacknowledged_without_dispatching(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await service.subscribe(TOPIC, "s", SHARED, EARLIEST)
    positions = await publish(service, 5)
    consumer.flow(2)
    got = await receive(consumer, 2)
    consumer.ack([(got[0].ledger_id, got[0].entry_id)])
    consumer.redeliver([(got[1].ledger_id, got[1].entry_id)])  # no permits: it waits
    peeked = await service.peek_messages(TOPIC, "s", 3)
    assert [p for p, _, _ in peeked] == positions[1:4]
    assert [read_metadata(data).sequence_id for _, data, _ in peeked] == [1, 2, 3]
    assert [count for _, _, count in peeked] == [1, 0, 0]
    assert consumer.msg_out_counter == 2  # peeking dispatched nothing
    with pytest.raises(InvalidArgumentError, match="cannot peek 0 messages"):
        await service.peek_messages(TOPIC, "s", 0)


# ---- creating, listing and deleting subscriptions ----

async def test_create_subscription_at_a_position_or_an_edge(cluster: Cluster) -> None:
    service = await cluster.broker()
    positions = await publish(service, 4)
    await service.create_subscription(TOPIC, "at-2", positions[2])
    await service.create_subscription(TOPIC, "early", EARLIEST)
    await service.create_subscription(TOPIC, "late")
    topic = await persistent(service)
    assert [topic.subscriptions[s].backlog for s in ("at-2", "early", "late")] == [2, 4, 0]
    assert await service.list_subscriptions(TOPIC) == ["at-2", "early", "late"]
    assert await stored_mark_delete(cluster, "at-2") == list(positions[1])
    with pytest.raises(AlreadyExistsError, match="subscription 'early' already exists"):
        await service.create_subscription(TOPIC, "early", LATEST)


async def test_unsubscribe_is_refused_while_consumers_are_connected_unless_forced(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await service.subscribe(TOPIC, "s", SHARED)
    second = await service.subscribe(TOPIC, "s", SHARED)
    with pytest.raises(PreconditionFailedError, match="has 2 other consumer"):
        await service.unsubscribe(TOPIC, "s")
    with pytest.raises(PreconditionFailedError, match="has 1 other consumer"):
        await service.unsubscribe(TOPIC, "s", requester=first)
    await second.close()
    await service.unsubscribe(TOPIC, "s", requester=first)  # the only one left may unsubscribe
    assert first.closed and await cluster.store.get(CURSOR_KEY + "s") is None
    assert await service.list_subscriptions(TOPIC) == []
    third = await service.subscribe(TOPIC, "t", EXCLUSIVE)
    await service.unsubscribe(TOPIC, "t", force=True)
    assert third.closed and await service.list_subscriptions(TOPIC) == []
    with pytest.raises(NotFoundError, match="subscription 't' does not exist"):
        await service.unsubscribe(TOPIC, "t")


# ---- readers: non-durable subscriptions ----

async def reader(service: BrokerService, name: str, permits: int = 100, **options: object) -> Consumer:
    consumer = await service.subscribe(TOPIC, name, EXCLUSIVE, non_durable=True, **options)  # type: ignore[arg-type]
    if permits:
        consumer.flow(permits)
    return consumer


async def test_readers_start_at_an_edge_or_a_position_inclusive_or_not(cluster: Cluster) -> None:
    service = await cluster.broker()
    positions = await publish(service, 4)
    earliest = await reader(service, "r1", initial_position=EARLIEST)
    latest = await reader(service, "r2", initial_position=LATEST)
    inclusive = await reader(service, "r3", start_position=positions[1], start_inclusive=True)
    exclusive = await reader(service, "r4", start_position=positions[1])
    beyond = await reader(service, "r5", start_position=Position(positions[-1].ledger_id + 5, 0))
    assert seqs(await receive(earliest, 4)) == [0, 1, 2, 3]
    assert seqs(await receive(inclusive, 3)) == [1, 2, 3]
    assert seqs(await receive(exclusive, 2)) == [2, 3]
    await publish(service, 1, first=4)
    for consumer in (earliest, latest, inclusive, exclusive, beyond):
        assert seqs(await receive(consumer, 1)) == [4]
    assert await cluster.store.list(CURSOR_KEY) == {}  # never persisted


async def test_reader_subscription_goes_with_its_last_consumer(cluster: Cluster) -> None:
    service = await cluster.broker()
    topic = await persistent(service)
    first = await reader(service, "r", initial_position=EARLIEST)
    assert not topic.subscriptions["r"].durable
    await first.close()
    await eventually(lambda: _absent(topic, "r"), "the reader's subscription to go")
    with pytest.raises(NotFoundError):
        await service.skip_messages(TOPIC, "r", 1)


async def _absent(topic: PersistentTopic, name: str) -> bool:
    return name not in topic.subscriptions


async def test_readers_and_durable_subscriptions_do_not_share_names(cluster: Cluster) -> None:
    service = await cluster.broker()
    await service.create_subscription(TOPIC, "durable")
    with pytest.raises(NotAllowedError, match=r"'durable' .* is durable: a reader .* needs a name of its own"):
        await reader(service, "durable")
    await reader(service, "reading")
    with pytest.raises(NotAllowedError, match=r"'reading' .* is a reader's .* needs a name of its own"):
        await service.subscribe(TOPIC, "reading", EXCLUSIVE)


async def test_a_reader_does_not_hold_back_retention(cluster: Cluster) -> None:
    settings = BrokerSettings(max_entries_per_ledger=3, min_ledger_rollover_seconds=0, retention_time_seconds=0,
                              retention_size_bytes=0, retention_check_interval=3600)
    service = await cluster.broker(settings)
    await reader(service, "r", permits=0, initial_position=EARLIEST)  # it reads nothing: far behind
    await publish(service, 10)  # ledgers of 3, 3, 3 and 1 entries
    topic = await persistent(service)
    await topic.retention.trim()

    async def trimmed() -> bool:  # every full ledger goes, the reader's position notwithstanding
        return [info.entries for info in topic.ledger.ledgers] == [1]

    await eventually(trimmed, "the consumed ledgers to be deleted")
    late = await reader(service, "late", initial_position=EARLIEST)
    assert seqs(await receive(late, 1)) == [9]  # the first entry still kept


async def test_a_reset_reader_is_kept_for_its_reconnection(cluster: Cluster) -> None:
    service = await cluster.broker()
    positions = await publish(service, 5)
    first = await reader(service, "r", initial_position=LATEST)
    await service.reset_cursor(TOPIC, "r", positions[3])
    assert first.closed
    again = await reader(service, "r", initial_position=LATEST)  # finds the reset cursor
    assert seqs(await receive(again, 2)) == [3, 4]


# ---- last message id ----

async def test_last_message_id_names_the_last_entry_and_its_last_batch_index(cluster: Cluster) -> None:
    service = await cluster.broker()
    last, mark_delete = await service.get_last_message_id(TOPIC)
    assert (last.ledger_id, last.entry_id, last.partition, last.batch_index) == (-1, -1, -1, -1)
    assert mark_delete is None
    await service.create_subscription(TOPIC, "s", EARLIEST)
    producer, _ = await service.create_producer(TOPIC, "p")
    first = await producer.topic.publish(producer, 0, 0, 1, timed_entry(0, 1))
    last, mark_delete = await service.get_last_message_id(TOPIC, "s")
    assert (last.ledger_id, last.entry_id, last.batch_index) == (*first, -1)
    assert mark_delete == Position(first[0], first[1] - 1)
    second = await producer.topic.publish(producer, 1, 5, 5, timed_entry(1, 1, num_messages=5, batched=True))
    last, _ = await service.get_last_message_id(TOPIC)
    assert (last.ledger_id, last.entry_id, last.batch_index) == (*second, 4)
    partition = TOPIC + "-partition-3"
    last, _ = await service.get_last_message_id(partition)
    assert last.partition == 3
    with pytest.raises(NotFoundError, match="subscription 'nope' does not exist"):
        await service.get_last_message_id(TOPIC, "nope")


# ---- pull ----

async def test_pull_reads_from_a_position_and_says_where_to_continue(cluster: Cluster) -> None:
    settings = BrokerSettings(max_entries_per_ledger=3, min_ledger_rollover_seconds=0, retention_time_seconds=-1)
    service = await cluster.broker(settings)
    positions = await publish(service, 7)
    result = await service.pull(TOPIC, start=None, max_entries=4)
    assert [p for p, _ in result.entries] == positions[:4] and result.next == positions[4]
    assert not result.end_of_topic
    result = await service.pull(TOPIC, start=result.next)
    assert [p for p, _ in result.entries] == positions[4:]
    size = len(result.entries[0][1])
    result = await service.pull(TOPIC, start=positions[1], max_bytes=2 * size)
    assert [p for p, _ in result.entries] == positions[1:3]
    result = await service.pull(TOPIC, start=positions[1], max_bytes=1)  # at least one entry
    assert [p for p, _ in result.entries] == [positions[1]]
    with pytest.raises(InvalidArgumentError, match="must not be negative"):
        await service.pull(TOPIC, max_entries=-1)


async def test_pull_waits_for_the_next_entry_up_to_its_timeout(cluster: Cluster) -> None:
    service = await cluster.broker()
    (position,) = await publish(service, 1)
    after = Position(position.ledger_id, position.entry_id + 1)
    waiting = asyncio.ensure_future(service.pull(TOPIC, start=after, max_wait=DEADLINE))
    # A pull started after it at the same place waits out its short timeout and comes back
    # empty: the first, started before on this loop, is still waiting.
    empty = await service.pull(TOPIC, start=after, max_wait=0.05)
    assert empty.entries == [] and empty.next == after and not empty.end_of_topic
    assert not waiting.done()
    (added,) = await publish(service, 1, first=1)
    result = await asyncio.wait_for(waiting, DEADLINE)
    assert [p for p, _ in result.entries] == [added]


async def test_pull_checks_the_queue_and_the_subscription(cluster: Cluster) -> None:
    service = await cluster.broker()
    await publish(service, 1)
    with pytest.raises(InvalidArgumentError, match=r"queue id out of range: .* has 1 queue .* asked for queue 1"):
        await service.pull(TOPIC, queue=1)
    assert len((await service.pull(TOPIC, queue=0)).entries) == 1
    await cluster.store.put(partitioned_key("persistent://public/default/parts"), b'{"partitions": 2}')
    with pytest.raises(InvalidArgumentError, match=r"queue id out of range: .* has 2 queues"):
        await service.pull("persistent://public/default/parts", queue=2)
    await publish(service, 1, topic="persistent://public/default/parts-partition-1")
    assert len((await service.pull("persistent://public/default/parts", queue=1)).entries) == 1
    with pytest.raises(NotFoundError, match="subscription 'group' does not exist"):
        await service.pull(TOPIC, subscription="group")


# ---- message TTL ----

async def test_expired_entries_are_acknowledged_on_durable_subscriptions(cluster: Cluster) -> None:
    service = await cluster.broker()
    await service.create_subscription(TOPIC, "s", EARLIEST)
    await service.create_subscription(TOPIC, "other", EARLIEST)
    now = int(time.time() * 1000)
    positions = await publish(service, 5, publish_times=[now - 60_000] * 3 + [now] * 2)
    topic = await persistent(service)
    topic.subscriptions["other"].cursor.ack([positions[1]])
    keeper = await reader(service, "r", initial_position=EARLIEST)
    assert await topic.expiry.expire() == 0  # no TTL: nothing expires
    topic.message_ttl_seconds = 30
    assert await topic.expiry.expire() == 3 + 2
    for name in ("s", "other"):
        sub = topic.subscriptions[name]
        assert sub.cursor.mark_delete_position == positions[2] and sub.backlog == 2
    assert topic.subscriptions["s"].msg_expired_counter == 3
    assert topic.subscriptions["other"].msg_expired_counter == 2  # 1:1 was acked already
    assert topic.subscriptions["r"].cursor.mark_delete_position < positions[0]  # readers keep theirs
    assert seqs(await receive(keeper, 5)) == [0, 1, 2, 3, 4]


async def test_expiry_runs_every_check_interval(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(message_ttl_seconds=1, message_expiry_check_interval=0.05))
    await service.create_subscription(TOPIC, "s", EARLIEST)
    await publish(service, 3, publish_times=[1, 2, 3])  # published long ago
    topic = await persistent(service)

    async def expired() -> bool:
        return topic.subscriptions["s"].backlog == 0

    await eventually(expired, "the old entries to expire")
    assert topic.subscriptions["s"].msg_expired_counter == 3


# ---- termination ----

async def test_terminate_refuses_producers_and_tells_consumers_once_everything_is_acked(cluster: Cluster) -> None:
    service = await cluster.broker()
    done = await service.subscribe(TOPIC, "done", EXCLUSIVE)
    behind = await service.subscribe(TOPIC, "behind", EXCLUSIVE)
    producer, _ = await service.create_producer(TOPIC, "p")
    positions = await publish(service, 3, first=10)
    done.flow(100)
    done.ack([(d.ledger_id, d.entry_id) for d in await receive(done, 3)])
    await eventually(lambda: _backlog_is(service, "done", 0), "the acks")
    last = await service.terminate(TOPIC)
    assert last == positions[-1]
    topic = await persistent(service)
    assert topic.terminated
    assert isinstance(await next_event(done), EndOfTopic)
    with pytest.raises(TopicTerminatedError, match="was terminated"):
        await producer.topic.publish(producer, 0, 0, 1, timed_entry(0, 1))
    with pytest.raises(TopicTerminatedError, match="was terminated"):
        await service.create_producer(TOPIC, "late")
    behind.flow(100)
    got = await receive(behind, 3)
    behind.ack([(got[0].ledger_id, got[0].entry_id)])
    behind.ack([(d.ledger_id, d.entry_id) for d in got[1:]])
    assert isinstance(await next_event(behind), EndOfTopic)
    result = await service.pull(TOPIC, start=positions[-1])
    assert len(result.entries) == 1 and result.end_of_topic
    assert (await service.pull(TOPIC, start=result.next, max_wait=DEADLINE)).end_of_topic  # no waiting
    assert await service.terminate(TOPIC) == last  # again: the same answer


async def _backlog_is(service: BrokerService, subscription: str, backlog: int) -> bool:
    return (await persistent(service)).subscriptions[subscription].backlog == backlog


async def test_termination_survives_unloading(cluster: Cluster) -> None:
    service = await cluster.broker()
    await publish(service, 2)
    last = await service.terminate(TOPIC)
    await service.unload_topic(TOPIC)
    again = await cluster.broker()  # another broker loads it from the metadata store
    topic = await persistent(again)
    assert topic.terminated and topic.ledger.last_confirmed_position == last
    with pytest.raises(TopicTerminatedError):
        await again.create_producer(TOPIC, "p")
    consumer = await again.subscribe(TOPIC, "late", EXCLUSIVE)  # Latest: nothing left to read
    assert isinstance(await next_event(consumer), EndOfTopic)


async def test_an_empty_topic_can_be_terminated(cluster: Cluster) -> None:
    service = await cluster.broker()
    last = await service.terminate(TOPIC)
    assert last.entry_id == -1
    assert (await service.pull(TOPIC)).end_of_topic
    consumer = await service.subscribe(TOPIC, "s", EXCLUSIVE, EARLIEST)
    assert isinstance(await next_event(consumer), EndOfTopic)
