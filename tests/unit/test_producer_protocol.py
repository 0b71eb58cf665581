"""The producer's protocol object without any connection (issue 17, item 4): it is fed the broker's
replies and asked what to write. Receipts are matched to the head of the pending queue (equal
completes it, behind is ignored, ahead forces a reconnect), every pending entry is written again in
order after a registration, send errors fail one entry or force a reconnect, and the send timeout
is measured from the oldest pending entry."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from herald.api.v1 import broker_pb2, common_pb2
from herald.client.accumulator import PendingOp
from herald.client.config import ProducerConfig
from herald.client.producer_protocol import ProducerProtocol
from herald.client.stream import Reconnect
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record
from herald.common.codec.message_id import MessageId
from herald.common.errors import (
    ChecksumError,
    ConnectionError_,
    HeraldError,
    MessageTooLargeError,
    ProducerBusyError,
    TopicTerminatedError,
)

TOPIC = "persistent://public/default/protocol-partition-3"
Outcome = tuple[HeraldError | None, MessageId | None]


class Recorder:
    """What the protocol tells its owner, and the outcome of each message sent."""

    def __init__(self) -> None:
        self.registered: list[tuple[str, int, int | None]] = []
        self.released: list[int] = []
        self.terminated: list[TopicTerminatedError] = []
        self.outcomes: dict[int, list[Outcome]] = {}

    def protocol(self, **options: object) -> ProducerProtocol:
        return ProducerProtocol(
            TOPIC, ProducerConfig(**options),  # type: ignore[arg-type]
            on_registered=lambda *args: self.registered.append(args), on_released=self.released.append,
            on_terminated=self.terminated.append)

    def op(self, sequence_id: int, messages: int = 1, created: float = 0.0, chunks_after: int = 0) -> PendingOp:
        payload = bytearray()
        for index in range(messages):
            pack_record(payload, f"m{sequence_id}-{index}".encode())
        entry = encode_entry(EntryMetadata(producer_name="p", sequence_id=sequence_id,
                                           highest_sequence_id=sequence_id + messages - 1, num_messages=messages,
                                           batched=messages > 1), payload)
        outcomes = self.outcomes.setdefault(sequence_id, [])
        waiters = [lambda error, message_id: outcomes.append((error, message_id)) for _ in range(messages)]
        return PendingOp(sequence_id, sequence_id + messages - 1, messages, entry, messages > 1,
                         waiters, created, chunks_after=chunks_after)  # type: ignore[arg-type]


def registered(
    name: str = "p-1", last_sequence_id: int = -1, max_message_size: int = 0,
) -> broker_pb2.ProducerRegistered:
    return broker_pb2.ProducerRegistered(producer_name=name, last_sequence_id=last_sequence_id,
                                         max_message_size=max_message_size)


def receipt(sequence_id: int, entry_id: int = 0) -> broker_pb2.ProduceResponse:
    return broker_pb2.ProduceResponse(receipt=broker_pb2.SendReceipt(
        sequence_id=sequence_id, highest_sequence_id=sequence_id, ledger_id=9, entry_id=entry_id))


def send_error(sequence_id: int, code: int, text: str = "refused") -> broker_pb2.ProduceResponse:
    return broker_pb2.ProduceResponse(send_error=broker_pb2.SendError(
        sequence_id=sequence_id, error=common_pb2.Error(code=code, message=text)))  # type: ignore[arg-type]


def written(protocol: ProducerProtocol) -> list[int]:
    """The sequence ids of what the protocol asks to write now, in order."""
    out = []
    while (request := protocol.next_request()) is not None:
        out.append(request.send.sequence_id)
        protocol.request_written()
    return out


def connected(recorder: Recorder, **options: object) -> ProducerProtocol:
    protocol = recorder.protocol(**options)
    protocol.on_connected(registered(), first=True)
    return protocol


# ---- the handshake ------------------------------------------------------------------------------

def test_the_registration_names_the_producer_and_sets_where_sequence_ids_start() -> None:
    recorder = Recorder()
    protocol = recorder.protocol(producer_name="mine", properties={"app": "a"})
    request = protocol.handshake_request()
    assert (request.register.topic, request.register.producer_name, dict(request.register.properties)) == (
        TOPIC, "mine", {"app": "a"})
    accepted = protocol.handshake_reply(broker_pb2.ProduceResponse(registered=registered("mine", 41, 1024)))
    protocol.on_connected(accepted, first=True)
    assert (protocol.name, protocol.last_sequence_id) == ("mine", 41)
    assert recorder.registered == [("mine", 1024, 42)]  # the accumulator's next id
    protocol.on_connected(registered("mine", 99, 1024), first=False)  # a reconnect moves nothing
    assert protocol.last_sequence_id == 41 and recorder.registered[-1] == ("mine", 1024, None)


def test_an_initial_sequence_id_overrides_the_brokers() -> None:
    recorder = Recorder()
    protocol = recorder.protocol(initial_sequence_id=1000)
    protocol.on_connected(registered(last_sequence_id=5), first=True)
    assert protocol.last_sequence_id == 1000 and recorder.registered == [("p-1", 0, 1001)]


def test_a_refused_registration_raises_the_brokers_error() -> None:
    protocol = Recorder().protocol()
    with pytest.raises(ProducerBusyError, match="taken"):
        protocol.handshake_reply(broker_pb2.ProduceResponse(
            error=common_pb2.Error(code=common_pb2.PRODUCER_BUSY, message="taken")))
    with pytest.raises(ConnectionError_, match="answered a producer registration with 'receipt'"):
        protocol.handshake_reply(receipt(0))


# ---- writing and receipts ---------------------------------------------------------------------

def test_entries_are_written_once_in_order_and_the_request_is_built_once() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    ops = [recorder.op(0, 3), recorder.op(3), recorder.op(4)]
    for op in ops:
        protocol.add(op)
    assert written(protocol) == [0, 3, 4]
    assert written(protocol) == []
    request = ops[0].request()
    assert request is ops[0].request()  # reused by every resend
    assert (request.send.entry, request.send.num_messages, request.send.highest_sequence_id) == (ops[0].entry, 3, 2)


def test_a_receipt_for_the_head_completes_it_with_every_messages_id() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    protocol.add(recorder.op(0, 3))
    protocol.add(recorder.op(3))
    written(protocol)
    protocol.on_reply(receipt(0, entry_id=7))
    assert recorder.outcomes[0] == [(None, MessageId(9, 7, 3, index)) for index in range(3)]
    assert recorder.released == [3] and protocol.last_sequence_id == 2
    assert [op.sequence_id for op in protocol.pending] == [3]
    assert protocol.stats.snapshot(0).receipts == 1


def test_a_receipt_behind_the_head_is_ignored() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    protocol.add(recorder.op(5))
    protocol.on_reply(receipt(4))  # from before a resend: settled already
    protocol.on_reply(receipt(4))
    assert [op.sequence_id for op in protocol.pending] == [5] and recorder.released == []
    assert recorder.outcomes[5] == []


def test_a_receipt_ahead_of_the_head_forces_a_reconnect_and_everything_pending_goes_again() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    for sequence_id in (0, 1, 2):
        protocol.add(recorder.op(sequence_id))
    assert written(protocol) == [0, 1, 2]
    protocol.on_reply(receipt(0))
    with pytest.raises(Reconnect, match="receipt for sequence id 2 is ahead of the oldest pending one"):
        protocol.on_reply(receipt(2))  # the entry with 1 was lost
    protocol.on_disconnected()
    assert written(protocol) == []  # nothing before the broker registered the producer again
    protocol.on_connected(registered(last_sequence_id=0), first=False)
    assert written(protocol) == [1, 2]
    assert recorder.outcomes[1] == [] and recorder.outcomes[2] == []


def test_a_receipt_with_nothing_pending_is_ignored() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    protocol.on_reply(receipt(3))
    assert recorder.released == [] and not protocol.pending


# ---- send errors ------------------------------------------------------------------------------

def test_an_entry_error_fails_the_head_with_its_chunks_and_the_stream_carries_on() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    protocol.add(recorder.op(0, chunks_after=2))  # a message's three chunks
    protocol.add(recorder.op(1, chunks_after=1))
    protocol.add(recorder.op(2))
    protocol.add(recorder.op(3))
    protocol.on_reply(send_error(0, common_pb2.MESSAGE_TOO_LARGE, "too big"))
    (error, message_id), = recorder.outcomes[0]
    assert isinstance(error, MessageTooLargeError) and message_id is None
    assert [op.sequence_id for op in protocol.pending] == [3]
    assert written(protocol) == [3]  # the dropped chunks are not written any more
    protocol.on_reply(send_error(1, common_pb2.MESSAGE_TOO_LARGE))  # about a settled chunk
    assert [op.sequence_id for op in protocol.pending] == [3]


def test_any_other_send_error_forces_a_reconnect() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    protocol.add(recorder.op(0))
    with pytest.raises(Reconnect, match="send of sequence id 0 failed"):
        protocol.on_reply(send_error(0, common_pb2.PERSISTENCE_ERROR))
    assert [op.sequence_id for op in protocol.pending] == [0]


def test_a_checksum_error_fails_an_entry_corrupted_in_memory_and_resends_an_intact_one() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    corrupted = recorder.op(0)
    corrupted.entry = corrupted.entry[:-1] + bytes([corrupted.entry[-1] ^ 1])
    protocol.add(corrupted)
    protocol.add(recorder.op(1))
    with pytest.raises(Reconnect, match="checksum error"):
        protocol.on_reply(send_error(0, common_pb2.CHECKSUM_ERROR))
    (error, _), = recorder.outcomes[0]
    assert isinstance(error, ChecksumError) and "corrupted in the producer's memory" in str(error)
    with pytest.raises(Reconnect, match="checksum error"):
        protocol.on_reply(send_error(1, common_pb2.CHECKSUM_ERROR))  # intact: it goes again
    assert [op.sequence_id for op in protocol.pending] == [1]


@pytest.mark.parametrize("reply", [
    send_error(0, common_pb2.TOPIC_TERMINATED, "gone"),
    broker_pb2.ProduceResponse(error=common_pb2.Error(code=common_pb2.TOPIC_TERMINATED, message="gone")),
], ids=["send-error", "stream-error"])
def test_a_terminated_topic_is_told_once_to_the_owner(reply: broker_pb2.ProduceResponse) -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    protocol.add(recorder.op(0))
    with pytest.raises(Reconnect, match="topic terminated"):
        protocol.on_reply(reply)
    protocol.terminate(TopicTerminatedError("again"))
    (error,) = recorder.terminated
    assert str(error) == f"topic {TOPIC} was terminated: gone" and protocol.terminated


def test_failing_everything_pending_writes_nothing_more() -> None:
    recorder = Recorder()
    protocol = connected(recorder)
    protocol.add(recorder.op(0))
    protocol.add(recorder.op(1))
    protocol.fail_pending(TopicTerminatedError("t"))
    assert written(protocol) == [] and not protocol.pending
    assert all(isinstance(error, TopicTerminatedError) for error, _ in recorder.outcomes[0] + recorder.outcomes[1])


# ---- the send timeout -------------------------------------------------------------------------

def test_the_send_timeout_is_measured_from_the_oldest_pending_entry() -> None:
    recorder = Recorder()
    protocol = connected(recorder, send_timeout=30.0)
    assert protocol.overdue_in(100.0) is None  # nothing pending
    protocol.add(recorder.op(0, created=100.0))
    protocol.add(recorder.op(1, created=110.0))
    assert protocol.overdue_in(120.0) == pytest.approx(10.0)
    assert protocol.overdue_in(130.0) == pytest.approx(0.0)
    protocol.on_reply(receipt(0))
    assert protocol.overdue_in(130.0) == pytest.approx(10.0)  # the next one is the oldest now
    assert "within the send timeout of 30s" in str(protocol.timeout_error(1))
    assert connected(recorder, send_timeout=0).overdue_in(0.0) is None  # no send timeout


# ---- the payload path -------------------------------------------------------------------------

_REQUEST_PEAK = textwrap.dedent("""
    import resource, sys
    from herald.client.accumulator import PendingOp
    entry = b"x" * int(sys.argv[1])
    op = PendingOp(0, 0, 1, entry, False, [])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    request = op.request()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
""")


def test_the_send_request_copies_the_entry_once() -> None:
    """A SendEntry made first and then given to its ProduceRequest is copied a second time, as a
    whole: building the request in place copies the entry's bytes once, into the request."""
    size = 128 * 1024 * 1024
    result = subprocess.run([sys.executable, "-c", _REQUEST_PEAK, str(size)], capture_output=True, text=True,
                            env={**os.environ}, check=True)
    grown = int(result.stdout) * 1024
    assert grown < 1.5 * size, f"building the request took {grown / size:.2f} times the entry"  # ru_maxrss: KiB
