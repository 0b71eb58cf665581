"""Pulsar's binary framing, with no I/O: a decoder fed the bytes a connection receives (as nats.py
feeds its parser) that yields whole frames, and the encoders of the frames Herald sends.

    frame          = total_size:u32 | command_size:u32 | BaseCommand | [payload]
    payload        = magic:u16 (0x0e01) | crc32c:u32 | metadata_size:u32 | MessageMetadata | data

total_size counts everything after itself. A payload follows SEND (from producers) and MESSAGE (to
consumers); its checksum covers metadata_size, the metadata and the data. The payload is what Pulsar
stores in a ledger entry, and what Herald stores for a Pulsar producer, unchanged
(herald.common.codec.pulsar_entry reads it)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from google.protobuf.message import DecodeError

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.errors import HeraldError

_U32 = struct.Struct(">I")
_HEADER = struct.Struct(">II")  # total size, command size
HEADER_SIZE = _HEADER.size
# Pulsar's broker default maxMessageSize is 5 MiB; a frame adds its command and the message's
# metadata on top (Pulsar allows 10 KiB of that: Commands.MESSAGE_SIZE_FRAME_PADDING).
FRAME_PADDING = 10 * 1024


class FrameError(HeraldError):
    """Bytes that are no Pulsar frame: the connection cannot go on (its framing is lost)."""


class Frame(NamedTuple):
    command: pulsar.BaseCommand
    # The payload after the command (SEND, MESSAGE), as it came: what an entry stores. None: none.
    payload: memoryview | None


class FrameDecoder:
    """Turns a byte stream into frames. `max_frame_size` bounds what one frame may claim (refused
    from its 4-byte size, before any of it is buffered), so a peer cannot make the decoder hold more."""

    __slots__ = ("_buffer", "_max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self._max_frame_size = max_frame_size
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[Frame]:
        """The frames `data` completes; a partial frame waits for the next feed. FrameError for
        bytes that cannot be a frame (the caller closes the connection)."""
        buffer = self._buffer
        buffer += data
        offset = 0
        end = len(buffer)
        try:
            while end - offset >= 4:
                (total,) = _U32.unpack_from(buffer, offset)
                if total < 4 or total > self._max_frame_size:
                    raise FrameError(
                        f"a frame of {total} bytes: frames are 4 to {self._max_frame_size} bytes "
                        "(the max message size plus its framing)")
                if end - offset - 4 < total:
                    break  # the rest of this frame has not arrived yet
                # One copy of the frame: its payload must outlive this buffer, which the next feed reuses.
                with memoryview(buffer) as view:
                    frame = bytes(view[offset + 4: offset + 4 + total])
                offset += 4 + total
                yield self._frame(memoryview(frame))
        finally:
            del buffer[:offset]

    @staticmethod
    def _frame(body: memoryview) -> Frame:
        (command_size,) = _U32.unpack_from(body, 0)
        if command_size < 1 or command_size > len(body) - 4:
            raise FrameError(f"a frame whose command claims {command_size} of the frame's {len(body) - 4} bytes")
        command = pulsar.BaseCommand()
        try:
            command.ParseFromString(body[4: 4 + command_size])  # type: ignore[arg-type]  # upb takes buffers
        except DecodeError as exc:
            raise FrameError(f"a frame whose command does not decode: {exc}") from None
        if not command.HasField("type"):
            # proto2 keeps an enum value it does not know among the unknown fields: a type this
            # protocol version does not have, which the client's version should not have sent.
            raise FrameError("a command of no type this broker knows (protocol version 20)")
        if not command.IsInitialized():
            raise FrameError(f"a {_type_name(command)} command lacks required fields: "
                             f"{', '.join(command.FindInitializationErrors())}")  # type: ignore[attr-defined]
        rest = body[4 + command_size:]
        return Frame(command, rest if len(rest) else None)


def _type_name(command: pulsar.BaseCommand) -> str:
    try:
        return pulsar.BaseCommand.Type.Name(command.type)
    except ValueError:
        return f"type {command.type}"


def encode_command(command: pulsar.BaseCommand) -> bytes:
    """A frame carrying `command` alone."""
    serialized = command.SerializeToString()
    size = len(serialized)
    return _HEADER.pack(size + 4, size) + serialized


def encode_with_payload(command: pulsar.BaseCommand, payload: bytes | memoryview) -> list[bytes | memoryview]:
    """A frame carrying `command` and a payload already in Pulsar's form (magic, checksum,
    metadata, data: a stored entry), as buffers to write in order (the payload is not copied)."""
    serialized = command.SerializeToString()
    size = len(serialized)
    return [_HEADER.pack(size + 4 + len(payload), size) + serialized, payload]
