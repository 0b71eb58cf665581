"""Pulsar's framing: the decoder is fed bytes however they arrive and yields whole frames; sizes it
cannot trust are refused before anything is buffered."""

from __future__ import annotations

import struct

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.pulsar.frames import Frame, FrameDecoder, FrameError, encode_command, encode_with_payload
from hypothesis import given
from hypothesis import strategies as st

MAX = 64 * 1024


def ping() -> pulsar.BaseCommand:
    return pulsar.BaseCommand(type=pulsar.BaseCommand.PING, ping=pulsar.CommandPing())


def send(sequence_id: int) -> pulsar.BaseCommand:
    return pulsar.BaseCommand(type=pulsar.BaseCommand.SEND, send=pulsar.CommandSend(
        producer_id=1, sequence_id=sequence_id, num_messages=1))


def joined(parts: list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(part) for part in parts)


def test_a_command_round_trips() -> None:
    [frame] = list(FrameDecoder(MAX).feed(encode_command(ping())))
    assert frame == Frame(ping(), None)


def test_a_payload_follows_its_command_unchanged() -> None:
    payload = b"\x0e\x01" + b"\x00" * 4 + b"metadata and data"
    [frame] = list(FrameDecoder(MAX).feed(joined(encode_with_payload(send(7), payload))))
    assert frame.command.send.sequence_id == 7
    assert frame.payload is not None and bytes(frame.payload) == payload


@given(st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=20), st.data())
def test_frames_come_whole_however_the_bytes_are_cut(sizes: list[int], data: st.DataObject) -> None:
    stream = b"".join(joined(encode_with_payload(send(i), bytes([i % 256]) * size)) for i, size in enumerate(sizes))
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=10)))
    decoder = FrameDecoder(MAX)
    frames: list[Frame] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        frames.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert [(f.command.send.sequence_id, bytes(f.payload or b"")) for f in frames] == [
        (i, bytes([i % 256]) * size) for i, size in enumerate(sizes)]
    assert decoder.buffered == 0


def test_a_frame_claiming_more_than_the_limit_is_refused_from_its_size_alone() -> None:
    decoder = FrameDecoder(MAX)
    with pytest.raises(FrameError, match=f"a frame of {MAX + 1} bytes: frames are 4 to {MAX} bytes"):
        list(decoder.feed(struct.pack(">I", MAX + 1)))


@pytest.mark.parametrize(("body", "error"), [
    (struct.pack(">I", 0), "frames are 4 to"),
    (struct.pack(">II", 8, 9) + b"\x00" * 4, "command claims 9 of the frame's 4 bytes"),
    (struct.pack(">II", 7, 3) + b"\xff\xff\xff", "does not decode"),
    (struct.pack(">II", 7, 3) + b"\x92\x01\x00", "no type this broker knows"),  # a ping, no type
    (struct.pack(">II", 8, 4) + b"\x08\x02\x12\x00", "a CONNECT command lacks required fields: connect.client_version"),
])
def test_bytes_that_are_no_frame_are_refused(body: bytes, error: str) -> None:
    with pytest.raises(FrameError, match=error):
        list(FrameDecoder(MAX).feed(body))


def test_a_command_of_an_unknown_type_is_refused() -> None:
    # A type from a protocol version after 20 (the client negotiated 20: it must not send one).
    raw = bytearray(pulsar.BaseCommand(type=pulsar.BaseCommand.PING, ping=pulsar.CommandPing()).SerializeToString())
    raw[1] = 99
    with pytest.raises(FrameError, match="no type this broker knows"):
        list(FrameDecoder(MAX).feed(struct.pack(">II", len(raw) + 4, len(raw)) + bytes(raw)))
