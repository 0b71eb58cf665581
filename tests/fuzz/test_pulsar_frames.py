"""Hostile bytes on the broker's Pulsar port: garbage, frames whose sizes lie, commands that do not
decode or are of types no protocol version has, frames cut short, and SENDs whose payloads have a
bad magic, a bad CRC or metadata that lies, after a real CONNECT and PRODUCER. Whatever arrives,
the broker may answer an error or close that connection, and must go on serving everyone else:
after each example a fresh connection is CONNECTED and answers a PING; after the property the
target's checks run (tests/fuzz/conftest.py) and the official client produces and consumes."""

from __future__ import annotations

import struct

import pulsar
from herald.api.pulsar import PulsarApi_pb2
from herald.common.codec.checksum import crc32c
from herald.common.pulsar.frames import encode_command, encode_with_payload
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.target import FuzzTarget, send_raw
from tests.pulsar.raw import Command, RawConnection

TOPIC = "persistent://public/default/pulsar-fuzz"
CONNECT = encode_command(Command(type=Command.CONNECT, connect=PulsarApi_pb2.CommandConnect(
    client_version="fuzz", protocol_version=20)))
PRODUCER = encode_command(Command(type=Command.PRODUCER, producer=PulsarApi_pb2.CommandProducer(
    topic=TOPIC, producer_id=1, request_id=1)))


def frame(body: bytes, command_size: int | None = None, total_size: int | None = None) -> bytes:
    """total_size | command_size | body, either size lying when told."""
    command = len(body) if command_size is None else command_size
    total = 4 + len(body) if total_size is None else total_size
    return struct.pack(">II", total & 0xFFFFFFFF, command & 0xFFFFFFFF) + body


def raw_command(kind: int, fields: bytes) -> bytes:
    """A BaseCommand encoded by hand: field 1 (type) as a varint, then whatever fields follow, so
    types that no protocol version has can be sent."""
    varint = bytearray()
    value = kind
    while True:
        byte = value & 0x7F
        value >>= 7
        varint.append(byte | (0x80 if value else 0))
        if not value:
            break
    return b"\x08" + bytes(varint) + fields


def payload(metadata: bytes, data: bytes, magic: int = 0x0E01, crc: int | None = None) -> bytes:
    body = struct.pack(">I", len(metadata)) + metadata + data
    return struct.pack(">HI", magic, crc32c(body) if crc is None else crc) + body


def metadata_bytes(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=64))
    metadata = PulsarApi_pb2.MessageMetadata(
        producer_name=draw(st.sampled_from(["", "someone-else", "p"])),
        sequence_id=draw(st.integers(0, 2**64 - 1)), publish_time=draw(st.integers(0, 2**64 - 1)))
    if draw(st.booleans()):
        metadata.num_messages_in_batch = draw(st.integers(-(2**31), 2**31 - 1))
    if draw(st.booleans()):
        metadata.compression = draw(st.sampled_from([1, 2, 3, 4]))
        metadata.uncompressed_size = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        metadata.num_chunks_from_msg = draw(st.integers(-5, 5))
        metadata.chunk_id = draw(st.integers(-5, 5))
        metadata.total_chunk_msg_size = draw(st.integers(-5, 2**31 - 1))
    return bytes(metadata.SerializePartialToString())


@st.composite
def sends(draw: st.DrawFn) -> bytes:
    """CONNECT, PRODUCER, then SENDs whose payload is hostile."""
    out = [CONNECT, PRODUCER]
    for sequence in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["bad-crc", "bad-magic", "lying-metadata", "truncated", "empty"]))
        meta, data = metadata_bytes(draw), draw(st.binary(max_size=256))
        if kind == "bad-crc":
            body = payload(meta, data, crc=draw(st.integers(0, 2**32 - 1)))
        elif kind == "bad-magic":
            body = payload(meta, data, magic=draw(st.integers(0, 0xFFFF)))
        elif kind == "lying-metadata":
            body = payload(meta, data)
        elif kind == "truncated":
            whole = payload(meta, data)
            body = whole[:draw(st.integers(0, len(whole)))]
        else:
            body = b""
        send = Command(type=Command.SEND, send=PulsarApi_pb2.CommandSend(
            producer_id=draw(st.sampled_from([1, 2, 2**64 - 1])), sequence_id=sequence,
            num_messages=draw(st.integers(0, 2**31 - 1))))
        out.append(b"".join(bytes(part) for part in encode_with_payload(send, body)))
    return b"".join(out)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["garbage", "connect+garbage", "lying-sizes", "unknown-types", "truncated",
                                 "sends"]))
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=4096))
    if kind == "connect+garbage":
        return CONNECT + draw(st.binary(min_size=1, max_size=1024))
    if kind == "lying-sizes":
        body = draw(st.binary(max_size=64))
        return CONNECT + frame(body, draw(st.none() | st.integers(0, 2**32 - 1)),
                               draw(st.none() | st.integers(0, 2**32 - 1)))
    if kind == "unknown-types":
        commands = [raw_command(draw(st.integers(0, 2**32)), draw(st.binary(max_size=32)))
                    for _ in range(draw(st.integers(1, 4)))]
        return CONNECT + b"".join(frame(command) for command in commands)
    if kind == "truncated":
        whole = CONNECT + PRODUCER
        return whole[:draw(st.integers(1, len(whole) - 1))]
    return draw(sends())


@given(data=streams(), read_reply=st.booleans())
def test_hostile_frames_on_the_pulsar_port_never_take_the_broker_down(
    target: FuzzTarget, data: bytes, read_reply: bool,
) -> None:
    port = target.server.pulsar_port
    send_raw(port, data, read_reply)
    with RawConnection(port) as fresh:
        assert fresh.connect().type == Command.CONNECTED
        fresh.send(Command(type=Command.PING, ping=PulsarApi_pb2.CommandPing()))
        assert fresh.receive().type == Command.PONG


def test_the_official_client_still_produces_and_consumes(target: FuzzTarget) -> None:
    """Run after the property (tests run in file order): the Pulsar path works end to end."""
    client = pulsar.Client(target.server.pulsar_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(TOPIC, "after-fuzz")
        producer = client.create_producer(TOPIC)
        producer.send(b"still here")
        assert consumer.receive(timeout_millis=10_000).data() == b"still here"
    finally:
        client.close()
