"""Dead letters through a real `herald standalone`, over the wire: entries whose redelivery count
reached the subscription's dead-letter policy stop being dispatched and are lent to a dlq-worker's
Letters stream (DeadLetterService, served on the broker's port) within its flow permits; moved
acknowledges them, failed or a stream's end lends them out again, a restart hands them out again
once the count is reached anew; bad requests and bad policies are refused with clear errors."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2, deadletter_pb2

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_topic
from tests.wire import WireClient, WireConsumer, WireError, WireLetters, open_letters, values_of


@pytest.fixture
async def new_topic(wire: WireClient) -> AsyncIterator[Callable[[], str]]:
    """Unique topic names; the topics are deleted after the test, which withdraws their letters
    from the broker-wide queue (the next test's Letters streams must not get them)."""
    made: list[str] = []

    def make() -> str:
        made.append(unique_topic("dead"))
        return made[-1]

    yield make
    for topic in made:
        admin = await wire.admin(topic)
        try:
            await admin.DeleteTopic(admin_pb2.DeleteTopicRequest(topic=topic, force=True))
        except Exception:  # never created, or already gone
            pass


def policy(max_redeliver_count: int, dead_letter_topic: str = "", retry_letter_topic: str = "",
           ) -> broker_pb2.DeadLetterPolicy:
    return broker_pb2.DeadLetterPolicy(max_redeliver_count=max_redeliver_count,
                                       dead_letter_topic=dead_letter_topic, retry_letter_topic=retry_letter_topic)


async def publish(wire: WireClient, topic: str, *values: bytes) -> list[common_pb2.Position]:
    producer = await wire.producer(topic)
    positions = []
    for value in values:
        reply = await producer.send(value)
        assert reply.HasField("receipt"), reply
        positions.append(common_pb2.Position(ledger_id=reply.receipt.ledger_id, entry_id=reply.receipt.entry_id))
    await producer.close()
    return positions


async def consume(wire: WireClient, topic: str, max_redeliver_count: int, sub_type: int = broker_pb2.SHARED,
                  **options: object) -> WireConsumer:
    consumer = await wire.consumer(topic, "s", type=sub_type, initial_position=broker_pb2.EARLIEST,
                                   dead_letter_policy=policy(max_redeliver_count), **options)
    await consumer.flow(100)
    return consumer


async def letters(wire: WireClient, topic: str, permits: int = 0) -> WireLetters:
    """A Letters stream to the topic's broker, with `permits` if given."""
    stream = await open_letters(wire, await wire.owner(topic))
    if permits:
        await stream.flow(permits)
    return stream


async def nack_until_dead(consumer: WireConsumer, entries: list[broker_pb2.DeliveredEntry], count: int) -> None:
    """Nack the entries until their redelivery count reaches `count` (they come back while below)."""
    for expected in range(1, count):
        await consumer.nack(*entries, delay_ms=0)
        entries = await consumer.receive(len(entries))
        assert {e.redelivery_count for e in entries} == {expected}, entries
    await consumer.nack(*entries, delay_ms=0)


async def subscription_stats(wire: WireClient, topic: str) -> admin_pb2.SubscriptionStats:
    admin = await wire.admin(topic)
    stats = await admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic))
    (found,) = [s for s in stats.subscriptions if s.name == "s"]
    return found


async def dead_and_backlog(wire: WireClient, topic: str) -> tuple[int, int]:
    stats = await subscription_stats(wire, topic)
    return stats.dead_letters, stats.backlog_entries


async def stats_become(wire: WireClient, topic: str, dead: int, backlog: int) -> None:
    async def reached() -> bool:
        return await dead_and_backlog(wire, topic) == (dead, backlog)

    await eventually(reached, f"{dead} dead letters and a backlog of {backlog} on {topic}")


async def nothing_before_a_marker(wire: WireClient, consumer: WireConsumer, topic: str) -> None:
    """Nothing is (re)delivered to the consumer before a marker published once the broker has
    handled its requests: redeliveries go out before newer entries, so whatever the requests set
    to come again would come first. The marker is acknowledged."""
    await consumer.handled()
    (marker,) = await publish(wire, topic, b"marker")
    (first,) = await consumer.receive(1)
    assert (at(first), values_of(first)) == (at(marker), [b"marker"])
    assert await consumer.sent_so_far() == []
    await consumer.ack(first)


def where(letter: deadletter_pb2.DeadLetter) -> tuple[int, int]:
    return letter.position.ledger_id, letter.position.entry_id


def at(entry: broker_pb2.DeliveredEntry | common_pb2.Position) -> tuple[int, int]:
    return entry.ledger_id, entry.entry_id


# ---- an entry reaching the limit becomes a letter ----

@pytest.mark.parametrize("sub_type", [broker_pb2.SHARED, broker_pb2.KEY_SHARED], ids=["shared", "key_shared"])
async def test_an_entry_that_reached_the_limit_is_no_longer_dispatched_but_lent_as_a_dead_letter(
    wire: WireClient, new_topic: Callable[[], str], sub_type: int,
) -> None:
    topic = new_topic()
    consumer = await consume(wire, topic, max_redeliver_count=2, sub_type=sub_type)
    await publish(wire, topic, b"poison", b"fine")
    poison, fine = await consumer.receive(2)
    await consumer.ack(fine)
    await nack_until_dead(consumer, [poison], 2)
    await stats_become(wire, topic, dead=1, backlog=1)
    assert await consumer.sent_so_far() == []  # and "after" below comes first: no redelivery was waiting
    worker = await letters(wire, topic, permits=10)
    (letter,) = await worker.receive(1)
    assert (letter.topic, letter.subscription, where(letter)) == (topic, "s", at(poison))
    assert (letter.data, letter.redelivery_count) == (poison.data, 2)
    assert (letter.dead_letter_topic, letter.retry_letter_topic) == (f"{topic}-s-DLQ", f"{topic}-s-RETRY")
    await publish(wire, topic, b"after")  # the subscription goes on meanwhile
    assert values_of((await consumer.receive(1))[0]) == [b"after"]


async def test_a_dead_letter_stays_unacknowledged_until_moved_then_is_acknowledged(
    wire: WireClient, new_topic: Callable[[], str],
) -> None:
    topic = new_topic()
    consumer = await consume(wire, topic, max_redeliver_count=1, sub_type=broker_pb2.EXCLUSIVE)
    (sent,) = await publish(wire, topic, b"poison")
    (poison,) = await consumer.receive(1)
    await consumer.nack(poison, delay_ms=0)  # Exclusive: everything unacknowledged comes back, counted
    worker = await letters(wire, topic, permits=10)
    (letter,) = await worker.receive(1)
    assert (where(letter), letter.redelivery_count) == (at(sent), 1)
    await consumer.redeliver()  # still not dispatched, however often asked
    await nothing_before_a_marker(wire, consumer, topic)
    await stats_become(wire, topic, dead=1, backlog=1)  # the marker's ack taken, the letter still waits
    await worker.moved(letter.letter_id)
    await stats_become(wire, topic, dead=0, backlog=0)
    await consumer.redeliver()
    await nothing_before_a_marker(wire, consumer, topic)
    await stats_become(wire, topic, dead=0, backlog=0)


async def test_the_dead_letter_and_retry_topics_of_the_policy_are_given_with_the_letter(
    wire: WireClient, new_topic: Callable[[], str],
) -> None:
    topic = new_topic()
    consumer = await wire.consumer(topic, "s", type=broker_pb2.FAILOVER, initial_position=broker_pb2.EARLIEST,
                                   dead_letter_policy=policy(1, "orders-dlq", "other/place/orders-retry"))
    await consumer.flow(100)
    await publish(wire, topic, b"poison")
    (poison,) = await consumer.receive(1)
    await consumer.nack(poison, delay_ms=0)
    worker = await letters(wire, topic, permits=1)
    (letter,) = await worker.receive(1)
    assert (letter.dead_letter_topic, letter.retry_letter_topic) == (
        "persistent://public/default/orders-dlq", "persistent://other/place/orders-retry")
    await worker.moved(letter.letter_id)
    await stats_become(wire, topic, dead=0, backlog=0)



async def test_a_key_shared_consumer_joining_while_a_letter_waits_gets_its_keys_at_once(
    wire: WireClient, new_topic: Callable[[], str],
) -> None:
    # The letter is unacknowledged until a worker moves it, but no consumer holds it: a joining
    # consumer must not wait for it (there may be no dlq-worker running at all).
    topic = new_topic()
    first = await consume(wire, topic, max_redeliver_count=1, sub_type=broker_pb2.KEY_SHARED, consumer_name="first")
    await publish(wire, topic, b"poison")
    await nack_until_dead(first, await first.receive(1), 1)
    await stats_become(wire, topic, dead=1, backlog=1)
    second = await consume(wire, topic, max_redeliver_count=1, sub_type=broker_pb2.KEY_SHARED,
                           consumer_name="second")
    keys = [f"key-{i}" for i in range(20)]
    producer = await wire.producer(topic)
    for key in keys:
        await producer.send(key.encode(), key=key)
    got: dict[str, list[bytes]] = {"first": [], "second": []}
    deadline = time.monotonic() + 10
    while sum(map(len, got.values())) < len(keys) and time.monotonic() < deadline:
        for name, consumer in (("first", first), ("second", second)):
            entries = await consumer.receive(len(keys), timeout=0.05)
            await consumer.ack(*entries)
            got[name].extend(value for entry in entries for value in values_of(entry))
    assert sorted(got["first"] + got["second"]) == sorted(key.encode() for key in keys)
    assert got["first"] and got["second"]  # both consumers own some of the keys


# ---- failed, ended streams, restarts ----

async def test_a_failed_letter_is_handed_out_again(wire: WireClient, new_topic: Callable[[], str]) -> None:
    topic = new_topic()
    consumer = await consume(wire, topic, max_redeliver_count=1)
    await publish(wire, topic, b"poison")
    await nack_until_dead(consumer, await consumer.receive(1), 1)
    worker = await letters(wire, topic, permits=1)
    (letter,) = await worker.receive(1)
    await worker.failed(letter.letter_id, "the dead-letter topic refused it")
    assert await worker.lent_so_far() == []  # its one permit was used
    assert await dead_and_backlog(wire, topic) == (1, 1)
    await worker.flow(1)
    (again,) = await worker.receive(1)
    assert (again.letter_id, where(again), again.data) == (letter.letter_id, where(letter), letter.data)
    await worker.moved(again.letter_id)
    await stats_become(wire, topic, dead=0, backlog=0)


async def test_a_letter_acknowledged_another_way_is_no_longer_a_letter(
    wire: WireClient, new_topic: Callable[[], str],
) -> None:
    """A skip (or a reset past it, a cumulative ack, the message TTL) acknowledges the entry: no
    worker may publish it any more, and a worker that had it lent is told it is not its to move."""
    topic = new_topic()
    consumer = await consume(wire, topic, max_redeliver_count=1)
    await publish(wire, topic, b"poison-1", b"poison-2")
    await nack_until_dead(consumer, await consumer.receive(2), 1)
    await stats_become(wire, topic, dead=2, backlog=2)
    worker = await letters(wire, topic, permits=1)
    (lent,) = await worker.receive(1)  # the other one waits for a permit
    admin = await wire.admin(topic)
    skipped = await admin.SkipMessages(admin_pb2.SkipMessagesRequest(topic=topic, subscription="s", all=True))
    assert skipped.skipped == 2
    await stats_become(wire, topic, dead=0, backlog=0)
    await worker.moved(lent.letter_id)
    error = await worker.error()
    assert error.code == common_pb2.NOT_FOUND and f"dead letter {lent.letter_id} is not lent" in error.message
    await worker.flow(5)
    assert await worker.lent_so_far() == []  # the waiting one was withdrawn too
    assert await consumer.sent_so_far() == []


async def test_letters_outstanding_when_a_stream_ends_go_to_the_next_stream(
    wire: WireClient, new_topic: Callable[[], str],
) -> None:
    topic = new_topic()
    consumer = await consume(wire, topic, max_redeliver_count=1)
    await publish(wire, topic, b"poison-1", b"poison-2")
    await nack_until_dead(consumer, await consumer.receive(2), 1)
    first = await letters(wire, topic, permits=10)
    lent = await first.receive(2)
    second = await letters(wire, topic, permits=10)
    assert await second.lent_so_far() == []  # lent to the first stream while it lasts
    await first.stream.send(None)  # the worker ends its stream cleanly
    again = await second.receive(2)
    assert sorted(where(letter) for letter in again) == sorted(where(letter) for letter in lent)
    third = await letters(wire, topic, permits=10)
    await second.close()  # this one vanishes (cancelled)
    last = await third.receive(2)
    assert sorted(where(letter) for letter in last) == sorted(where(letter) for letter in lent)
    assert await dead_and_backlog(wire, topic) == (2, 2)
    for letter in last:
        await third.moved(letter.letter_id)
    await stats_become(wire, topic, dead=0, backlog=0)


async def test_a_letter_not_moved_before_a_restart_comes_back_once_the_limit_is_reached_again(
    standalone: StandaloneProcess,
) -> None:
    # Redelivery counts live in the broker's memory (as in Pulsar): after a restart the entry,
    # still unacknowledged, is delivered again from count 0 and becomes a letter at the limit again.
    topic = "persistent://public/default/dead-restart"
    async with WireClient(standalone.port) as wire:
        consumer = await consume(wire, topic, max_redeliver_count=2)
        (sent,) = await publish(wire, topic, b"poison")
        await nack_until_dead(consumer, await consumer.receive(1), 2)
        worker = await letters(wire, topic, permits=1)
        (letter,) = await worker.receive(1)
        assert where(letter) == at(sent)
    standalone.restart()
    async with WireClient(standalone.port) as wire:
        assert await dead_and_backlog(wire, topic) == (0, 1)  # unacknowledged, not a letter yet
        consumer = await consume(wire, topic, max_redeliver_count=2)
        (poison,) = await consumer.receive(1)
        assert (at(poison), poison.redelivery_count, poison.data) == (at(sent), 0, letter.data)
        await nack_until_dead(consumer, [poison], 2)
        worker = await letters(wire, topic, permits=1)
        (again,) = await worker.receive(1)
        assert (where(again), again.redelivery_count) == (at(sent), 2)
        await worker.moved(again.letter_id)
        await stats_become(wire, topic, dead=0, backlog=0)


# ---- permits and bad requests ----

async def test_no_letters_are_sent_beyond_the_flow_permits(wire: WireClient, new_topic: Callable[[], str]) -> None:
    topic = new_topic()
    consumer = await consume(wire, topic, max_redeliver_count=1)
    await publish(wire, topic, b"p1", b"p2", b"p3")
    await nack_until_dead(consumer, await consumer.receive(3), 1)
    await stats_become(wire, topic, dead=3, backlog=3)
    worker = await letters(wire, topic)
    assert await worker.lent_so_far() == []  # no permits yet
    await worker.flow(2)
    assert len(await worker.receive(2)) == 2
    assert await worker.lent_so_far() == []
    await worker.flow(1)
    assert len(await worker.receive(1)) == 1
    assert await worker.lent_so_far() == []


async def test_bad_letter_requests_get_a_clear_error_and_change_nothing(
    wire: WireClient, new_topic: Callable[[], str],
) -> None:
    topic = new_topic()
    consumer = await consume(wire, topic, max_redeliver_count=1)
    await publish(wire, topic, b"p1", b"p2")
    await nack_until_dead(consumer, await consumer.receive(2), 1)
    await stats_become(wire, topic, dead=2, backlog=2)
    worker = await letters(wire, topic)
    # Reports before any flow, about letters never lent to this stream.
    await worker.moved(999_999)
    error = await worker.error()
    assert error.code == common_pb2.NOT_FOUND and "dead letter 999999 is not lent to this worker" in error.message
    await worker.failed(999_999, "whatever")
    assert (await worker.error()).code == common_pb2.NOT_FOUND
    await worker.flow(-5)
    error = await worker.error()
    assert error.code == common_pb2.INVALID_ARGUMENT and "permits must not be negative, got -5" in error.message
    await worker.stream.send(deadletter_pb2.DeadLetterRequest())
    error = await worker.error()
    assert error.code == common_pb2.INVALID_ARGUMENT and "needs a command" in error.message
    assert await worker.lent_so_far() == []  # the bad flow added no permits (nor took any)
    await worker.flow(1)
    (letter,) = await worker.receive(1)
    assert await worker.lent_so_far() == []
    # Another stream cannot report a letter lent to this one.
    other = await letters(wire, topic)
    await other.moved(letter.letter_id)
    assert (await other.error()).code == common_pb2.NOT_FOUND
    assert await dead_and_backlog(wire, topic) == (2, 2)
    # Reported twice: the second report is refused.
    await worker.moved(letter.letter_id)
    await stats_become(wire, topic, dead=1, backlog=1)
    await worker.moved(letter.letter_id)
    assert (await worker.error()).code == common_pb2.NOT_FOUND
    await worker.flow(1)  # the stream still works after its errors
    (last,) = await worker.receive(1)
    assert where(last) != where(letter)
    await worker.moved(last.letter_id)
    await stats_become(wire, topic, dead=0, backlog=0)


# ---- policies refused at subscribe ----

@pytest.mark.parametrize(("bad", "words"), [
    (policy(-1), "max_redeliver_count must be positive"),
    (policy(3, dead_letter_topic="bad topic"), "'bad topic' is invalid"),
    (policy(3, retry_letter_topic="a/b/c/d"), "'a/b/c/d' is invalid"),
], ids=["negative-count", "bad-dead-letter-topic", "bad-retry-topic"])
async def test_an_invalid_dead_letter_policy_is_refused_at_subscribe(
    wire: WireClient, new_topic: Callable[[], str], bad: broker_pb2.DeadLetterPolicy, words: str,
) -> None:
    topic = new_topic()
    await publish(wire, topic, b"a")
    with pytest.raises(WireError) as refused:
        await wire.consumer(topic, "s", dead_letter_policy=bad)
    assert refused.value.code == common_pb2.INVALID_ARGUMENT
    assert "dead-letter policy" in str(refused.value) and words in str(refused.value)
    admin = await wire.admin(topic)
    listed = await admin.ListSubscriptions(admin_pb2.TopicRequest(topic=topic))
    assert "s" not in listed.subscriptions
