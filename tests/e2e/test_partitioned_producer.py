"""The partitioned producer against a real `herald standalone`: routing by key hash, round robin
(per message, or per batching window), single partition and custom routers; one producer name for
all partitions; max pending split across partitions; growth picked up while producing; every error
path (router out of range or raising, a partition failing to register, growth failing, sending
after close); and the blocking facade over it."""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from herald.client import (
    AsyncClient,
    AsyncProducer,
    Client,
    HashingScheme,
    HeraldError,
    InitialPosition,
    InvalidArgumentError,
    Message,
    MessageId,
    OutgoingMessage,
    PartitionsRoutingMode,
    ProducerBusyError,
    ProducerClosedError,
    ProducerQueueIsFullError,
    TopicTerminatedError,
)
from herald.client.admin import AdminClient
from herald.client.partitioned_producer import PartitionedProducer
from herald.client.producer import SendCallback
from herald.client.routing import key_hash

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

EARLIEST = InitialPosition.Earliest


@pytest.fixture
def topic() -> Iterator[str]:
    yield unique_topic("parted")


async def create_partitioned(server: StandaloneProcess, topic: str, partitions: int) -> None:
    async with AdminClient(server.service_url) as admin:
        await admin.create_topic(topic, partitions=partitions)


async def partition_contents(
    client: AsyncClient, topic: str, ids: list[MessageId],
) -> dict[int, list[Message[bytes]]]:
    """What each partition holds, read from the start: exactly as many messages as `ids` put there,
    and nothing more."""
    expected = Counter(message_id.partition for message_id in ids)
    contents: dict[int, list[Message[bytes]]] = {}
    for partition, count in sorted(expected.items()):
        consumer = await client.subscribe(f"{topic}-partition-{partition}", "check", initial_position=EARLIEST)
        received: list[Message[bytes]] = []
        for _ in range(count):
            message = await consumer.receive(timeout=10)
            assert message is not None, f"partition {partition}: only {len(received)} of {count} messages arrived"
            received.append(message)
        assert await consumer.receive(timeout=0.2) is None
        await consumer.close()
        contents[partition] = received
    return contents


async def send_all(producer: AsyncProducer[bytes], values: list[bytes], keys: list[str | None]) -> list[MessageId]:
    futures = [await producer.send_async(value, key=key) for value, key in zip(values, keys, strict=True)]
    await producer.flush()
    return [future.result() for future in futures]


# ---- routing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", list(HashingScheme))
async def test_keyed_messages_go_to_the_partition_of_their_key_hash(
    shared_standalone: StandaloneProcess, topic: str, scheme: HashingScheme,
) -> None:
    await create_partitioned(shared_standalone, topic, 4)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, hashing_scheme=scheme)
        assert isinstance(producer, PartitionedProducer) and producer.num_partitions == 4
        keys: list[str | None] = [f"key-{i % 10}" for i in range(60)]
        ids = await send_all(producer, [b"%d" % i for i in range(60)], keys)
        hash_key = key_hash(scheme)
        assert [i.partition for i in ids] == [hash_key(key) % 4 for key in keys if key is not None]
        contents = await partition_contents(client, topic, ids)
        for partition, messages in contents.items():
            assert {hash_key(m.key or "") % 4 for m in messages} == {partition}
            # Each key's messages keep their send order.
            for key in {m.key for m in messages}:
                values = [int(m.data()) for m in messages if m.key == key]
                assert values == sorted(values)


async def test_unkeyed_messages_go_round_robin_one_by_one_without_batching(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 3)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(b"%d" % i) for i in range(12)]
        partitions = [i.partition for i in ids]
        assert all(b == (a + 1) % 3 for a, b in itertools.pairwise(partitions))
        assert Counter(partitions) == {0: 4, 1: 4, 2: 4}
        contents = await partition_contents(client, topic, ids)
        assert sorted(int(m.data()) for ms in contents.values() for m in ms) == list(range(12))


async def test_batching_sends_one_window_to_one_partition_and_the_next_window_to_the_next(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    """The router's windows are time.monotonic_ns() // max publish delay: a burst that starts and
    ends in one window (checked on the same clock, retried otherwise) goes to one partition."""
    await create_partitioned(shared_standalone, topic, 3)
    window_ns = 300_000_000
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_max_publish_delay=window_ns / 1e9)

        async def burst() -> tuple[int, int, list[MessageId]] | None:
            before = time.monotonic_ns() // window_ns
            futures = [await producer.send_async(b"%d" % i) for i in range(20)]
            after = time.monotonic_ns() // window_ns
            await producer.flush()
            ids = [f.result() for f in futures]
            return (before, after, ids) if before == after else None

        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "no burst fitted in one batching window"
            first = await burst()
            if first is None:
                continue
            await asyncio.sleep(((first[0] + 1) * window_ns - time.monotonic_ns()) / 1e9)  # to the next window
            second = await burst()
            if second is not None and second[0] == first[0] + 1:
                break
        for _, _, ids in (first, second):
            assert len({i.partition for i in ids}) == 1  # one partition ...
            assert len({(i.ledger_id, i.entry_id) for i in ids}) == 1  # ... and one batch
        assert second[2][0].partition == (first[2][0].partition + 1) % 3


async def test_single_partition_mode_sends_every_unkeyed_message_to_one_partition(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 4)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(
            topic, message_routing_mode=PartitionsRoutingMode.UseSinglePartition, batching_enabled=False)
        ids = [await producer.send(b"%d" % i) for i in range(12)]
        assert len({i.partition for i in ids}) == 1
        keyed = [await producer.send(b"k", key=f"k{i}") for i in range(12)]
        assert [i.partition for i in keyed] == [key_hash(HashingScheme.JavaStringHash)(f"k{i}") % 4
                                                for i in range(12)]


async def test_custom_router_decides_every_message_keyed_or_not(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 3)
    seen: list[tuple[bytes, str | None, int]] = []

    def router(message: OutgoingMessage, num_partitions: int) -> int:
        seen.append((message.value, message.key, num_partitions))
        return int((message.properties or {})["to"])

    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, message_router=router)
        targets = [2, 0, 1, 2, 2, 0]
        futures = [await producer.send_async(b"v%d" % i, key="same-key", properties={"to": str(t)})
                   for i, t in enumerate(targets)]
        await producer.flush()
        ids = [f.result() for f in futures]
        assert [i.partition for i in ids] == targets
        assert seen == [(b"v%d" % i, "same-key", 3) for i in range(len(targets))]
        contents = await partition_contents(client, topic, ids)
        assert {p: [m.data() for m in ms] for p, ms in contents.items()} == {
            0: [b"v1", b"v5"], 1: [b"v2"], 2: [b"v0", b"v3", b"v4"]}


async def test_a_one_partition_topic_is_partitioned(shared_standalone: StandaloneProcess, topic: str) -> None:
    await create_partitioned(shared_standalone, topic, 1)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic)
        assert isinstance(producer, PartitionedProducer)
        message_id = await producer.send(b"one")
        assert message_id.partition == 0
        assert await client.get_partitions_for_topic(topic) == [f"{topic}-partition-0"]
        contents = await partition_contents(client, topic, [message_id])
        assert [m.data() for m in contents[0]] == [b"one"]


# ---- one producer over many -------------------------------------------------------------------


async def test_partitions_share_the_name_the_broker_gave_the_first(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 3)
    url = shared_standalone.service_url
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        producer = await client.create_producer(topic, batching_enabled=False)
        assert producer.producer_name
        assert producer.is_connected
        ids = [await producer.send(b"%d" % i) for i in range(6)]
        contents = await partition_contents(client, topic, ids)
        assert {m.producer_name for ms in contents.values() for m in ms} == {producer.producer_name}
        for partition in range(3):
            stats = await admin.topic_stats(f"{topic}-partition-{partition}")
            assert [p.producer_name for p in stats.producers] == [producer.producer_name]


async def test_each_partition_may_hold_its_share_of_the_pending_messages(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    """max_pending_messages_across_partitions=4 over 2 partitions: 2 pending per partition. No
    send below suspends, so no receipt can make room in between."""
    await create_partitioned(shared_standalone, topic, 2)
    java = key_hash(HashingScheme.JavaStringHash)
    key0 = next(k for k in (f"k{i}" for i in range(100)) if java(k) % 2 == 0)
    key1 = next(k for k in (f"k{i}" for i in range(100)) if java(k) % 2 == 1)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, max_pending_messages=100,
                                                max_pending_messages_across_partitions=4, batching_enabled=False)
        futures = [await producer.send_async(b"a", key=key0), await producer.send_async(b"b", key=key0)]
        with pytest.raises(ProducerQueueIsFullError):
            await producer.send_async(b"c", key=key0)
        futures.append(await producer.send_async(b"d", key=key1))  # the other partition has room
        await producer.flush()
        assert [f.result().partition for f in futures] == [0, 0, 1]


async def test_last_sequence_id_is_the_highest_of_the_partitions_and_stats_add_up(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 2)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        assert producer.last_sequence_id == -1
        for i in range(10):
            await producer.send(b"%d" % i)
        assert producer.last_sequence_id == 4  # each partition counts its own: 0..4
        stats = producer.stats()
        assert (stats.messages_sent, stats.receipts, stats.pending_messages) == (10, 10, 0)
        assert stats.send_latency_max_ms > 0


async def test_flush_waits_for_every_partition(shared_standalone: StandaloneProcess, topic: str) -> None:
    await create_partitioned(shared_standalone, topic, 3)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_max_publish_delay=30.0)
        futures = [await producer.send_async(b"%d" % i, key=f"k{i}") for i in range(30)]
        await producer.flush()
        assert all(f.done() for f in futures)
        assert {f.result().partition for f in futures} == {0, 1, 2}


# ---- growth -----------------------------------------------------------------------------------


async def test_messages_reach_new_partitions_after_the_topic_grows(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 2)
    url = shared_standalone.service_url
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        producer = await client.create_producer(topic, batching_enabled=False, auto_update_partitions_interval=0.5)
        assert isinstance(producer, PartitionedProducer)
        ids = [await producer.send(b"before-%d" % i) for i in range(4)]
        assert {i.partition for i in ids} == {0, 1}
        assert await admin.update_partitions(topic, 4) == 4
        deadline = time.monotonic() + 30
        while not {2, 3} <= {i.partition for i in ids}:
            assert time.monotonic() < deadline, "no message reached the new partitions"
            ids.append(await producer.send(b"after-%d" % len(ids)))
        assert producer.num_partitions == 4
        assert len({p.producer_name for p in producer.partitions}) == 1
        contents = await partition_contents(client, topic, ids)
        assert set(contents) == {0, 1, 2, 3}


async def test_growth_whose_new_partition_cannot_register_is_retried_later(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 1)
    url = shared_standalone.service_url
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        producer = await client.create_producer(topic, producer_name="grower", auto_update_partitions=False)
        assert isinstance(producer, PartitionedProducer)
        await admin.update_partitions(topic, 3)
        blocker = await client.create_producer(f"{topic}-partition-2", producer_name="grower")
        with pytest.raises(ProducerBusyError):
            await producer._update_partitions()  # what the auto-update runs every interval
        assert producer.num_partitions == 1
        assert (await producer.send(b"still")).partition == 0
        stats = await admin.topic_stats(f"{topic}-partition-1")
        assert not stats.producers  # the new partition's producer that did start was closed again
        await blocker.close()
        await producer._update_partitions()
        assert producer.num_partitions == 3
        ids = [await producer.send(b"%d" % i, key=f"k{i}") for i in range(30)]
        assert {i.partition for i in ids} == {0, 1, 2}


# ---- errors -----------------------------------------------------------------------------------


async def test_router_returning_a_partition_out_of_range_fails_that_send_only(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 2)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(
            topic, message_router=lambda message, n: 5 if message.value == b"bad" else 1)
        with pytest.raises(InvalidArgumentError, match=r"returned partition 5 .* has 2 partitions"):
            await producer.send(b"bad")
        with pytest.raises(InvalidArgumentError):
            await producer.send_async(b"bad")
        assert (await producer.send(b"good")).partition == 1


async def test_router_raising_fails_that_send_with_its_error(shared_standalone: StandaloneProcess, topic: str) -> None:
    await create_partitioned(shared_standalone, topic, 2)

    class NoRoute(Exception):
        pass

    def router(message: OutgoingMessage, num_partitions: int) -> int:
        if message.key == "nowhere":
            raise NoRoute("no partition for this key")
        return 0

    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, message_router=router)
        with pytest.raises(NoRoute, match="no partition for this key"):
            await producer.send(b"x", key="nowhere")
        assert (await producer.send(b"y", key="somewhere")).partition == 0


async def test_a_partition_failing_to_register_fails_creation_and_closes_the_others(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 3)
    url = shared_standalone.service_url
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        blocker = await client.create_producer(f"{topic}-partition-1", producer_name="taken")
        with pytest.raises(ProducerBusyError):
            await client.create_producer(topic, producer_name="taken")
        for partition in (0, 2):
            stats = await admin.topic_stats(f"{topic}-partition-{partition}")
            assert not stats.producers, f"partition {partition} still has {stats.producers}"
        await blocker.close()
        producer = await client.create_producer(topic, producer_name="taken")  # nothing was left holding it
        assert producer.is_connected


async def test_partitions_started_before_one_fails_to_register_are_closed(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    """Without a given name partition 0 registers first (the broker names it) and the others
    after it; partition 1 of this topic is terminated, so its registration is refused."""
    await create_partitioned(shared_standalone, topic, 3)
    url = shared_standalone.service_url
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        await admin.terminate_topic(f"{topic}-partition-1")
        with pytest.raises(TopicTerminatedError):
            await client.create_producer(topic)
        for partition in (0, 2):
            stats = await admin.topic_stats(f"{topic}-partition-{partition}")
            assert not stats.producers, f"partition {partition} still has {stats.producers}"
        assert not client._producers  # nothing left for the client to close


async def test_sending_after_close_fails(shared_standalone: StandaloneProcess, topic: str) -> None:
    await create_partitioned(shared_standalone, topic, 2)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic)
        assert isinstance(producer, PartitionedProducer)
        await producer.send(b"before")
        await producer.close()
        assert producer.closed
        assert all(p.closed for p in producer.partitions)
        with pytest.raises(ProducerClosedError):
            await producer.send(b"after")
        with pytest.raises(ProducerClosedError):
            await producer.send_async(b"after", key="k")
        with pytest.raises(ProducerClosedError):
            await producer.flush()
        await producer.close()  # a second close does nothing


async def test_client_shutdown_fails_what_is_pending_on_every_partition(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    await create_partitioned(shared_standalone, topic, 2)
    client = AsyncClient(shared_standalone.service_url)
    producer = await client.create_producer(topic, batching_max_publish_delay=30.0)
    assert isinstance(producer, PartitionedProducer)
    futures = [await producer.send_async(b"%d" % i, key=f"k{i}") for i in range(10)]
    await client.shutdown()
    assert producer.closed and all(p.closed for p in producer.partitions)
    for future in futures:
        with pytest.raises(ProducerClosedError):
            future.result()


async def test_close_fails_what_is_still_pending(shared_standalone: StandaloneProcess, topic: str) -> None:
    await create_partitioned(shared_standalone, topic, 2)
    async with AsyncClient(shared_standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_max_publish_delay=30.0)
        futures = [await producer.send_async(b"%d" % i, key=f"k{i}") for i in range(10)]
        await producer.close()
        for future in futures:
            with pytest.raises(ProducerClosedError):
                future.result()


# ---- the blocking facade ----------------------------------------------------------------------


def test_sync_producer_routes_over_partitions(shared_standalone: StandaloneProcess, topic: str) -> None:
    asyncio.run(create_partitioned(shared_standalone, topic, 3))
    java = key_hash(HashingScheme.JavaStringHash)
    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(topic)
        assert producer.producer_name
        ids = [producer.send(b"%d" % i, key=f"k{i}") for i in range(9)]
        assert [i.partition for i in ids] == [java(f"k{i}") % 3 for i in range(9)]
        results: list[tuple[HeraldError | None, MessageId | None]] = []
        done = threading.Event()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            results.append((error, message_id))
            if len(results) == 20:
                done.set()

        for i in range(20):
            producer.send_async(b"a%d" % i, callback, key=f"a{i}")
        producer.flush()
        assert done.wait(10)
        assert all(error is None for error, _ in results)
        assert sorted(message_id.partition for _, message_id in results if message_id) == sorted(
            java(f"a{i}") % 3 for i in range(20))
        producer.close()


def test_sync_producer_blocks_for_room_in_the_partition_a_message_goes_to(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    """One pending message per partition: every send_async past the first waits for room in its
    own partition, and all arrive, each key's in order."""
    asyncio.run(create_partitioned(shared_standalone, topic, 2))
    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(topic, max_pending_messages_across_partitions=2, block_if_queue_full=True,
                                          batching_enabled=False)
        outcomes: dict[int, tuple[HeraldError | None, MessageId | None]] = {}
        lock = threading.Lock()

        def recorder(index: int) -> SendCallback:
            def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
                with lock:
                    outcomes[index] = (error, message_id)
            return callback

        for i in range(40):
            producer.send_async(b"%d" % i, recorder(i), key=f"k{i % 4}")
        producer.flush()
        assert len(outcomes) == 40 and all(error is None for error, _ in outcomes.values())
        ids = {i: message_id for i, (_, message_id) in outcomes.items() if message_id is not None}
        for k in range(4):
            mine = [ids[i] for i in range(k, 40, 4)]
            assert len({m.partition for m in mine}) == 1
            assert mine == sorted(mine)
        producer.close()


def test_sync_producer_router_errors_reach_the_caller(shared_standalone: StandaloneProcess, topic: str) -> None:
    asyncio.run(create_partitioned(shared_standalone, topic, 2))

    class NoRoute(Exception):
        pass

    def router(message: OutgoingMessage, num_partitions: int) -> int:
        if message.key == "nowhere":
            raise NoRoute("no partition for this key")
        return num_partitions if message.key == "past" else 1

    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(topic, message_router=router)
        with pytest.raises(InvalidArgumentError, match="returned partition 2"):
            producer.send(b"x", key="past")
        with pytest.raises(NoRoute):
            producer.send(b"x", key="nowhere")
        assert producer.send(b"x", key="fine").partition == 1
        producer.close()
        with pytest.raises(ProducerClosedError):
            producer.send(b"y")


def test_sync_producer_waiting_for_room_routes_each_message_once(
    shared_standalone: StandaloneProcess, topic: str,
) -> None:
    """A message offered again after waiting for room keeps the partition it was routed to: the
    router is asked once per message, and round robin does not skip a partition."""
    asyncio.run(create_partitioned(shared_standalone, topic, 2))
    calls: list[bytes] = []

    def router(message: OutgoingMessage, num_partitions: int) -> int:
        calls.append(message.value)
        return len(calls) % num_partitions

    with Client(shared_standalone.service_url) as client:
        for options in ({"message_router": router}, {}):
            producer = client.create_producer(topic, max_pending_messages_across_partitions=2,
                                              block_if_queue_full=True, batching_enabled=False, **options)
            outcomes: dict[int, tuple[HeraldError | None, MessageId | None]] = {}

            def callback(outcomes: dict[int, tuple[HeraldError | None, MessageId | None]], index: int,
                         error: HeraldError | None, message_id: MessageId | None) -> None:
                outcomes[index] = (error, message_id)

            for i in range(30):
                producer.send_async(b"%d" % i, functools.partial(callback, outcomes, i))
            producer.flush()
            assert len(outcomes) == 30 and all(error is None for error, _ in outcomes.values())
            partitions = [outcomes[i][1].partition for i in range(30)]  # type: ignore[union-attr]
            assert all(b == 1 - a for a, b in itertools.pairwise(partitions))  # strictly alternating
            producer.close()
        assert calls == [b"%d" % i for i in range(30)]
