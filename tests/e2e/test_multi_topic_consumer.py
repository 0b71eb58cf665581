"""The multi-topic consumer against a real `herald standalone`: a partitioned topic or a list of
topics (in different namespaces) read through one subscription; messages naming their partition;
acks, cumulative acks, nacks and redelivery routed to the partition a message came from; the
receiver queue split across partitions and the shared queue's pause-at-full / resume-at-half;
seek (by time and to the ends; by message id refused), pause / resume, unsubscribe, last message
ids, the end of the topic, stats, batch receive, listeners, Failover events with partition
indexes, partitions added while subscribed; reconsume_later through the retry and dead letter
topics; every error path; and the blocking facade over it."""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from herald.client import (
    AsyncClient,
    AsyncConsumer,
    BatchReceivePolicy,
    Client,
    ConsumerClosedError,
    ConsumerEventListener,
    ConsumerInterceptor,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    InvalidArgumentError,
    Message,
    MessageId,
    NotAllowedError,
    StringSchema,
)
from herald.client.admin import AdminClient
from herald.client.multi_topic_consumer import MultiTopicConsumer
from herald.client.retry_letters import DELAY_TIME, ORIGIN_MESSAGE_ID, REAL_TOPIC, RECONSUME_TIMES
from herald.client.topic_consumer import TopicConsumer
from herald.common.errors import NotFoundError, PreconditionFailedError

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name, unique_topic

EARLIEST = InitialPosition.Earliest
SHARED = ConsumerType.Shared


async def partitioned(admin: AdminClient, partitions: int) -> str:
    topic = unique_topic("multi")
    await admin.create_topic(topic, partitions=partitions)
    return topic


async def produce(client: AsyncClient, topic: str, count: int, prefix: bytes = b"m") -> list[MessageId]:
    """`count` messages, unbatched and without keys: round robin over a partitioned topic's partitions."""
    producer = await client.create_producer(topic, batching_enabled=False)
    ids = [await producer.send(prefix + b"%d" % i) for i in range(count)]
    await producer.close()
    return ids


async def drain(consumer: AsyncConsumer[Any], count: int, wait: float = 10.0) -> list[Message[Any]]:
    received: list[Message[Any]] = []
    for _ in range(count):
        message = await consumer.receive(timeout=wait)
        assert message is not None, f"only {len(received)} of {count} messages arrived"
        received.append(message)
    return received


def values(messages: Sequence[Message[Any]]) -> list[bytes]:
    return [message.data() for message in messages]


def multi(consumer: AsyncConsumer[Any]) -> MultiTopicConsumer[Any]:
    assert isinstance(consumer, MultiTopicConsumer)
    return consumer


# ---- what it reads ----

async def test_a_partitioned_topic_is_read_from_every_partition_with_messages_naming_theirs(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 3)
    consumer = multi(await client.subscribe(topic, "s", initial_position=EARLIEST))
    assert consumer.topic == topic
    assert [member.topic for member in consumer.partitions] == [f"{topic}-partition-{i}" for i in range(3)]
    assert len({member.consumer_name for member in consumer.partitions} | {consumer.consumer_name}) == 1
    sent = await produce(client, topic, 9)
    received = await drain(consumer, 9)
    assert sorted(values(received)) == sorted(b"m%d" % i for i in range(9))
    for message in received:
        assert message.topic == f"{topic}-partition-{message.message_id.partition}"
    assert {message.message_id for message in received} == set(sent)  # ids carry the partition, as sent
    assert await consumer.receive(timeout=0.2) is None


async def test_a_one_partition_topic_is_consumed_as_partitioned(client: AsyncClient, admin: AdminClient) -> None:
    topic = await partitioned(admin, 1)
    consumer = multi(await client.subscribe(topic, "s", initial_position=EARLIEST))
    await produce(client, topic, 2)
    assert [m.message_id.partition for m in await drain(consumer, 2)] == [0, 0]


async def test_a_list_of_topics_in_different_namespaces_is_read_as_one(
    client: AsyncClient, admin: AdminClient,
) -> None:
    namespace = f"public/{unique_name('other')}"
    await admin.create_namespace(namespace)
    plain, elsewhere, parted = unique_topic("multi"), unique_topic("multi", namespace), await partitioned(admin, 2)
    consumer = multi(await client.subscribe([plain, elsewhere, parted, plain], "s", initial_position=EARLIEST))
    assert consumer.topic == f"{plain},{elsewhere},{parted}"  # duplicates once
    assert len(consumer.partitions) == 4
    await produce(client, plain, 2, b"plain")
    await produce(client, elsewhere, 2, b"else")
    await produce(client, parted, 2, b"parted")
    received = await drain(consumer, 6)
    assert Counter(message.topic for message in received) == Counter(
        {plain: 2, elsewhere: 2, f"{parted}-partition-0": 1, f"{parted}-partition-1": 1})
    assert {m.message_id.partition for m in received if m.topic in (plain, elsewhere)} == {-1}
    assert await consumer.receive(timeout=0.2) is None


async def test_a_list_of_one_topic_is_a_plain_topic_consumer(client: AsyncClient) -> None:
    assert isinstance(await client.subscribe([unique_topic("multi")], "s"), TopicConsumer)


# ---- acknowledging ----

async def test_acks_by_message_or_id_and_cumulative_acks_go_to_the_partition_they_came_from(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    second = unique_topic("multi")
    names = [topic, second]
    consumer = await client.subscribe(names, "s", initial_position=EARLIEST, ack_group_time=0)
    await produce(client, topic, 6)
    await produce(client, second, 3, b"plain")
    received = await drain(consumer, 9)
    by_topic: dict[str, list[Message[Any]]] = {}
    for message in received:
        by_topic.setdefault(message.topic, []).append(message)
    first, other = by_topic[f"{topic}-partition-0"], by_topic[f"{topic}-partition-1"]
    consumer.acknowledge_cumulative(first[1])  # first[0] and first[1]; first[2] stays
    consumer.acknowledge(other[0].message_id)  # by id: routed by its ledger
    consumer.acknowledge(other[2])
    for message in by_topic[second][:2]:
        consumer.acknowledge(message.message_id)
    await consumer.close()
    again = await client.subscribe(names, "s", initial_position=EARLIEST)
    left = await drain(again, 3)
    assert sorted(values(left)) == sorted(values([first[2], other[1], by_topic[second][2]]))
    assert await again.receive(timeout=0.2) is None


async def test_negative_acks_and_redelivery_requests_reach_the_partition_of_the_message(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 3)
    consumer = await client.subscribe(topic, "s", SHARED, initial_position=EARLIEST,
                                      negative_ack_redelivery_delay=0, ack_group_time=0)
    await produce(client, topic, 6)
    received = await drain(consumer, 6)
    nacked = received[4]
    for message in received:
        if message is not nacked:
            consumer.acknowledge(message)
    consumer.negative_acknowledge(nacked)
    (back,) = await drain(consumer, 1)
    assert (back.message_id, back.data(), back.redelivery_count) == (nacked.message_id, nacked.data(), 1)
    consumer.redeliver_unacknowledged_messages()
    (again,) = await drain(consumer, 1)
    assert again.message_id == nacked.message_id
    consumer.acknowledge(again)
    assert await consumer.receive(timeout=0.2) is None


async def test_an_exclusive_negative_ack_brings_back_only_what_its_partition_left_unacknowledged(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, negative_ack_redelivery_delay=0,
                                      ack_group_time=0)
    await produce(client, topic, 8)
    received = await drain(consumer, 8)
    zero = [m for m in received if m.message_id.partition == 0]
    for message in received:
        if message is not zero[1]:
            consumer.acknowledge(message)
    consumer.negative_acknowledge(zero[1])
    (back,) = await drain(consumer, 1)
    assert back.message_id == zero[1].message_id
    consumer.acknowledge(back)
    assert await consumer.receive(timeout=0.2) is None


async def test_an_id_from_no_message_received_cannot_be_routed(client: AsyncClient, admin: AdminClient) -> None:
    consumer = await client.subscribe([await partitioned(admin, 2), unique_topic("multi")], "s")
    with pytest.raises(InvalidArgumentError, match="is not from a message this consumer received"):
        consumer.acknowledge(MessageId(10**9, 1, -1, -1))
    with pytest.raises(InvalidArgumentError, match="takes a Message or MessageId"):
        consumer.acknowledge("1:2")  # type: ignore[arg-type]
    two_topics = await client.subscribe([unique_topic("multi"), unique_topic("multi")], "s", SHARED)
    with pytest.raises(NotAllowedError, match="cumulative acknowledgement is not allowed"):
        two_topics.acknowledge_cumulative(MessageId(1, 1))


# ---- the receiver queues ----

async def test_each_partition_gets_its_share_of_the_total_receiver_queue(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 4)
    capped = multi(await client.subscribe(topic, "a", receiver_queue_size=100,
                                          max_total_receiver_queue_size_across_partitions=200))
    assert [m._config.receiver_queue_size for m in capped.partitions] == [50] * 4  # type: ignore[attr-defined]
    uncapped = multi(await client.subscribe(topic, "b", receiver_queue_size=30))
    assert [m._config.receiver_queue_size for m in uncapped.partitions] == [30] * 4  # type: ignore[attr-defined]


async def test_members_hold_back_while_the_shared_queue_is_full_and_move_again_at_half(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 4)
    await produce(client, topic, 100)
    consumer = multi(await client.subscribe(topic, "s", initial_position=EARLIEST, receiver_queue_size=10,
                                            max_total_receiver_queue_size_across_partitions=20))
    members = consumer.partitions  # 5 each
    queued: Any = lambda: (len(consumer._queue), [len(m._queue) for m in members])  # noqa: E731

    # Full: the shared queue holds 10, each partition up to its own 5 more, waiting for room.
    await eventually(lambda: queued()[0] == 10 and all(m in consumer._blocked for m in members),
                     "the shared queue full and every partition waiting")
    held = queued()[1]
    assert all(0 < count <= 5 for count in held)
    for _ in range(4):
        await consumer.receive()
    assert queued() == (6, held)  # more than half full: the partitions still wait
    await consumer.receive()  # half: waiting partitions move theirs, up to the room there is
    shared, after = queued()
    assert shared == 5 + sum(held) - sum(after) and shared > 5
    assert consumer.stats().queue_size == shared + sum(after)
    rest = await drain(consumer, 95)
    assert sorted(values(rest)) == sorted(set(values(rest)))  # nothing twice
    assert len(rest) == 95 and await consumer.receive(timeout=0.2) is None


# ---- moving, pausing, leaving ----

async def test_seek_by_time_or_to_the_ends_moves_every_partition_and_seek_by_id_is_refused(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 3)
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, ack_group_time=0)
    await produce(client, topic, 3, b"before")
    middle = int(time.time() * 1000) + 1
    await asyncio.sleep(0.005)  # past `middle`: the next messages are published after it
    await produce(client, topic, 3, b"after")
    first = await drain(consumer, 6)
    for message in first:
        consumer.acknowledge(message)
    epoch = consumer.epoch
    await consumer.seek(middle)
    assert consumer.epoch > epoch
    assert sorted(values(await drain(consumer, 3))) == [b"after0", b"after1", b"after2"]
    await consumer.seek(datetime.datetime.fromtimestamp(middle / 1000, tz=datetime.UTC))
    assert sorted(values(await drain(consumer, 3))) == [b"after0", b"after1", b"after2"]
    await consumer.seek(MessageId.earliest)
    assert sorted(values(await drain(consumer, 6))) == sorted(values(first))
    await consumer.seek(MessageId.latest)
    assert await consumer.receive(timeout=0.2) is None
    with pytest.raises(NotAllowedError, match=r"to message id .* is not supported: a message id is a position in one"):
        await consumer.seek(first[0].message_id)
    with pytest.raises(InvalidArgumentError, match="seek takes a MessageId"):
        await consumer.seek("yesterday")  # type: ignore[arg-type]
    await produce(client, topic, 1, b"still")
    assert values(await drain(consumer, 1)) == [b"still0"]


async def test_a_paused_consumer_asks_no_partition_for_more_until_resumed(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, receiver_queue_size=4,
                                      max_total_receiver_queue_size_across_partitions=4)  # 2 per partition
    consumer.pause()
    await produce(client, topic, 10)
    assert len(await drain(consumer, 4)) == 4  # each partition's first FLOW
    assert await consumer.receive(timeout=0.5) is None
    consumer.resume()
    assert len(await drain(consumer, 6)) == 6


async def test_unsubscribe_deletes_the_subscription_of_every_partition_and_closes(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    consumer = await client.subscribe(topic, "gone")
    for partition in range(2):
        assert "gone" in await admin.list_subscriptions(f"{topic}-partition-{partition}")
    await consumer.unsubscribe()
    assert consumer.closed
    for partition in range(2):
        assert "gone" not in await admin.list_subscriptions(f"{topic}-partition-{partition}")
    # Refused on a partition where another consumer is connected: raised, and the consumer closes.
    first = await client.subscribe(topic, "busy", SHARED)
    await client.subscribe(f"{topic}-partition-1", "busy", SHARED)
    with pytest.raises(PreconditionFailedError, match="other consumer"):
        await first.unsubscribe()
    assert first.closed
    assert "busy" not in await admin.list_subscriptions(f"{topic}-partition-0")


async def test_the_last_message_id_is_one_per_partition(client: AsyncClient, admin: AdminClient) -> None:
    topic = await partitioned(admin, 2)
    consumer = await client.subscribe(topic, "s")
    assert await consumer.get_last_message_id() == [MessageId(-1, -1, 0, -1), MessageId(-1, -1, 1, -1)]
    sent = await produce(client, topic, 4)
    assert await consumer.get_last_message_id() == sorted(sent[-2:], key=lambda sent_id: sent_id.partition)


async def test_the_end_of_the_topic_is_reached_once_every_partition_reached_it(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, ack_group_time=0)
    await produce(client, topic, 2)
    for message in await drain(consumer, 2):
        consumer.acknowledge(message)
    await admin.terminate_topic(f"{topic}-partition-0")
    await eventually(lambda: multi(consumer).partitions[0].has_reached_end_of_topic(), "partition 0 ended")
    assert not consumer.has_reached_end_of_topic()
    await admin.terminate_topic(f"{topic}-partition-1")
    await eventually(consumer.has_reached_end_of_topic, "the end of every partition")


async def test_stats_add_up_the_partitions(client: AsyncClient, admin: AdminClient) -> None:
    topic = await partitioned(admin, 3)
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, ack_group_time=0)
    await produce(client, topic, 6)
    received = await drain(consumer, 6)
    for message in received[:4]:
        consumer.acknowledge(message)
    consumer.negative_acknowledge(received[4])
    stats = consumer.stats()
    assert (stats.messages_received, stats.acks_sent, stats.nacks_sent) == (6, 4, 1)
    assert stats.bytes_received == sum(m.stats().bytes_received for m in multi(consumer).partitions) > 0


async def test_stats_are_logged_every_interval_once_for_all_partitions(
    shared_standalone: StandaloneProcess, caplog: pytest.LogCaptureFixture,
) -> None:
    url = shared_standalone.service_url
    with caplog.at_level(logging.INFO, logger="herald.client"):
        async with AsyncClient(url, stats_interval=0.2) as client, AdminClient(url) as admin:
            consumer = await client.subscribe(await partitioned(admin, 3), "logged")
            await eventually(lambda: "(subscription logged, 3 partitions)" in caplog.text, "a stats log line")
            assert "topic_consumer" not in {record.module for record in caplog.records if "msg/s" in record.message}
            await consumer.close()


class Recorder(ConsumerInterceptor):
    def __init__(self) -> None:
        self.consumed: list[tuple[str, bytes]] = []
        self.acked: list[tuple[str, MessageId]] = []

    def before_consume(self, consumer: Any, message: Message[Any]) -> Message[Any]:
        self.consumed.append((consumer.topic, message.data()))
        return message

    def on_acknowledge(self, consumer: Any, message_id: MessageId, error: Exception | None) -> None:
        self.acked.append((consumer.topic, message_id))


async def test_interceptors_see_each_message_and_ack_once_told_the_partitions_consumer(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    recorder = Recorder()
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, interceptors=[recorder])
    await produce(client, topic, 4)
    received = await drain(consumer, 4)
    assert sorted(recorder.consumed) == sorted((m.topic, m.data()) for m in received)
    for message in received:
        consumer.acknowledge(message)
    assert recorder.acked == [(m.topic, m.message_id) for m in received]


async def test_a_closed_consumer_fails_waiting_receives_and_refuses_every_call(
    client: AsyncClient, admin: AdminClient,
) -> None:
    consumer = await client.subscribe(await partitioned(admin, 2), "s")
    waiting = asyncio.ensure_future(consumer.receive())
    await asyncio.sleep(0)
    await consumer.close()
    await consumer.close()  # twice: nothing
    with pytest.raises(ConsumerClosedError):
        await waiting
    some_id = MessageId(1, 1, 0)
    for call in (consumer.acknowledge, consumer.negative_acknowledge, consumer.acknowledge_cumulative):
        with pytest.raises(ConsumerClosedError):
            call(some_id)
    with pytest.raises(ConsumerClosedError):
        consumer.redeliver_unacknowledged_messages()
    for coroutine in (consumer.seek(MessageId.earliest), consumer.get_last_message_id(), consumer.receive(),
                      consumer.batch_receive(), consumer.unsubscribe()):
        with pytest.raises(ConsumerClosedError):
            await coroutine
    assert not multi(consumer).partitions  # every member closed


async def test_closing_the_client_closes_the_multi_topic_consumer(shared_standalone: StandaloneProcess) -> None:
    url = shared_standalone.service_url
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        consumer = await client.subscribe(await partitioned(admin, 2), "s")
    assert consumer.closed


# ---- batch receive, listeners, events ----

async def test_batch_receive_takes_messages_of_every_partition(client: AsyncClient, admin: AdminClient) -> None:
    topic = await partitioned(admin, 3)
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST,
                                      batch_receive_policy=BatchReceivePolicy(max_num_messages=6, timeout=5))
    await produce(client, topic, 6)
    batch: list[Message[Any]] = []
    while len(batch) < 6:
        batch += await consumer.batch_receive()
    assert {message.message_id.partition for message in batch} == {0, 1, 2}


async def test_a_listener_gets_every_partitions_messages_with_the_multi_topic_consumer(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    got: list[tuple[object, bytes]] = []

    async def listener(consumer: AsyncConsumer[str], message: Message[str]) -> None:
        got.append((consumer, message.value.encode()))
        consumer.acknowledge(message)

    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, message_listener=listener,
                                      schema=StringSchema())
    with pytest.raises(NotAllowedError, match="message_listener"):
        await consumer.receive()
    await produce(client, topic, 4)
    await eventually(lambda: len(got) == 4, "every message to the listener")
    assert {who for who, _ in got} == {consumer}
    assert sorted(value for _, value in got) == [b"m0", b"m1", b"m2", b"m3"]


class Events(ConsumerEventListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, object, int]] = []

    def became_active(self, consumer: Any, partition: int) -> None:
        self.events.append(("active", consumer, partition))

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self.events.append(("inactive", consumer, partition))


async def test_failover_events_name_the_multi_topic_consumer_and_the_partition(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    events = Events()
    consumer = await client.subscribe(topic, "s", ConsumerType.Failover, consumer_event_listener=events)
    await eventually(lambda: sorted(events.events, key=lambda e: e[2]) == [("active", consumer, 0),
                                                                          ("active", consumer, 1)],
                     "active on both partitions")


# ---- growth ----

async def test_partitions_added_while_subscribed_are_picked_up(client: AsyncClient, admin: AdminClient) -> None:
    topic = await partitioned(admin, 2)
    consumer = multi(await client.subscribe(topic, "s", initial_position=EARLIEST, auto_update_partitions_interval=0.2))
    assert await admin.update_partitions(topic, 4) == 4
    await eventually(lambda: len(consumer.partitions) == 4, "the new partitions subscribed")
    await produce(client, f"{topic}-partition-3", 1, b"new")
    (message,) = await drain(consumer, 1)
    assert (message.data(), message.message_id.partition) == (b"new0", 3)
    assert [m._config.receiver_queue_size for m in consumer.partitions] == [1000] * 4  # type: ignore[attr-defined]


async def test_growth_is_off_without_auto_update(client: AsyncClient, admin: AdminClient) -> None:
    topic = await partitioned(admin, 2)
    consumer = multi(await client.subscribe(topic, "s", auto_update_partitions=False))
    assert not consumer._tasks
    assert len(consumer.partitions) == 2


# ---- reconsume later ----

async def test_a_message_reconsumed_later_comes_back_after_its_delay_counting_rounds_then_goes_to_the_dlq(
    client: AsyncClient,
) -> None:
    topic = unique_topic("multi")
    consumer = await client.subscribe(topic, "s", SHARED, initial_position=EARLIEST, retry_enable=True,
                                      dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2),
                                      schema=StringSchema())
    retry_topic, dlq_topic = f"{topic}-s-RETRY", f"{topic}-s-DLQ"
    assert consumer.topic == f"{topic},{retry_topic}"
    dead = await client.subscribe(dlq_topic, "check", initial_position=EARLIEST)
    producer = await client.create_producer(topic)
    original = await producer.send(b"later", key="k", properties={"app": "1"})
    message = (await drain(consumer, 1))[0]
    assert message.topic == topic
    for round_ in (1, 2):
        await consumer.reconsume_later(message, datetime.timedelta(seconds=1), {"why": f"round {round_}"})
        assert await consumer.receive(timeout=0.3) is None  # held back by its delay
        message = (await drain(consumer, 1))[0]
        assert message.topic == retry_topic
        assert (message.value, message.key) == ("later", "k")
        assert message.properties == {"app": "1", "why": f"round {round_}", REAL_TOPIC: topic,
                                      ORIGIN_MESSAGE_ID: str(original), RECONSUME_TIMES: str(round_),
                                      DELAY_TIME: "1000"}
    await consumer.reconsume_later(message, 0)  # a third round is past max_redeliver_count
    (letter,) = await drain(dead, 1)
    assert (letter.data(), letter.key) == (b"later", "k")
    assert letter.properties[RECONSUME_TIMES] == "3" and letter.properties[REAL_TOPIC] == topic
    assert await consumer.receive(timeout=0.3) is None  # acknowledged: not delivered again
    letter_producers = [p for p in client._producers if p.topic in (retry_topic, dlq_topic)]
    assert len(letter_producers) == 2  # one per target topic, made on first use
    await consumer.close()
    assert all(p.closed for p in letter_producers)


async def test_retry_topics_may_be_named_and_a_partitioned_topic_may_retry(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    retry_topic, dlq_topic = unique_topic("my-retry"), unique_topic("my-dlq")
    consumer = multi(await client.subscribe(
        topic, "s", SHARED, initial_position=EARLIEST, retry_enable=True,
        dead_letter_policy=DeadLetterPolicy(1, dead_letter_topic=dlq_topic, retry_letter_topic=retry_topic)))
    assert [m.topic for m in consumer.partitions] == [f"{topic}-partition-0", f"{topic}-partition-1", retry_topic]
    await produce(client, topic, 1)
    (message,) = await drain(consumer, 1)
    await consumer.reconsume_later(message, 0)
    (again,) = await drain(consumer, 1)
    assert again.topic == retry_topic and again.properties[REAL_TOPIC] == message.topic
    dead = await client.subscribe(dlq_topic, "check", initial_position=EARLIEST)
    await consumer.reconsume_later(again, 0)
    assert values(await drain(dead, 1)) == [b"m0"]


async def test_reconsume_later_is_refused_without_retries_or_with_a_bad_delay(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await partitioned(admin, 2)
    consumer = await client.subscribe(topic, "s", SHARED, initial_position=EARLIEST)
    await produce(client, topic, 1)
    (message,) = await drain(consumer, 1)
    with pytest.raises(NotAllowedError, match="reconsume_later needs retry_enable=True"):
        await consumer.reconsume_later(message, 1)
    retrying = await client.subscribe(unique_topic("multi"), "s", SHARED, retry_enable=True)
    for delay in (-1, "soon", datetime.timedelta(seconds=-1), float("nan")):
        with pytest.raises(InvalidArgumentError, match="reconsume_later's delay"):
            await retrying.reconsume_later(message, delay)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="which this consumer does not read"):
        await retrying.reconsume_later(message, 1)  # received through another consumer
    with pytest.raises(InvalidArgumentError, match="takes a received Message"):
        await retrying.reconsume_later(message.message_id, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [ConsumerType.Exclusive, ConsumerType.Failover])
async def test_retry_enable_is_refused_on_subscriptions_that_do_not_delay(
    client: AsyncClient, kind: ConsumerType,
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"retry_enable needs a Shared or Key_Shared subscription, not "
                                                   f"{kind.name}"):
        await client.subscribe(unique_topic("multi"), "s", kind, retry_enable=True)


# ---- errors ----

async def test_an_unknown_topic_in_a_list_fails_the_subscription_and_leaves_nothing_behind(
    client: AsyncClient, admin: AdminClient,
) -> None:
    good = await partitioned(admin, 2)
    with pytest.raises(NotFoundError, match="no-such-tenant"):
        await client.subscribe([good, "persistent://no-such-tenant/ns/t"], "s")
    for partition in range(2):
        assert await admin.list_subscriptions(f"{good}-partition-{partition}") == []
    assert not client._consumers


async def test_names_mixed_with_a_pattern_are_refused(client: AsyncClient) -> None:
    with pytest.raises(InvalidArgumentError, match="topic names and a topics pattern cannot be combined"):
        await client.subscribe([unique_topic("multi"), re.compile("persistent://public/default/x-.*")], "s")  # type: ignore[list-item]


# ---- the blocking facade ----

def test_the_blocking_consumer_reads_a_list_of_topics_and_partitions(shared_standalone: StandaloneProcess) -> None:
    async def setup() -> str:
        async with AdminClient(shared_standalone.service_url) as admin:
            return await partitioned(admin, 2)

    topic = asyncio.run(setup())
    other = unique_topic("multi")
    with Client(shared_standalone.service_url) as client:
        consumer = client.subscribe([topic, other], "s", initial_position=EARLIEST)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(4):
            producer.send(b"p%d" % i)
        client.create_producer(other).send(b"o")
        received = [consumer.receive(timeout=10) for _ in range(5)]
        assert all(message is not None for message in received)
        assert sorted(m.data() for m in received if m) == [b"o", b"p0", b"p1", b"p2", b"p3"]
        for message in received:
            assert message is not None
            consumer.acknowledge(message)
        assert consumer.receive(timeout=0.2) is None
        last = consumer.get_last_message_id()
        assert isinstance(last, list) and len(last) == 3
        consumer.seek(MessageId.earliest)
        assert sorted(m.data() for m in (consumer.receive(timeout=10) for _ in range(5)) if m) == sorted(
            m.data() for m in received if m)
        with pytest.raises(NotAllowedError, match="is not supported"):
            consumer.seek(MessageId(1, 1, 0))
