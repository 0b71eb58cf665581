"""Moving subscriptions through a real `herald standalone`, over the wire: Seek on a consumer's
stream (to a message id, a publish time, the edges; answered, then the consumer reconnects), the
admin cursor operations (reset, skip, peek) and Unsubscribe with its refusals."""

from __future__ import annotations

import grpc
import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2
from herald.common.errors import NotFoundError, PreconditionFailedError
from herald.common.transport.rpc import error_from_rpc

from tests.helpers import unique_topic
from tests.wire import WireClient, WireConsumer, position, values_of


async def publish(wire: WireClient, topic: str, *values: bytes, publish_times: list[int] | None = None,
                  ) -> list[common_pb2.Position]:
    """One entry per value; their positions."""
    producer = await wire.producer(topic)
    positions = []
    for i, value in enumerate(values):
        options = {"publish_time": publish_times[i]} if publish_times else {}
        reply = await producer.send(value, **options)
        assert reply.HasField("receipt"), reply
        positions.append(common_pb2.Position(ledger_id=reply.receipt.ledger_id, entry_id=reply.receipt.entry_id))
    await producer.close()
    return positions


async def consume(wire: WireClient, topic: str, subscription: str, **options: object) -> WireConsumer:
    consumer = await wire.consumer(topic, subscription, **options)
    await consumer.flow(100)
    return consumer


def values(entries: list[broker_pb2.DeliveredEntry]) -> list[bytes]:
    return [value for entry in entries for value in values_of(entry)]


async def disconnected(consumer: WireConsumer) -> None:
    """The broker ends the stream of a consumer whose subscription moved: it must reconnect."""
    error = await consumer.event("error")
    assert error.error.code == common_pb2.SERVICE_NOT_READY and "reconnect" in error.error.message


# ---- seek on the consumer's stream ----

async def test_seek_to_a_message_id_redelivers_from_there_after_reconnecting(wire: WireClient) -> None:
    topic = unique_topic("seek")
    consumer = await consume(wire, topic, "s", initial_position=broker_pb2.EARLIEST)
    positions = await publish(wire, topic, b"a", b"b", b"c", b"d")
    got = await consumer.receive(4)
    await consumer.ack(*got)
    result = await consumer.seek(position=positions[1])
    assert not result.HasField("error")
    await disconnected(consumer)
    again = await consume(wire, topic, "s")
    assert values(await again.receive(3)) == [b"b", b"c", b"d"]


async def test_seek_by_publish_time_starts_at_the_first_message_published_then(wire: WireClient) -> None:
    topic = unique_topic("seek")
    consumer = await consume(wire, topic, "s", initial_position=broker_pb2.EARLIEST)
    await publish(wire, topic, b"a", b"b", b"c", publish_times=[1_000, 2_000, 3_000])
    await consumer.ack(*await consumer.receive(3))
    assert not (await consumer.seek(publish_time=1_500)).HasField("error")
    await disconnected(consumer)
    again = await consume(wire, topic, "s")
    assert values(await again.receive(2)) == [b"b", b"c"]


async def test_seek_to_the_edges(wire: WireClient) -> None:
    topic = unique_topic("seek")
    consumer = await consume(wire, topic, "s", initial_position=broker_pb2.EARLIEST)
    await publish(wire, topic, b"a", b"b")
    await consumer.receive(2)  # not acknowledged
    assert not (await consumer.seek(edge=broker_pb2.LATEST)).HasField("error")
    await disconnected(consumer)
    latest = await consume(wire, topic, "s")
    await publish(wire, topic, b"c")
    assert values(await latest.receive(1)) == [b"c"]
    assert await latest.sent_so_far() == []  # c first and alone: the unacknowledged ones were skipped over
    assert not (await latest.seek(edge=broker_pb2.EARLIEST)).HasField("error")
    await disconnected(latest)
    earliest = await consume(wire, topic, "s")
    assert values(await earliest.receive(3)) == [b"a", b"b", b"c"]


async def test_seek_without_a_target_is_refused_and_the_stream_goes_on(wire: WireClient) -> None:
    topic = unique_topic("seek")
    consumer = await consume(wire, topic, "s")
    result = await consumer.seek()
    assert result.error.code == common_pb2.INVALID_ARGUMENT
    assert "Seek needs a target" in result.error.message
    await publish(wire, topic, b"still here")
    assert values(await consumer.receive(1)) == [b"still here"]


# ---- admin: reset, skip, peek ----

async def test_admin_reset_skip_and_peek(wire: WireClient) -> None:
    topic = unique_topic("seek")
    admin = await wire.admin(topic)
    await admin.CreateSubscription(admin_pb2.CreateSubscriptionRequest(
        topic=topic, subscription="s", edge=broker_pb2.EARLIEST))
    positions = await publish(wire, topic, b"a", b"b", b"c", b"d", b"e")
    skipped = await admin.SkipMessages(admin_pb2.SkipMessagesRequest(topic=topic, subscription="s", count=2))
    assert skipped.skipped == 2
    peeked = await admin.PeekMessages(admin_pb2.PeekMessagesRequest(topic=topic, subscription="s", count=2))
    assert values(list(peeked.entries)) == [b"c", b"d"]
    assert [position(e) for e in peeked.entries] == positions[2:4]
    await admin.ResetCursor(admin_pb2.ResetCursorRequest(topic=topic, subscription="s", position=positions[1]))
    peeked = await admin.PeekMessages(admin_pb2.PeekMessagesRequest(topic=topic, subscription="s", count=1))
    assert values(list(peeked.entries)) == [b"b"]
    everything = await admin.SkipMessages(admin_pb2.SkipMessagesRequest(topic=topic, subscription="s", all=True))
    assert everything.skipped == 4
    consumer = await consume(wire, topic, "s")
    await publish(wire, topic, b"f")
    assert values(await consumer.receive(1)) == [b"f"]
    assert await consumer.sent_so_far() == []  # f first and alone: everything before was skipped
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await admin.ResetCursor(admin_pb2.ResetCursorRequest(topic=topic, subscription="nope",
                                                             edge=broker_pb2.EARLIEST))
    error = error_from_rpc(refused.value)
    assert isinstance(error, NotFoundError) and "subscription 'nope' does not exist" in str(error)


async def test_admin_reset_disconnects_the_consumers(wire: WireClient) -> None:
    topic = unique_topic("seek")
    consumer = await consume(wire, topic, "s", initial_position=broker_pb2.EARLIEST)
    await publish(wire, topic, b"a", b"b")
    await consumer.ack(*await consumer.receive(2))
    admin = await wire.admin(topic)
    await admin.ResetCursor(admin_pb2.ResetCursorRequest(topic=topic, subscription="s", publish_time=0))
    await disconnected(consumer)
    again = await consume(wire, topic, "s")
    assert values(await again.receive(2)) == [b"a", b"b"]


# ---- unsubscribe ----

async def test_the_only_consumer_unsubscribes_and_its_stream_ends(wire: WireClient) -> None:
    topic = unique_topic("seek")
    consumer = await consume(wire, topic, "s", initial_position=broker_pb2.EARLIEST)
    await publish(wire, topic, b"a")
    await consumer.receive(1)
    result = await consumer.unsubscribe()
    assert not result.HasField("error")
    await consumer.stream.ended.wait()
    assert consumer.stream.end_error is None  # ended cleanly
    admin = await wire.admin(topic)
    listed = await admin.ListSubscriptions(admin_pb2.TopicRequest(topic=topic))
    assert list(listed.subscriptions) == []
    fresh = await consume(wire, topic, "s")  # a new subscription, at the latest position
    await publish(wire, topic, b"b")
    assert values(await fresh.receive(1)) == [b"b"]
    assert await fresh.sent_so_far() == []  # b first and alone: a is not the new subscription's


async def test_unsubscribe_is_refused_while_other_consumers_are_connected(wire: WireClient) -> None:
    topic = unique_topic("seek")
    first = await consume(wire, topic, "s", type=broker_pb2.SHARED)
    second = await consume(wire, topic, "s", type=broker_pb2.SHARED)
    result = await first.unsubscribe()
    assert result.error.code == common_pb2.PRECONDITION_FAILED
    assert "has 1 other consumer(s) connected" in result.error.message
    await publish(wire, topic, b"a", b"b", b"c", b"d")  # both streams go on
    got: list[broker_pb2.DeliveredEntry] = []
    for _ in range(100):
        got += await first.receive(4, timeout=0.05) + await second.receive(4, timeout=0.05)
        if len(got) >= 4:
            break
    assert sorted(values(got)) == [b"a", b"b", b"c", b"d"]
    admin = await wire.admin(topic)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await admin.DeleteSubscription(admin_pb2.DeleteSubscriptionRequest(topic=topic, subscription="s"))
    assert isinstance(error_from_rpc(refused.value), PreconditionFailedError)
    await admin.DeleteSubscription(admin_pb2.DeleteSubscriptionRequest(topic=topic, subscription="s", force=True))
    await disconnected(first)
    await disconnected(second)
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await admin.DeleteSubscription(admin_pb2.DeleteSubscriptionRequest(topic=topic, subscription="s"))
    assert isinstance(error_from_rpc(missing.value), NotFoundError)
