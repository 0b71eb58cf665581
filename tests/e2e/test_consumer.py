"""The single-topic consumer against a real `herald standalone`, through the client API (asyncio and
blocking): listeners, batch receive, ack grouping, the ack timeout, negative acks, redelivery, dead
letters, seek, pause / resume, unsubscribe, the last message id, Failover events, end of topic,
decompression and chunk reassembly, interceptors, properties, stats and schemas. Messages are
produced as raw entries over the wire (tests/wire.py), so these tests do not depend on the
producer."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from herald.api.v1 import admin_pb2, entry_pb2
from herald.client import (
    AsyncClient,
    AsyncConsumer,
    BatchReceivePolicy,
    Client,
    Consumer,
    ConsumerBusyError,
    ConsumerClosedError,
    ConsumerEventListener,
    ConsumerInterceptor,
    ConsumerType,
    DeadLetterPolicy,
    HeraldTimeoutError,
    InitialPosition,
    InvalidArgumentError,
    JsonSchema,
    Message,
    MessageId,
    NotAllowedError,
    SchemaError,
    StringSchema,
)
from herald.client.admin import AdminClient
from herald.common.codec.compression import compress
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record
from herald.common.errors import ConnectionError_, PreconditionFailedError

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, eventually_sync, unique_topic
from tests.unit.test_chunk_assembly import chunks
from tests.wire import WireClient, make_entry

EARLIEST = InitialPosition.Earliest


async def publish(wire: WireClient, topic: str, *values: bytes, **options: Any) -> list[MessageId]:
    """One entry per value (a batch of one: batch index 0); their ids."""
    producer = await wire.producer(topic)
    ids = []
    for value in values:
        reply = await producer.send(value, **options)
        assert reply.HasField("receipt"), reply
        ids.append(MessageId(reply.receipt.ledger_id, reply.receipt.entry_id, -1, 0))
    await producer.close()
    return ids


def publish_now(port: int, topic: str, *values: bytes) -> list[MessageId]:
    """publish() for the blocking tests, on an event loop of its own."""
    async def run() -> list[MessageId]:
        async with WireClient(port) as wire:
            return await publish(wire, topic, *values)

    return asyncio.run(run())


async def drain(consumer: AsyncConsumer[Any], count: int, wait: float = 10.0) -> list[Message[Any]]:
    """Receive exactly `count` messages, failing if any is more than `wait` seconds in coming."""
    received: list[Message[Any]] = []
    for _ in range(count):
        message = await consumer.receive(timeout=wait)
        assert message is not None, f"only {len(received)} of {count} messages arrived"
        received.append(message)
    return received


def values(messages: Sequence[Message[Any]]) -> list[bytes]:
    return [message.data() for message in messages]


async def subscription_stats(admin: AdminClient, topic: str, name: str) -> Any:
    stats = await admin.topic_stats(topic)
    (found,) = [s for s in stats.subscriptions if s.name == name]
    return found


# ---- message listeners ----

@pytest.mark.parametrize("kind", ["coroutine", "function"])
async def test_a_listener_gets_every_message_in_order_one_at_a_time(
    client: AsyncClient, wire: WireClient, kind: str,
) -> None:
    topic = unique_topic("consumer")
    seen: list[bytes] = []
    running = most_at_once = 0
    done = asyncio.Event()

    def handle(consumer: AsyncConsumer[bytes], message: Message[bytes]) -> None:
        seen.append(message.data())
        consumer.acknowledge(message)
        if len(seen) == 20:
            done.set()

    async def coroutine_listener(consumer: AsyncConsumer[bytes], message: Message[bytes]) -> None:
        nonlocal running, most_at_once
        running += 1
        most_at_once = max(most_at_once, running)
        await asyncio.sleep(0.001)  # gives a second call the chance to overlap, if it could
        handle(consumer, message)
        running -= 1

    listener = coroutine_listener if kind == "coroutine" else handle
    consumer = await client.subscribe(topic, "s", message_listener=listener)
    await publish(wire, topic, *[b"%d" % i for i in range(20)])
    await asyncio.wait_for(done.wait(), 20)
    assert seen == [b"%d" % i for i in range(20)]
    assert most_at_once <= 1
    with pytest.raises(NotAllowedError, match="receive\\(\\) is not allowed on a consumer with a message_listener"):
        await consumer.receive(timeout=0)
    with pytest.raises(NotAllowedError, match="batch_receive\\(\\) is not allowed"):
        await consumer.batch_receive()
    with pytest.raises(NotAllowedError):
        await consumer.receive_many(10, timeout=0)


async def test_a_listener_that_raises_is_logged_and_its_message_stays_unacknowledged(
    client: AsyncClient, wire: WireClient, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic("consumer")
    handled: list[bytes] = []

    def listener(consumer: AsyncConsumer[bytes], message: Message[bytes]) -> None:
        handled.append(message.data())
        if message.data() == b"bad":
            raise RuntimeError("cannot handle this one")
        consumer.acknowledge(message)

    with caplog.at_level(logging.ERROR, logger="herald.client.message_listener"):
        consumer = await client.subscribe(topic, "s", message_listener=listener)
        await publish(wire, topic, b"good", b"bad", b"also good")
        await eventually(lambda: len(handled) == 3, "three messages handled")
    assert "cannot handle this one" in caplog.text and "stays unacknowledged" in caplog.text
    await consumer.close()
    again = await client.subscribe(topic, "s")
    (back,) = await drain(again, 1)
    assert back.data() == b"bad" and back.redelivery_count == 1
    assert await again.receive(timeout=0.3) is None


async def test_a_listener_may_close_its_own_consumer(client: AsyncClient, wire: WireClient) -> None:
    topic = unique_topic("consumer")
    closed = asyncio.Event()

    async def listener(consumer: AsyncConsumer[bytes], message: Message[bytes]) -> None:
        await consumer.close()
        closed.set()

    consumer = await client.subscribe(topic, "s", message_listener=listener)
    await publish(wire, topic, b"last")
    await asyncio.wait_for(closed.wait(), 20)
    assert consumer.closed


def test_a_blocking_listener_runs_on_its_own_thread_with_the_blocking_consumer(
    shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("consumer")
    calls: list[tuple[str, object, bytes, MessageId | Sequence[MessageId]]] = []
    done = threading.Event()

    def listener(consumer: Consumer[bytes], message: Message[bytes]) -> None:
        consumer.acknowledge(message)
        last = consumer.get_last_message_id()  # a blocking call: fine here, off the loop thread
        calls.append((threading.current_thread().name, consumer, message.data(), last))
        if len(calls) == 3:
            done.set()

    with Client(shared_standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", message_listener=listener)
        publish_now(shared_standalone.port, topic, b"a", b"b", b"c")
        assert done.wait(20)
        assert [data for _, _, data, _ in calls] == [b"a", b"b", b"c"]
        assert all(name.startswith("herald-listener-s") for name, _, _, _ in calls)
        assert all(who is consumer for _, who, _, _ in calls)
        assert all(isinstance(last, MessageId) for _, _, _, last in calls)
        with pytest.raises(NotAllowedError):
            consumer.receive(timeout=0.1)
        with pytest.raises(NotAllowedError):
            consumer.batch_receive()
        # A refused subscription with a listener leaves nothing behind.
        with pytest.raises(ConsumerBusyError):
            client.subscribe(topic, "s", message_listener=listener)

        async def coroutine_listener(consumer: object, message: object) -> None:
            pass

        with pytest.raises(InvalidArgumentError, match="must be a plain function"):
            client.subscribe(topic, "other", message_listener=coroutine_listener)
        consumer.close()


# ---- batch receive ----

async def test_batch_receive_stops_at_the_message_limit_or_when_its_timeout_passes(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, batch_receive_policy=BatchReceivePolicy(
        max_num_messages=10, max_num_bytes=-1, timeout=0.3))
    await publish(wire, topic, *[b"%02d" % i for i in range(25)])
    await eventually(lambda: consumer.stats().queue_size == 25, "25 messages queued")
    batches = [await consumer.batch_receive() for _ in range(3)]
    assert [len(batch) for batch in batches] == [10, 10, 5]  # the last when the timeout passed
    assert values([m for batch in batches for m in batch]) == [b"%02d" % i for i in range(25)]
    assert await consumer.batch_receive() == []  # nothing came within the timeout


async def test_batch_receive_stops_at_the_byte_limit_but_always_takes_one_message(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, batch_receive_policy=BatchReceivePolicy(
        max_num_messages=-1, max_num_bytes=25, timeout=0.3))
    await publish(wire, topic, b"x" * 40, *[b"y" * 10] * 5)
    await eventually(lambda: consumer.stats().queue_size == 6, "6 messages queued")
    sizes = [[len(m.data()) for m in await consumer.batch_receive()] for _ in range(4)]
    assert sizes == [[40], [10, 10], [10, 10], [10]]


async def test_a_waiting_batch_receive_fails_when_the_consumer_closes(client: AsyncClient) -> None:
    consumer = await client.subscribe(unique_topic("consumer"), "s",
                                      batch_receive_policy=BatchReceivePolicy(timeout=30))
    # Tasks take their first step in the order they were made: batch_receive() is waiting (its
    # timeout is 30 s) when close() begins.
    waiting = asyncio.ensure_future(consumer.batch_receive())
    await asyncio.ensure_future(consumer.close())
    with pytest.raises(ConsumerClosedError, match="consumer closed"):
        await waiting
    with pytest.raises(ConsumerClosedError):
        await consumer.batch_receive()


# ---- acks, negative acks, redelivery ----

async def test_acks_wait_for_their_group_until_it_is_full(
    client: AsyncClient, wire: WireClient, admin: AdminClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                      ack_group_time=60.0, ack_group_max_size=5)
    await publish(wire, topic, *[b"%d" % i for i in range(5)])
    received = await drain(consumer, 5)

    async def unacked() -> int:
        return int((await subscription_stats(admin, topic, "s")).unacked_messages)

    await eventually(lambda: _equals(unacked(), 5), "5 messages delivered")
    for message in received[:4]:
        consumer.acknowledge(message)
    assert await unacked() == 5  # four acks wait for their group (60 s or 5 acks)
    consumer.acknowledge(received[4])
    await eventually(lambda: _equals(unacked(), 0), "the full group of acks sent")
    assert consumer.stats().acks_sent == 5


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_close_sends_the_acks_still_grouped(client: AsyncClient, wire: WireClient) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, ack_group_time=60.0)
    await publish(wire, topic, b"a", b"b")
    for message in await drain(consumer, 2):
        consumer.acknowledge(message)
    await consumer.close()
    again = await client.subscribe(topic, "s")
    assert await again.receive(timeout=0.3) is None


@pytest.mark.parametrize("kind", [ConsumerType.Shared, ConsumerType.Exclusive])
async def test_the_ack_timeout_redelivers_only_what_was_not_acknowledged_with_its_count_raised(
    client: AsyncClient, wire: WireClient, kind: ConsumerType,
) -> None:
    topic = unique_topic("consumer")
    recorder = Recorder()
    consumer = await client.subscribe(topic, "s", consumer_type=kind, initial_position=EARLIEST, ack_timeout=10,
                                      ack_timeout_tick=0.5, interceptors=[recorder])
    ids = await publish(wire, topic, b"acked", b"forgotten")
    acked, _ = await drain(consumer, 2)
    consumer.acknowledge(acked)
    back = await consumer.receive(timeout=30)  # the minimum ack timeout is 10 s
    assert back is not None and back.data() == b"forgotten"
    assert back.redelivery_count == 1
    assert await consumer.receive(timeout=0.5) is None  # the acknowledged one never comes back
    assert recorder.timed_out == [[ids[1]._replace(batch_index=-1)]]
    assert consumer.stats().ack_timeouts == 1


async def test_a_negatively_acknowledged_message_comes_back_after_the_delay_with_its_count_raised(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    recorder = Recorder()
    consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                      negative_ack_redelivery_delay=0.3, interceptors=[recorder])
    await publish(wire, topic, b"retry me", b"fine")
    retry, fine = await drain(consumer, 2)
    consumer.negative_acknowledge(retry)
    consumer.acknowledge(fine)
    (back,) = await drain(consumer, 1)
    assert (back.data(), back.redelivery_count, back.message_id) == (b"retry me", 1, retry.message_id)
    assert recorder.nacked == [[retry.message_id]]
    assert consumer.stats().nacks_sent == 1
    with pytest.raises(InvalidArgumentError, match="negative_acknowledge takes a Message or MessageId"):
        consumer.negative_acknowledge("nope")  # type: ignore[arg-type]


async def test_an_exclusive_negative_ack_brings_everything_unacknowledged_back_once(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, negative_ack_redelivery_delay=0.3)
    await publish(wire, topic, b"a", b"b", b"c")
    (first,) = await drain(consumer, 1)
    await eventually(lambda: consumer.stats().queue_size == 2, "b and c queued")
    consumer.negative_acknowledge(first)
    # After the delay the broker rewinds: a, b and c come again, and the queued b and c go.
    await eventually(lambda: consumer.stats().messages_received >= 6, "a, b and c delivered again")
    again = await drain(consumer, 3)
    assert values(again) == [b"a", b"b", b"c"]
    assert await consumer.receive(timeout=0.3) is None


async def test_redeliver_unacknowledged_messages_brings_back_everything_not_acknowledged(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
    await publish(wire, topic, b"a", b"b", b"c")
    _, b, _ = await drain(consumer, 3)
    consumer.acknowledge(b)
    consumer.redeliver_unacknowledged_messages()
    again = await drain(consumer, 2)
    assert sorted(values(again)) == [b"a", b"c"]
    assert {m.redelivery_count for m in again} == {1}
    assert await consumer.receive(timeout=0.3) is None


async def test_a_message_nacked_max_redeliver_count_times_stops_coming_and_is_a_dead_letter(
    client: AsyncClient, wire: WireClient, admin: AdminClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(
        topic, "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST, negative_ack_redelivery_delay=0,
        ack_group_time=0, dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2))
    await publish(wire, topic, b"poison")
    for expected_count in (0, 1):
        (message,) = await drain(consumer, 1)
        assert message.redelivery_count == expected_count
        consumer.negative_acknowledge(message)
    assert await consumer.receive(timeout=1.0) is None

    async def dead_letters() -> int:
        return int((await subscription_stats(admin, topic, "s")).dead_letters)

    await eventually(lambda: _equals(dead_letters(), 1), "the message counted as a dead letter")


async def test_reconsume_later_is_refused_without_retries_and_served_by_a_multi_topic_consumer_with_them(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    plain = await client.subscribe(topic, "plain", initial_position=EARLIEST)
    retrying = await client.subscribe(topic, "retry", ConsumerType.Shared, initial_position=EARLIEST,
                                      retry_enable=True)
    await publish(wire, topic, b"later")
    (message,) = await drain(plain, 1)
    with pytest.raises(NotAllowedError, match="retry_enable=True"):
        await plain.reconsume_later(message, 1.0)
    # With retries on, the consumer reads the retry letter topic too (test_multi_topic_consumer.py).
    assert retrying.topic == f"{topic},{topic}-retry-RETRY"
    (message,) = await drain(retrying, 1)
    await retrying.reconsume_later(message, datetime.timedelta(seconds=0))
    (again,) = await drain(retrying, 1)
    assert (again.data(), again.topic, again.properties["RECONSUMETIMES"]) == (b"later", f"{topic}-retry-RETRY", "1")


# ---- seek, pause, unsubscribe, last message id ----

async def test_seek_to_a_message_id_delivers_from_it_again(client: AsyncClient, wire: WireClient) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
    await publish(wire, topic, b"a", b"b", b"c", b"d")
    received = await drain(consumer, 4)
    for message in received:
        consumer.acknowledge(message)
    epoch = consumer.epoch
    await consumer.seek(received[1].message_id)
    assert consumer.epoch > epoch  # what was fetched before is not wanted any more
    assert values(await drain(consumer, 3)) == [b"b", b"c", b"d"]
    assert await consumer.receive(timeout=0.3) is None


async def test_seek_to_a_publish_time_in_milliseconds_or_as_an_aware_datetime(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = await wire.producer(topic)
    for value, published in ((b"a", 1_000), (b"b", 2_000), (b"c", 3_000)):
        await producer.send(value, publish_time=published)
    await drain(consumer, 3)
    await consumer.seek(1_500)
    assert values(await drain(consumer, 2)) == [b"b", b"c"]
    await consumer.seek(datetime.datetime.fromtimestamp(2.5, tz=datetime.UTC))
    assert values(await drain(consumer, 1)) == [b"c"]
    assert await consumer.receive(timeout=0.3) is None


async def test_seek_to_the_edges(client: AsyncClient, wire: WireClient) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
    await publish(wire, topic, b"a", b"b")
    await drain(consumer, 2)
    await consumer.seek(MessageId.latest)
    assert await consumer.receive(timeout=0.3) is None
    await publish(wire, topic, b"c")
    assert values(await drain(consumer, 1)) == [b"c"]
    await consumer.seek(MessageId.earliest)
    assert values(await drain(consumer, 3)) == [b"a", b"b", b"c"]


async def test_bad_seek_targets_are_refused_and_the_consumer_goes_on(client: AsyncClient, wire: WireClient) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s")
    with pytest.raises(InvalidArgumentError, match="aware datetime"):
        await consumer.seek(datetime.datetime(2024, 1, 1))  # naive: refused
    with pytest.raises(InvalidArgumentError, match="unix milliseconds >= 0"):
        await consumer.seek(-1)
    for target in ("yesterday", True, 1.5):
        with pytest.raises(InvalidArgumentError, match="seek takes a MessageId"):
            await consumer.seek(target)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="is invalid"):
        await consumer.seek(MessageId(3, -2))  # refused by the broker
    await publish(wire, topic, b"still here")
    assert values(await drain(consumer, 1)) == [b"still here"]


async def test_a_paused_consumer_asks_for_nothing_until_resumed(client: AsyncClient, wire: WireClient) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, receiver_queue_size=4)
    consumer.pause()
    await publish(wire, topic, *[b"%d" % i for i in range(10)])
    assert values(await drain(consumer, 4)) == [b"0", b"1", b"2", b"3"]  # the first FLOW's permits
    assert await consumer.receive(timeout=0.5) is None  # no FLOW while paused: nothing more comes
    consumer.resume()
    assert values(await drain(consumer, 6)) == [b"%d" % i for i in range(4, 10)]


async def test_unsubscribe_deletes_the_subscription_and_closes_the_consumer(
    client: AsyncClient, wire: WireClient, admin: AdminClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "gone")
    await consumer.unsubscribe()
    assert "gone" not in await admin.list_subscriptions(topic)
    assert consumer.closed
    with pytest.raises(ConsumerClosedError):
        await consumer.receive(timeout=0)
    with pytest.raises(ConsumerClosedError):
        await consumer.unsubscribe()
    # Refused while other consumers are connected: the consumer goes on.
    first = await client.subscribe(topic, "busy", consumer_type=ConsumerType.Shared)
    await client.subscribe(topic, "busy", consumer_type=ConsumerType.Shared, receiver_queue_size=1)
    with pytest.raises(PreconditionFailedError, match="other consumer"):
        await first.unsubscribe()
    assert not first.closed and "busy" in await admin.list_subscriptions(topic)


async def test_the_last_message_id_is_the_topics_last_entry_and_batch_index(
    client: AsyncClient, wire: WireClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s")
    assert await consumer.get_last_message_id() == MessageId(-1, -1, -1, -1)
    producer = await wire.producer(topic)
    reply = await producer.send(b"a", b"b", b"c")  # one entry, a batch of three
    assert await consumer.get_last_message_id() == MessageId(reply.receipt.ledger_id, reply.receipt.entry_id, -1, 2)


async def test_a_closed_consumer_refuses_every_call(client: AsyncClient) -> None:
    recorder = Recorder()
    consumer = await client.subscribe(unique_topic("consumer"), "s", interceptors=[recorder])
    await consumer.close()
    await consumer.close()  # twice: nothing
    some_id = MessageId(1, 1)
    with pytest.raises(ConsumerClosedError):
        consumer.acknowledge(some_id)
    assert recorder.acked == [(some_id, "ConsumerClosedError")]  # interceptors hear of the failed ack
    for call in (consumer.negative_acknowledge, consumer.acknowledge_cumulative):
        with pytest.raises(ConsumerClosedError):
            call(some_id)
    with pytest.raises(ConsumerClosedError):
        consumer.redeliver_unacknowledged_messages()
    for coroutine in (consumer.seek(some_id), consumer.get_last_message_id(), consumer.receive(),
                      consumer.batch_receive(), consumer.unsubscribe()):
        with pytest.raises(ConsumerClosedError):
            await coroutine
    assert consumer.stats().receive_failures == 2


async def test_a_seek_the_broker_does_not_answer_times_out_or_fails_with_the_connection(
    standalone: StandaloneProcess,
) -> None:
    assert standalone.proc is not None
    async with AsyncClient(standalone.service_url, operation_timeout=2.0) as client:
        consumer = await client.subscribe(unique_topic("consumer"), "s")
        os.kill(standalone.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(HeraldTimeoutError, match=r"seeking 's' .* did not complete within the operation"):
                await consumer.seek(MessageId.earliest)
            seeking = asyncio.ensure_future(consumer.seek(MessageId.earliest))
            await asyncio.sleep(0)  # a yield, not a wait: the seek is queued for the writer
            # Written to the connection (the client's outbox is empty), never answered:
            await eventually(lambda: not consumer._protocol.outbox, "the seek written")  # type: ignore[attr-defined]
        finally:
            standalone.kill()  # the connection is reset
        with pytest.raises(ConnectionError_, match="lost before it answered"):
            await seeking


# ---- Failover events and the end of the topic ----

class Events(ConsumerEventListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, object, int]] = []

    def became_active(self, consumer: Any, partition: int) -> None:
        self.events.append(("active", consumer, partition))

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self.events.append(("inactive", consumer, partition))


class BrokenEvents(ConsumerEventListener):
    def became_active(self, consumer: Any, partition: int) -> None:
        raise RuntimeError("listener bug")


async def test_failover_consumers_hear_when_they_become_active_or_inactive(
    client: AsyncClient, wire: WireClient, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic("consumer")
    first_events, second_events = Events(), Events()
    failover = ConsumerType.Failover
    first = await client.subscribe(topic, "s", failover, consumer_name="a", consumer_event_listener=first_events)
    await eventually(lambda: first_events.events == [("active", first, -1)], "a active")
    second = await client.subscribe(topic, "s", failover, consumer_name="b", consumer_event_listener=second_events)
    await eventually(lambda: ("inactive", second, -1) in second_events.events, "b inactive")
    await first.close()
    await eventually(lambda: second_events.events[-1:] == [("active", second, -1)], "b active once a left")
    # A listener that raises is logged; the consumer goes on.
    with caplog.at_level(logging.ERROR, logger="herald.client.topic_consumer"):
        broken = await client.subscribe(topic, "other", failover, initial_position=EARLIEST,
                                        consumer_event_listener=BrokenEvents())
        await eventually(lambda: "listener bug" in caplog.text, "the listener's error logged")
    await publish(wire, topic, b"x")
    assert values(await drain(broken, 1)) == [b"x"]


def test_a_blocking_consumers_event_listener_gets_the_blocking_consumer_on_its_thread(
    shared_standalone: StandaloneProcess,
) -> None:
    events = Events()
    with Client(shared_standalone.service_url) as client:
        consumer = client.subscribe(unique_topic("consumer"), "s", ConsumerType.Failover,
                                    consumer_event_listener=events)
        eventually_sync(lambda: events.events == [("active", consumer, -1)], "the blocking consumer active")


async def test_the_consumer_knows_when_it_reached_the_end_of_a_terminated_topic(
    client: AsyncClient, wire: WireClient, admin: AdminClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, ack_group_time=0)
    await publish(wire, topic, b"only")
    (message,) = await drain(consumer, 1)
    assert not consumer.has_reached_end_of_topic()
    consumer.acknowledge(message)
    await admin.terminate_topic(topic)
    await eventually(consumer.has_reached_end_of_topic, "the end of the topic")


# ---- entries as producers write them: compressed, chunked, corrupt ----

async def test_compressed_batches_and_chunked_messages_from_the_wire_arrive_whole(
    client: AsyncClient, wire: WireClient, admin: AdminClient,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, ack_group_time=0, schema=StringSchema())
    producer = await wire.producer(topic, name="raw")
    payload = bytearray()
    for text in ("one", "two", "three"):
        pack_record(payload, text.encode())
    batch = EntryMetadata(producer_name="raw", sequence_id=0, highest_sequence_id=2, num_messages=3, batched=True,
                          compression=entry_pb2.ZSTD, uncompressed_size=len(payload), publish_time=1)
    reply = await producer.send_entry(encode_entry(batch, compress(entry_pb2.ZSTD, payload)), 0, 3)
    assert reply.HasField("receipt"), reply
    big = "".join(f"{i:05d}" for i in range(4000))
    receipts = []
    for metadata, data in chunks(big.encode(), 1000, key="k", compression=entry_pb2.LZ4, sequence_id=3,
                                 uuid="raw-3"):
        metadata.producer_name = "raw"
        reply = await producer.send_entry(encode_entry(metadata, data), metadata.sequence_id)
        assert reply.HasField("receipt"), reply
        receipts.append(reply.receipt)
    assert len(receipts) > 1
    received = await drain(consumer, 4)
    assert [m.value for m in received] == ["one", "two", "three", big]
    whole = received[3]
    last = receipts[-1]
    assert whole.message_id == MessageId(last.ledger_id, last.entry_id, -1, -1)
    assert (whole.sequence_id, whole.key) == (3, "k")
    for message in received:
        consumer.acknowledge(message)

    async def backlog() -> int:
        return int((await subscription_stats(admin, topic, "s")).backlog_entries)

    await eventually(lambda: _equals(backlog(), 0), "every entry, each chunk included, acknowledged")


async def test_an_entry_that_does_not_decompress_is_dropped_with_an_error_and_the_rest_flows(
    client: AsyncClient, wire: WireClient, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic("consumer")
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = await wire.producer(topic)
    garbage = EntryMetadata(producer_name=producer.name, sequence_id=0, highest_sequence_id=0, num_messages=1,
                            batched=False, compression=entry_pb2.LZ4, uncompressed_size=100, publish_time=1)
    with caplog.at_level(logging.ERROR, logger="herald.client.topic_consumer"):
        await producer.send_entry(encode_entry(garbage, b"\xff" * 20), 0)
        await producer.send_entry(make_entry(producer.name, 1, b"fine"), 1)
        assert values(await drain(consumer, 1)) == [b"fine"]
    assert "dropped corrupt entry" in caplog.text and "does not decompress with LZ4" in caplog.text
    assert consumer.stats().dropped_entries == 1


# ---- interceptors, properties, stats, schemas ----

class Recorder(ConsumerInterceptor):
    def __init__(self) -> None:
        self.consumed: list[bytes] = []
        self.acked: list[tuple[MessageId, str | None]] = []
        self.nacked: list[list[MessageId]] = []
        self.timed_out: list[list[MessageId]] = []

    def before_consume(self, consumer: Any, message: Message[Any]) -> Message[Any]:
        self.consumed.append(message.data())
        return message

    def on_acknowledge(self, consumer: Any, message_id: MessageId, error: Exception | None) -> None:
        self.acked.append((message_id, None if error is None else type(error).__name__))

    def on_negative_acks_send(self, consumer: Any, message_ids: Sequence[MessageId]) -> None:
        self.nacked.append(list(message_ids))

    def on_ack_timeout_send(self, consumer: Any, message_ids: Sequence[MessageId]) -> None:
        self.timed_out.append(list(message_ids))


class Broken(ConsumerInterceptor):
    def before_consume(self, consumer: Any, message: Message[Any]) -> Message[Any]:
        raise RuntimeError("interceptor bug")


async def test_interceptors_see_messages_and_acks_and_consumer_properties_reach_the_broker(
    client: AsyncClient, wire: WireClient, admin: AdminClient, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic("consumer")
    recorder = Recorder()
    consumer = await client.subscribe(topic, "s", initial_position=EARLIEST, interceptors=[Broken(), recorder],
                                      properties={"app": "billing", "zone": "eu"})
    await publish(wire, topic, b"a", b"b")
    with caplog.at_level(logging.ERROR, logger="herald.client.interceptors"):
        a, b = await drain(consumer, 2)
    assert "interceptor bug" in caplog.text  # logged and skipped
    assert recorder.consumed == [b"a", b"b"]
    consumer.acknowledge(a)
    consumer.acknowledge_cumulative(b)
    assert recorder.acked == [(a.message_id, None), (b.message_id, None)]
    stats = await subscription_stats(admin, topic, "s")
    assert dict(stats.consumer_stats[0].properties) == {"app": "billing", "zone": "eu"}


async def test_stats_count_what_the_consumer_did_and_are_logged_every_interval(
    shared_standalone: StandaloneProcess, wire: WireClient, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic("consumer")
    with caplog.at_level(logging.INFO, logger="herald.client.topic_consumer"):
        async with AsyncClient(shared_standalone.service_url, stats_interval=0.2) as client:
            consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared,
                                              initial_position=EARLIEST, negative_ack_redelivery_delay=60)
            await publish(wire, topic, b"a", b"bb", b"ccc")
            a, b, c = await drain(consumer, 3)
            consumer.acknowledge(a)
            consumer.acknowledge(b)
            consumer.negative_acknowledge(c)
            stats = consumer.stats()
            assert (stats.messages_received, stats.nacks_sent, stats.queue_size) == (3, 1, 0)
            assert stats.bytes_received > 6 and stats.receive_failures == 0 and stats.dropped_entries == 0
            await eventually(lambda: consumer.stats().acks_sent == 2, "the two acks sent with their group")
            await eventually(lambda: "consumer" in caplog.text and "msg/s" in caplog.text, "a stats log line")
            await consumer.close()
            with pytest.raises(ConsumerClosedError):
                await consumer.receive()
            assert consumer.stats().receive_failures == 1


@dataclass
class Order:
    id: int
    total: float


async def test_messages_expose_their_fields_and_decode_through_the_schema(
    client: AsyncClient, wire: WireClient, admin: AdminClient,
) -> None:
    topic = unique_topic("consumer")
    # One message read through two unrelated schemas: only a topic that takes any schema allows it.
    await admin.create_topic(topic)
    await admin.set_topic_policies(topic, admin_pb2.Policies(schema_compatibility_strategy="ALWAYS_COMPATIBLE"))
    texts = await client.subscribe(topic, "text", initial_position=EARLIEST, schema=StringSchema())
    orders = await client.subscribe(topic, "json", initial_position=EARLIEST, schema=JsonSchema(Order))
    producer = await wire.producer(topic, name="orders-app")
    before = int(time.time() * 1000)
    reply = await producer.send(b'{"id": 1, "total": 9.5}', key="customer-7", properties={"source": "web"})
    await producer.send(b"not json")
    (text, _) = await drain(texts, 2)
    assert text.value == '{"id": 1, "total": 9.5}' and text.data() == b'{"id": 1, "total": 9.5}'
    order, broken = await drain(orders, 2)
    assert order.value == Order(1, 9.5)
    assert (order.key, order.properties, order.event_time) == ("customer-7", {"source": "web"}, None)
    assert order.publish_time >= before and order.producer_name == "orders-app"
    assert (order.sequence_id, order.redelivery_count, order.topic) == (0, 0, topic)
    assert order.message_id == MessageId(reply.receipt.ledger_id, reply.receipt.entry_id, -1, 0)
    with pytest.raises(SchemaError, match="does not decode"):
        _ = broken.value
    assert broken.data() == b"not json"


# ---- the blocking facade ----

def test_the_blocking_consumer_offers_every_call(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("consumer")
    publish_now(shared_standalone.port, topic, *[b"%d" % i for i in range(6)])
    with Client(shared_standalone.service_url) as client:
        consumer = client.subscribe(
            topic, "s", initial_position=EARLIEST, ack_group_time=0, negative_ack_redelivery_delay=0.1,
            batch_receive_policy=BatchReceivePolicy(max_num_messages=3, timeout=0.2))
        assert consumer.consumer_type is ConsumerType.Exclusive and consumer.is_connected
        eventually_sync(lambda: consumer.stats().queue_size == 6, "6 messages queued")
        first = consumer.receive(timeout=10)  # fetches the others into the local buffer too
        assert first is not None and first.data() == b"0"
        assert values(consumer.batch_receive()) == [b"1", b"2", b"3"]  # the buffer first, by the policy
        fourth, fifth = consumer.batch_receive()
        assert values([fourth, fifth]) == [b"4", b"5"]
        assert consumer.batch_receive() == []
        consumer.acknowledge(first)
        consumer.acknowledge_cumulative(fourth)
        last = fifth.message_id
        consumer.negative_acknowledge(fifth)
        back = consumer.receive(timeout=10)
        assert back is not None and (back.data(), back.redelivery_count) == (b"5", 1)
        consumer.redeliver_unacknowledged_messages()
        back = consumer.receive(timeout=10)
        assert back is not None and (back.data(), back.redelivery_count) == (b"5", 2)
        assert consumer.get_last_message_id() == last
        assert not consumer.has_reached_end_of_topic()
        consumer.seek(MessageId.earliest)
        again = consumer.receive(timeout=10)
        assert again is not None and again.data() == b"0"
        consumer.pause()
        consumer.resume()
        stats = consumer.stats()
        assert stats.acks_sent == 2 and stats.nacks_sent == 1
        with pytest.raises(InvalidArgumentError, match="acknowledge takes a Message or MessageId"):
            consumer.acknowledge("nope")  # type: ignore[arg-type]
        with pytest.raises(NotAllowedError, match="retry_enable"):
            consumer.reconsume_later(again, 1.0)
        consumer.unsubscribe()
        assert consumer.closed
        with pytest.raises(ConsumerClosedError):
            consumer.receive(timeout=0)
        with pytest.raises(ConsumerClosedError):
            consumer.seek(MessageId.earliest)


def test_the_blocking_consumer_refuses_cumulative_acks_on_shared_in_the_callers_thread(
    shared_standalone: StandaloneProcess,
) -> None:
    with Client(shared_standalone.service_url) as client:
        consumer = client.subscribe(unique_topic("consumer"), "s", ConsumerType.KeyShared)
        with pytest.raises(NotAllowedError, match="not allowed on a KeyShared subscription"):
            consumer.acknowledge_cumulative(MessageId(1, 1))
