"""Non-persistent topics through a real `herald standalone`, over the wire: receipts (-1, -1),
delivery only to consumers connected with permits, the pending limit (a standalone with a small
HERALD_BROKER_NON_PERSISTENT_MAX_PENDING and a consumer whose stream stops taking), nothing stored,
the producer checks, and the client library on such a topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2
from herald.client import AsyncClient
from herald.metadata.embedded import EmbeddedMetadataStore

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import unique_topic
from tests.wire import WireClient, WireError, make_entry, values_of

MAX_PENDING = 4


@pytest.fixture(scope="module")
def limited_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone whose non-persistent topics hold at most MAX_PENDING entries in flight."""
    with running_standalone(tmp_path_factory.mktemp("limited") / "data",
                            non_persistent_max_pending=MAX_PENDING) as server:
        yield server


def receipt_id(reply: broker_pb2.ProduceResponse) -> tuple[int, int]:
    assert reply.HasField("receipt"), reply
    return reply.receipt.ledger_id, reply.receipt.entry_id


async def topic_stats(wire: WireClient, topic: str) -> admin_pb2.TopicStats:
    admin = await wire.admin(topic)
    stats: admin_pb2.TopicStats = await admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=topic))
    return stats


async def permits_arrived(wire: WireClient, topic: str, consumers: int) -> None:
    """Wait until the broker has seen a flow from each of `consumers` consumers (they travel on
    other streams than the sends that follow)."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        stats = await topic_stats(wire, topic)
        with_permits = [c for s in stats.subscriptions for c in s.consumer_stats if c.available_permits > 0]
        if len(with_permits) >= consumers:
            return
        assert asyncio.get_running_loop().time() < deadline, f"permits never arrived: {stats}"
        await asyncio.sleep(0.02)


class StalledConsumer:
    """A Consume stream whose replies nobody reads: once gRPC's buffers are full the broker cannot
    send it anything more, and what it was handed stays pending on the topic."""

    def __init__(self, call: Any, requests: asyncio.Queue[Any]) -> None:
        self.call = call
        self.requests = requests

    @classmethod
    async def open(cls, wire: WireClient, topic: str, subscription: str, permits: int) -> StalledConsumer:
        stub = await wire.broker(topic)
        requests: asyncio.Queue[Any] = asyncio.Queue()
        await requests.put(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
            topic=topic, subscription=subscription)))
        call = stub.Consume(cls._feed(requests))
        consumer = cls(call, requests)
        reply = await asyncio.wait_for(call.read(), 10)
        assert reply.HasField("subscribed"), reply
        await requests.put(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=permits)))
        return consumer

    @staticmethod
    async def _feed(requests: asyncio.Queue[Any]) -> AsyncIterator[Any]:
        while (request := await requests.get()) is not None:
            yield request

    async def read_entries(self, count: int) -> list[broker_pb2.DeliveredEntry]:
        """Start taking again: read until `count` entries came."""
        got: list[broker_pb2.DeliveredEntry] = []
        while len(got) < count:
            reply = await asyncio.wait_for(self.call.read(), 10)
            assert reply.HasField("entries"), reply
            got.extend(reply.entries.entries)
        return got

    def close(self) -> None:
        self.requests.put_nowait(None)
        self.call.cancel()


# ---- receipts and delivery ----

async def test_receipts_are_minus_one(wire: WireClient) -> None:
    topic = unique_topic("np", persistent=False)
    producer = await wire.producer(topic)
    assert producer.last_sequence_id == -1
    replies = [await producer.send(b"m%d" % i) for i in range(3)]
    assert [receipt_id(r) for r in replies] == [(-1, -1)] * 3
    assert [r.receipt.sequence_id for r in replies] == [0, 1, 2]


async def test_exclusive_and_shared_subscriptions_get_what_is_published_while_connected(wire: WireClient) -> None:
    topic = unique_topic("np", persistent=False)
    producer = await wire.producer(topic)
    await producer.send(b"before anyone")
    exclusive = await wire.consumer(topic, "exclusive", type=broker_pb2.EXCLUSIVE)
    shared_a = await wire.consumer(topic, "shared", type=broker_pb2.SHARED, consumer_name="a")
    shared_b = await wire.consumer(topic, "shared", type=broker_pb2.SHARED, consumer_name="b")
    for consumer in (exclusive, shared_a, shared_b):
        await consumer.flow(100)
    await permits_arrived(wire, topic, 3)
    for i in range(4):
        await producer.send(b"m%d" % i)
    got = await exclusive.receive(4)
    assert [values_of(e) for e in got] == [[b"m0"], [b"m1"], [b"m2"], [b"m3"]]
    assert [(e.ledger_id, e.entry_id, e.redelivery_count) for e in got] == [(-1, 0, 0), (-1, 1, 0),
                                                                             (-1, 2, 0), (-1, 3, 0)]
    shared = await shared_a.receive(2) + await shared_b.receive(2)
    assert sorted(v for e in shared for v in values_of(e)) == [b"m0", b"m1", b"m2", b"m3"]
    # Acks and redelivery requests are accepted, and nothing comes back.
    await exclusive.ack(got[0])
    await exclusive.ack(got[-1], cumulative=True)
    await shared_a.redeliver(*shared[:2])
    await exclusive.handled()  # no error: the first error on each stream is the one handled() asks for
    await shared_a.handled()
    assert await exclusive.sent_so_far() == await shared_a.sent_so_far() == []
    assert exclusive.events == shared_a.events == []


async def test_a_message_published_while_no_consumer_has_permits_is_not_delivered_later(wire: WireClient) -> None:
    topic = unique_topic("np", persistent=False)
    consumer = await wire.consumer(topic, "sub", type=broker_pb2.SHARED)
    producer = await wire.producer(topic)
    await producer.send(b"missed-1")
    await producer.send(b"missed-2")
    await consumer.flow(10)
    await permits_arrived(wire, topic, 1)
    await producer.send(b"seen")
    (entry,) = await consumer.receive(1)
    assert values_of(entry) == [b"seen"]
    assert await consumer.sent_so_far() == []
    stats = await topic_stats(wire, topic)
    assert stats.persistent is False
    (sub,) = stats.subscriptions
    assert (sub.msg_dropped_counter, sub.msg_out_counter, sub.durable) == (2, 1, False)


async def test_subscribing_beyond_an_exclusive_consumer_is_refused(wire: WireClient) -> None:
    topic = unique_topic("np", persistent=False)
    await wire.consumer(topic, "sub", type=broker_pb2.EXCLUSIVE)
    with pytest.raises(WireError) as refused:
        await wire.consumer(topic, "sub", type=broker_pb2.EXCLUSIVE)
    assert refused.value.code == common_pb2.CONSUMER_BUSY
    assert refused.value.error.message == "Exclusive consumer is already connected"


# ---- producer checks ----

async def test_a_corrupt_entry_gets_the_checksum_error(wire: WireClient) -> None:
    topic = unique_topic("np", persistent=False)
    producer = await wire.producer(topic)
    corrupt = bytearray(make_entry(producer.name, 0, b"hello"))
    corrupt[-1] ^= 0xFF
    reply = await producer.send_entry(bytes(corrupt), 0)
    assert reply.HasField("send_error"), reply
    assert (reply.send_error.sequence_id, reply.send_error.error.code) == (0, common_pb2.CHECKSUM_ERROR)
    assert reply.send_error.error.message == "Checksum failed on the broker"
    assert receipt_id(await producer.send_entry(make_entry(producer.name, 1, b"fine"), 1)) == (-1, -1)


async def test_a_producer_name_in_use_is_refused(wire: WireClient) -> None:
    topic = unique_topic("np", persistent=False)
    await wire.producer(topic, "only-one")
    with pytest.raises(WireError) as refused:
        await wire.producer(topic, "only-one")
    assert refused.value.code == common_pb2.PRODUCER_BUSY


# ---- the pending limit ----

async def test_over_the_pending_limit_messages_are_dropped_with_minus_one_receipts(
    limited_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("limited", persistent=False)
    async with WireClient(limited_standalone.port) as wire:
        stalled = await StalledConsumer.open(wire, topic, "stalled", permits=1_000_000)
        reading = await wire.consumer(topic, "reading", type=broker_pb2.SHARED)
        await reading.flow(1_000_000)
        await permits_arrived(wire, topic, 2)
        producer = await wire.producer(topic)
        value = b"x" * 65536
        sent = 0
        stats = await topic_stats(wire, topic)
        # Send until the stalled stream's gRPC buffers are full and MAX_PENDING entries wait for it.
        while stats.msg_dropped_counter == 0:
            assert sent < 2000, "nothing was ever dropped"
            for _ in range(20):
                assert receipt_id(await producer.send(value)) == (-1, -1)
            sent += 20
            stats = await topic_stats(wire, topic)
        accepted = stats.msg_in_counter
        assert accepted + stats.msg_dropped_counter == sent
        # The reading subscription got every accepted message and nothing else.
        assert len(await reading.receive(accepted)) == accepted
        assert await reading.sent_so_far() == []
        assert sorted(s.msg_dropped_counter for s in stats.subscriptions) == [0, 0]
        # Once the stalled stream takes its entries again, messages go through again.
        await stalled.read_entries(accepted)
        await producer.send(b"after")
        (entry,) = await reading.receive(1)
        assert values_of(entry) == [b"after"]
        after = await topic_stats(wire, topic)
        assert (after.msg_in_counter, after.msg_dropped_counter) == (accepted + 1, stats.msg_dropped_counter)
        stalled.close()


# ---- storage ----

async def test_nothing_is_stored(standalone: StandaloneProcess) -> None:
    topic = "non-persistent://public/default/unstored"
    async with WireClient(standalone.port) as wire:
        consumer = await wire.consumer(topic, "sub", type=broker_pb2.EXCLUSIVE)
        await consumer.flow(10)
        await permits_arrived(wire, topic, 1)
        producer = await wire.producer(topic)
        await producer.send(b"a")
        assert len(await consumer.receive(1)) == 1
    standalone.stop()
    store = EmbeddedMetadataStore(str(Path(standalone.data_dir) / "metadata.db"))
    await store.start()
    try:
        keys = [key for prefix in ("/managed-ledgers/", "/cursors/", "/dedup/", "/ledgers/")
                for key in await store.list(prefix)]
        assert keys == []
        assert await store.get("/non-persistent-topics/public/default/unstored") is not None
    finally:
        await store.close()


# ---- the client library ----

async def test_the_client_produces_and_consumes_on_a_non_persistent_topic(
    shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("client", persistent=False)
    async with AsyncClient(shared_standalone.service_url) as client:
        consumer = await client.subscribe(topic, "sub")
        async with WireClient(shared_standalone.port) as wire:
            await permits_arrived(wire, topic, 1)
        producer = await client.create_producer(topic)
        ids = [await producer.send(b"m%d" % i) for i in range(3)]
        assert [(i.ledger_id, i.entry_id) for i in ids] == [(-1, -1)] * 3
        received = []
        for _ in range(3):
            message = await consumer.receive(timeout=10)
            assert message is not None
            received.append(message)
            consumer.acknowledge(message)
        assert [m.data() for m in received] == [b"m0", b"m1", b"m2"]
        assert received[0].topic == topic
