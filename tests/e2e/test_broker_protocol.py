"""The broker's Produce and Consume streams spoken directly over gRPC, for the checks a well-behaved
client never triggers: corrupt entries, streams that do not start with registration, duplicates."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from herald.api.v1 import broker_pb2, broker_pb2_grpc, common_pb2, lookup_pb2, lookup_pb2_grpc
from herald.client.admin import AdminClient
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_topic
from tests.wire import WireClient

Broker = tuple[broker_pb2_grpc.BrokerServiceStub, str]
Stub = broker_pb2_grpc.BrokerServiceStub


@pytest.fixture
def broker(standalone: StandaloneProcess) -> Iterator[Broker]:
    with grpc.insecure_channel(f"127.0.0.1:{standalone.port}") as lookup_channel:
        lookup = lookup_pb2_grpc.LookupServiceStub(lookup_channel)
        owner = lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic="raw"))
    with grpc.insecure_channel(owner.broker_address) as channel:
        yield broker_pb2_grpc.BrokerServiceStub(channel), "raw"


def entry(producer: str, sequence_id: int, text: bytes) -> bytes:
    payload = bytearray()
    pack_record(payload, text)
    return encode_entry(EntryMetadata(producer_name=producer, sequence_id=sequence_id,
                                      highest_sequence_id=sequence_id, num_messages=1, batched=True), payload)


def send(sequence_id: int, data: bytes) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
        sequence_id=sequence_id, highest_sequence_id=sequence_id, num_messages=1, entry=data))


def produce(stub: Stub, *requests: broker_pb2.ProduceRequest) -> list[broker_pb2.ProduceResponse]:
    """Send the requests on one stream and collect one reply each (registration included).

    A producer name still held by a stream the test just cancelled is busy until the broker sees
    the cancellation: retry on PRODUCER_BUSY, as clients do."""
    deadline = time.monotonic() + 10
    while True:
        call = stub.Produce(iter(requests))
        replies = []
        for reply in call:
            replies.append(reply)
            if len(replies) == len(requests) or reply.HasField("error"):
                call.cancel()
                break
        busy = replies and replies[0].error.code == common_pb2.PRODUCER_BUSY
        if not busy or time.monotonic() > deadline:
            return replies
        time.sleep(0.05)


def register(topic: str, name: str) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(register=broker_pb2.RegisterProducer(topic=topic, producer_name=name))


def test_checksum_mismatch_is_refused_and_nothing_is_stored(broker: Broker) -> None:
    stub, topic = broker
    corrupt = bytearray(entry("p1", 0, b"hello"))
    corrupt[-1] ^= 0x55
    registered, reply = produce(stub, register(topic, "p1"), send(0, bytes(corrupt)))
    assert registered.registered.producer_name == "p1"
    assert reply.send_error.error.code == common_pb2.CHECKSUM_ERROR
    assert "Checksum failed on the broker" in reply.send_error.error.message
    # The same sequence id with a good entry is then accepted: the bad one was not stored.
    _, good = produce(stub, register(topic, "p1"), send(0, entry("p1", 0, b"hello")))
    assert good.receipt.ledger_id >= 0


def test_resent_sequence_ids_are_acknowledged_without_storing(broker: Broker) -> None:
    stub, topic = broker
    first = produce(stub, register(topic, "dup"), send(0, entry("dup", 0, b"a")), send(1, entry("dup", 1, b"b")))
    assert [r.receipt.entry_id >= 0 for r in first[1:]] == [True, True]
    again = produce(stub, register(topic, "dup"), send(1, entry("dup", 1, b"b")), send(2, entry("dup", 2, b"c")))
    assert again[0].registered.last_sequence_id == 1
    assert (again[1].receipt.ledger_id, again[1].receipt.entry_id) == (-1, -1)
    assert again[2].receipt.entry_id == first[2].receipt.entry_id + 1


def test_stream_must_start_with_registration(broker: Broker) -> None:
    stub, _ = broker
    (reply,) = produce(stub, send(0, entry("x", 0, b"a")))
    assert reply.error.code == common_pb2.INVALID_ARGUMENT
    consume = next(stub.Consume(iter([broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=1))])))
    assert consume.error.code == common_pb2.INVALID_ARGUMENT


def test_invalid_topic_name_is_refused_at_registration(broker: Broker) -> None:
    stub, _ = broker
    (reply,) = produce(stub, register("no spaces allowed", "p"))
    assert reply.error.code == common_pb2.INVALID_ARGUMENT
    assert "invalid" in reply.error.message


def test_topic_owned_elsewhere_is_refused_with_not_owner(broker: Broker) -> None:
    stub, _ = broker
    # Never looked up, so lookup assigned it to no one: the broker must not serve it.
    (reply,) = produce(stub, register("never-looked-up", "p"))
    assert reply.error.code == common_pb2.NOT_OWNER


async def test_streams_cancelled_while_registering_leave_no_producer_or_consumer(
    shared_standalone: StandaloneProcess, admin: AdminClient,
) -> None:
    """A client that vanishes while its producer or consumer is being registered (the broker's
    reply cannot be written) must not leave it attached: a lingering producer holds its name and
    shows in stats forever. Cancelled at many points from just after the request to well after
    the reply."""
    topic = unique_topic("vanishing")
    async with WireClient(shared_standalone.port) as wire:
        stub = await wire.broker(topic)
        for attempt in range(120):
            delay = (attempt % 30) / 5000  # 0 to 6 ms
            produce_call = stub.Produce(_then_silence(register(topic, "")))
            consume_call = stub.Consume(_then_silence(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
                topic=topic, subscription="s", type=broker_pb2.SHARED))))
            await asyncio.sleep(delay)
            produce_call.cancel()
            consume_call.cancel()

    async def nothing_attached() -> tuple[int, int]:
        stats = await admin.topic_stats(topic)
        return len(stats.producers), sum(s.consumers for s in stats.subscriptions)

    await eventually(nothing_attached, f"every producer and consumer of {topic} gone", until=lambda n: n == (0, 0))


async def _then_silence(first: Any) -> AsyncIterator[Any]:
    """A request stream that sends one request and then stays open, saying nothing."""
    yield first
    await asyncio.Event().wait()


async def test_an_idle_producer_stream_is_told_when_the_broker_closes_its_producer(
    shared_standalone: StandaloneProcess, admin: AdminClient,
) -> None:
    """The Produce handler waits for the next send in its own task (broker_servicer._Reads); the
    broker closing the producer meanwhile (an unload) must end that wait with an error telling the
    client to reconnect, and end the stream."""
    topic = unique_topic("idle-unload")
    async with WireClient(shared_standalone.port) as wire:
        producer, _ = await wire.register(topic, "idle")
        receipt = await producer.send(b"a")
        assert receipt.receipt.entry_id >= 0
        await admin.unload_topic(topic)  # the handler is waiting for the next send
        reply = await producer.stream.reply()
        assert reply.error.code == common_pb2.SERVICE_NOT_READY
        assert reply.error.message == "producer idle was closed by the broker: reconnect"
        await asyncio.wait_for(producer.stream.ended.wait(), 10)


async def test_an_idle_producer_stream_cancelled_by_its_client_leaves_no_producer(
    shared_standalone: StandaloneProcess, admin: AdminClient,
) -> None:
    """A client gone while the handler waits for its next send (the server cancels the handler, not
    the broker): the producer is detached, and its name free again."""
    topic = unique_topic("idle-cancel")
    async with WireClient(shared_standalone.port) as wire:
        producer, _ = await wire.register(topic, "gone")
        assert (await producer.send(b"a")).receipt.entry_id >= 0
        producer.stream.call.cancel()

        async def producers() -> int:
            return len((await admin.topic_stats(topic)).producers)

        await eventually(producers, f"the producer of {topic} gone", until=lambda n: n == 0)
        again, registered = await wire.register(topic, "gone")
        assert registered.last_sequence_id == 0
        assert (await again.send(b"b")).receipt.entry_id >= 0
