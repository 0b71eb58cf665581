"""The consumer's protocol object without any connection (issue 17, item 4): it is fed the broker's
replies and asked what to write. A full FLOW first thing, then one each time half the queue was
taken (none while paused or disconnected); delivered entries unpacked into messages, acks tracked
per batch index, an Exclusive subscription's rewind and a reconnect dropping what would come again,
chunks put back together; and each entry's bytes read out of the reply once."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterable
from typing import Any

import pytest
from herald.api.v1 import broker_pb2, common_pb2, entry_pb2
from herald.client.config import ConsumerConfig, ConsumerType
from herald.client.consumer_protocol import ConsumerProtocol, Position
from herald.client.message import DetailedMessage, Message
from herald.common.codec.compression import compress
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record
from herald.common.codec.message_id import MessageId
from herald.common.errors import ConnectionError_, ConsumerBusyError

from tests.unit.test_chunk_assembly import chunks

TOPIC = "persistent://public/default/protocol"
MIB = 1024 * 1024


class Owner:
    """What the protocol tells the consumer that owns it."""

    def __init__(self) -> None:
        self.delivered = 0
        self.dropped: list[Position | None] = []
        self.answers: dict[int, str] = {}  # request id -> the kind answered
        self.lost: list[set[int]] = []
        self.active: list[bool] = []
        self.acks_queued = 0
        self.expiries: list[float] = []

    def protocol(self, queue_size: int = 10, **options: Any) -> ConsumerProtocol[bytes]:
        return ConsumerProtocol(
            TOPIC, ConsumerConfig("sub", receiver_queue_size=queue_size, **options), None,
            on_delivered=self._delivered, on_dropped=self.dropped.append, on_answered=self._answered,
            on_lost=self.lost.append, on_active_change=self.active.append, on_acks_queued=self._acks_queued,
            on_chunk_expiry=self.expiries.append)

    def _delivered(self, entries: Iterable[broker_pb2.DeliveredEntry]) -> None:
        self.delivered += 1

    def _answered(self, result: broker_pb2.CommandResult) -> str | None:
        return self.answers.pop(result.request_id, None)

    def _acks_queued(self) -> None:
        self.acks_queued += 1


def entry(*values: bytes, sequence_id: int = 0, batched: bool = True, compression: int = 0) -> bytes:
    payload = bytearray()
    for value in values:
        pack_record(payload, value)
    metadata = EntryMetadata(producer_name="p", sequence_id=sequence_id,
                             highest_sequence_id=sequence_id + len(values) - 1, num_messages=len(values),
                             batched=batched, publish_time=1)
    if compression:
        metadata.compression = compression  # type: ignore[assignment]
        metadata.uncompressed_size = len(payload)
        return encode_entry(metadata, compress(compression, payload))
    return encode_entry(metadata, payload)


def entries(*delivered: tuple[int, bytes]) -> broker_pb2.ConsumeResponse:
    """A reply delivering (entry id, data) pairs of ledger 1."""
    return broker_pb2.ConsumeResponse(entries=broker_pb2.EntryBatch(entries=[
        broker_pb2.DeliveredEntry(ledger_id=1, entry_id=entry_id, data=data) for entry_id, data in delivered]))


def requests(protocol: ConsumerProtocol[Any]) -> list[str]:
    """What the protocol asks to write now, taken as written, shortly: "flow 5", "ack 1:2", ..."""
    out = []
    while (request := protocol.next_request()) is not None:
        protocol.request_written()
        kind = request.WhichOneof("command")
        if kind == "flow":
            out.append(f"flow {request.flow.permits}")
        elif kind == "ack":
            out.append("ack " + ",".join(f"{p.ledger_id}:{p.entry_id}" for p in request.ack.positions))
        else:
            out.append(str(kind))
    return out


def connected(owner: Owner, queue_size: int = 10, **options: Any) -> ConsumerProtocol[bytes]:
    protocol = owner.protocol(queue_size, **options)
    protocol.handshake_reply(broker_pb2.ConsumeResponse(subscribed=broker_pb2.Subscribed(consumer_name="c-1")))
    protocol.on_connected(None, first=True)
    return protocol


def take(protocol: ConsumerProtocol[Any], count: int) -> list[Any]:
    """Take messages from the queue as the receive calls do."""
    taken = [protocol.queue.popleft() for _ in range(count)]
    protocol.taken(count)
    return taken


# ---- the handshake and flow permits -----------------------------------------------------------

def test_the_subscribe_request_says_what_the_config_and_the_owner_ask() -> None:
    def non_durable(subscribe: broker_pb2.Subscribe) -> None:
        subscribe.non_durable = True

    protocol: ConsumerProtocol[bytes] = ConsumerProtocol(
        TOPIC, ConsumerConfig("sub", consumer_type=ConsumerType.Shared, consumer_name="me", properties={"a": "b"},
                              priority_level=2), adjust_subscribe=non_durable)
    subscribe = protocol.handshake_request().subscribe
    assert (subscribe.topic, subscribe.subscription, subscribe.type, subscribe.consumer_name,
            subscribe.priority_level, dict(subscribe.properties), subscribe.non_durable) == (
        TOPIC, "sub", broker_pb2.SHARED, "me", 2, {"a": "b"}, True)
    with pytest.raises(ConsumerBusyError, match="busy"):
        protocol.handshake_reply(broker_pb2.ConsumeResponse(
            error=common_pb2.Error(code=common_pb2.CONSUMER_BUSY, message="busy")))
    with pytest.raises(ConnectionError_, match="answered a subscription with 'entries'"):
        protocol.handshake_reply(entries())


def test_a_full_flow_first_then_one_each_time_half_the_queue_was_taken() -> None:
    owner = Owner()
    protocol = connected(owner, queue_size=10)
    assert protocol.name == "c-1"
    assert requests(protocol) == ["flow 10"]
    protocol.on_reply(entries((0, entry(*[b"m"] * 10))))
    assert len(protocol.queue) == 10 and owner.delivered == 1 and requests(protocol) == []
    take(protocol, 4)
    assert requests(protocol) == []
    take(protocol, 1)
    assert requests(protocol) == ["flow 5"]
    take(protocol, 5)
    assert requests(protocol) == ["flow 5"]


def test_no_flow_while_paused_and_what_is_owed_on_resume() -> None:
    owner = Owner()
    protocol = owner.protocol(queue_size=10)
    protocol.pause()
    protocol.on_connected(None, first=True)
    assert requests(protocol) == []
    protocol.resume()
    assert requests(protocol) == ["flow 10"]
    protocol.on_reply(entries((0, entry(*[b"m"] * 10))))
    protocol.pause()
    take(protocol, 8)
    assert requests(protocol) == []
    protocol.resume()
    assert requests(protocol) == ["flow 8"]


def test_a_reconnect_drops_what_is_held_keeps_unwritten_acks_and_commands_and_asks_for_a_full_queue() -> None:
    owner = Owner()
    protocol = connected(owner, queue_size=10)
    requests(protocol)
    protocol.on_reply(entries((0, entry(b"a", b"b", b"c")), (1, entry(b"d"))))
    protocol.acknowledge(1, 1, -1)
    protocol.send(broker_pb2.ConsumeRequest(ack=broker_pb2.Ack(positions=[common_pb2.Position(ledger_id=1,
                                                                                             entry_id=1)])))
    protocol.send(broker_pb2.ConsumeRequest(seek=broker_pb2.Seek(request_id=7)))
    protocol.send(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=3)))
    protocol.on_disconnected()
    assert not protocol.queue and protocol.epoch == 1 and protocol.reconnects == 1
    assert owner.lost == [{7}] and owner.dropped == [None]
    take_nothing = protocol.permits
    protocol.taken(9)  # permits while disconnected are not sent: the next stream starts full
    assert take_nothing == 0 and protocol.outbox[-1].WhichOneof("command") == "seek"
    protocol.on_connected(None, first=False)
    assert requests(protocol) == ["flow 10", "ack 1:1", "seek"]


# ---- delivered entries --------------------------------------------------------------------------

def test_an_entry_is_unpacked_into_messages_with_their_ids() -> None:
    owner = Owner()
    protocol = connected(owner)
    protocol.on_reply(entries((4, entry(b"a", b"b", sequence_id=20)), (5, entry(b"c", sequence_id=22, batched=False))))
    a, b, c = protocol.queue
    assert [m.data() for m in (a, b, c)] == [b"a", b"b", b"c"]
    assert [m.message_id for m in (a, b, c)] == [MessageId(1, 4, -1, 0), MessageId(1, 4, -1, 1),
                                                 MessageId(1, 5, -1, -1)]
    assert [m.sequence_id for m in (a, b, c)] == [20, 21, 22]
    assert (protocol.received, protocol.received_bytes > 0) == (3, True)


def mixed_entry() -> bytes:
    """A batch of plain records and records with a key, properties, an event time or a sequence id."""
    payload = bytearray()
    pack_record(payload, b"plain")
    pack_record(payload, b"keyed", key="k", properties={"p": "v"}, event_time=5)
    pack_record(payload, b"numbered", sequence_id=99)
    pack_record(payload, b"plain too")
    metadata = EntryMetadata(producer_name="p", sequence_id=40, highest_sequence_id=99, num_messages=4,
                             batched=True, publish_time=1)
    return encode_entry(metadata, payload)


def test_plain_and_detailed_messages_read_alike_first_delivered_or_redelivered() -> None:
    """A plain record's message (three fields) and a detailed one answer every question the same
    way, whether the batch comes whole (the one-pass unpack) or again after a partial ack."""
    protocol = connected(Owner())
    protocol.on_reply(entries((3, mixed_entry())))
    first = list(protocol.queue)
    assert protocol.acknowledge(1, 3, 1, 4) is False  # the keyed one: the redelivery brings three
    protocol.queue.clear()
    protocol.on_reply(entries((3, mixed_entry())))
    again = list(protocol.queue)
    for messages, indexes in ((first, [0, 1, 2, 3]), (again, [0, 2, 3])):
        shown = [(m.data(), m.key, m.properties, m.event_time, m.sequence_id, m.message_id.batch_index,
                  m.producer_name, m.publish_time) for m in messages]
        assert shown == [row for row in [
            (b"plain", None, {}, None, 40, 0, "p", 1),
            (b"keyed", "k", {"p": "v"}, 5, 41, 1, "p", 1),
            (b"numbered", None, {}, None, 99, 2, "p", 1),
            (b"plain too", None, {}, None, 43, 3, "p", 1)] if row[5] in indexes]
    plain = first[0]
    assert type(plain) is Message and isinstance(first[1], DetailedMessage)
    plain.properties["changed"] = "here"  # a caller's own dict
    assert plain.properties == {}


def test_a_corrupt_entry_is_dropped_and_its_permits_go_back() -> None:
    owner = Owner()
    protocol = connected(owner, queue_size=4)
    requests(protocol)
    corrupt = bytearray(entry(b"a", b"b"))
    corrupt[-1] ^= 1
    protocol.on_reply(entries((0, bytes(corrupt))))
    assert not protocol.queue and protocol.corrupt_entries == 1
    assert requests(protocol) == ["flow 2"]  # its two permits, given back at half the queue


def test_messages_acked_in_a_batch_are_not_queued_when_it_comes_again() -> None:
    owner = Owner()
    protocol = connected(owner)
    data = entry(b"a", b"b", b"c")
    protocol.on_reply(entries((2, data)))
    assert protocol.acknowledge(1, 2, 1, 3) is False  # one of three: the entry is not acked yet
    protocol.queue.clear()
    protocol.on_reply(entries((2, data)))  # redelivered
    assert [m.data() for m in protocol.queue] == [b"a", b"c"]
    assert protocol.acknowledge(1, 2, 0, 3) is False
    assert protocol.acknowledge(1, 2, 2, 3) is True  # the last one: the entry is acked
    assert protocol.tracker.take() == ([(1, 2)], None)


def test_an_exclusive_subscription_rewinding_drops_what_comes_again() -> None:
    owner = Owner()
    protocol = connected(owner, consumer_type=ConsumerType.Exclusive)
    protocol.on_reply(entries((5, entry(b"5")), (6, entry(b"6")), (7, entry(b"7"))))
    take(protocol, 1)  # 5 was received
    protocol.on_reply(entries((6, entry(b"6")), (7, entry(b"7"))))  # the broker went back to 6
    assert [m.data() for m in protocol.queue] == [b"6", b"7"]  # each once
    assert owner.dropped == [(1, 6)]


def test_a_shared_subscription_does_not_rewind() -> None:
    owner = Owner()
    protocol = connected(owner, consumer_type=ConsumerType.Shared)
    protocol.on_reply(entries((5, entry(b"5")), (6, entry(b"6"))))
    protocol.on_reply(entries((5, entry(b"5"))))  # a redelivery among others' entries
    assert [m.data() for m in protocol.queue] == [b"5", b"6", b"5"] and owner.dropped == []


def test_chunks_become_one_message_under_the_last_chunks_id_and_acking_it_acks_every_chunk() -> None:
    owner = Owner()
    protocol = connected(owner, queue_size=6, ack_group_time=10.0)
    requests(protocol)
    pieces = chunks(b"v" * 100, 30)
    assert len(pieces) == 4
    delivered = [(index, encode_entry(metadata, data)) for index, (metadata, data) in enumerate(pieces)]
    protocol.on_reply(entries(*delivered[:-1]))
    assert not protocol.queue and owner.expiries  # the incomplete message's expiry is asked for
    assert requests(protocol) == ["flow 3"]  # each chunk's permit given back at once
    protocol.on_reply(entries(delivered[-1]))
    (message,) = protocol.queue
    last = len(pieces) - 1
    assert message.data() == b"v" * 100 and message.message_id == MessageId(1, last, -1, -1)
    assert protocol.acknowledge(1, last, -1) is True
    assert protocol.tracker.take() == ([(1, index) for index in range(len(pieces))], None)


def test_an_answered_seek_drops_what_is_held_and_what_the_old_stream_still_brings() -> None:
    owner = Owner()
    protocol = connected(owner)
    protocol.on_reply(entries((0, entry(b"a"))))
    owner.answers[3] = "seek"
    protocol.on_reply(broker_pb2.ConsumeResponse(result=broker_pb2.CommandResult(request_id=3)))
    assert not protocol.queue and protocol.epoch == 1 and owner.dropped == [None]
    protocol.on_reply(entries((1, entry(b"b"))))  # from before the seek: the broker ends this stream
    assert not protocol.queue
    protocol.on_disconnected()
    protocol.on_connected(None, first=False)
    protocol.on_reply(entries((0, entry(b"a"))))
    assert [m.data() for m in protocol.queue] == [b"a"]


def test_failover_changes_and_the_end_of_the_topic_are_told() -> None:
    owner = Owner()
    protocol = connected(owner)
    protocol.on_reply(broker_pb2.ConsumeResponse(active_change=broker_pb2.ActiveConsumerChange(is_active=True)))
    protocol.on_reply(broker_pb2.ConsumeResponse(end_of_topic=broker_pb2.ReachedEndOfTopic()))
    assert owner.active == [True] and protocol.end_of_topic


def test_redelivering_everything_drops_the_queue_and_asks_once() -> None:
    owner = Owner()
    protocol = connected(owner, queue_size=4)
    requests(protocol)
    protocol.on_reply(entries((0, entry(b"a", b"b", b"c", b"d"))))
    protocol.redeliver_all()
    assert not protocol.queue and owner.dropped == [None]
    assert requests(protocol) == ["redeliver", "flow 4"]


# ---- the payload path -------------------------------------------------------------------------

class CountingEntry:
    """A delivered entry that counts how often its bytes are read out of the reply (each read of
    a bytes field of a upb message is a copy of it)."""

    def __init__(self, delivered: broker_pb2.DeliveredEntry) -> None:
        self._delivered = delivered
        self.data_reads = 0

    def __getattr__(self, name: str) -> Any:
        if name == "data":
            self.data_reads += 1
        return getattr(self._delivered, name)


@pytest.mark.parametrize("corrupt", [False, True])
def test_each_entrys_bytes_are_read_once(corrupt: bool) -> None:
    protocol = connected(Owner())
    data = entry(b"a", b"b")
    if corrupt:
        data = data[:-1] + bytes([data[-1] ^ 1])
    counted = CountingEntry(broker_pb2.DeliveredEntry(ledger_id=1, entry_id=0, data=data))
    protocol.on_entries([counted])  # type: ignore[list-item]
    assert counted.data_reads == 1
    assert len(protocol.queue) == (0 if corrupt else 2)


def test_a_decompressed_payload_is_not_copied_again() -> None:
    """The decompressed payload is read where it is: holding it twice would double the peak."""
    size = 32 * MIB
    protocol = connected(Owner(), max_message_size=size + MIB)
    data = entry(bytes(size), compression=entry_pb2.ZSTD)  # a few KB compressed
    delivered = broker_pb2.DeliveredEntry(ledger_id=1, entry_id=0, data=data)
    tracemalloc.start()
    try:
        protocol.on_entries([delivered])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (message,) = protocol.queue
    assert len(message.data()) == size
    # The payload restored once, and the message's value cut from it: twice the size, not three times.
    assert peak < 2.5 * size, f"unpacking took {peak / size:.2f} times the payload"
