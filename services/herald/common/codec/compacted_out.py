"""Which messages of a compacted view's batch were compacted out, in either entry format: compaction
keeps a batch's dropped messages in place, flagged (Herald's record flag FLAG_COMPACTED_OUT, Pulsar's
SingleMessageMetadata.compacted_out), so batch indexes stay stable. The broker delivers such a batch
to a reader with the mask of the messages it keeps, which a Pulsar front end sends as
MESSAGE.ack_set (Pulsar's C++ client does not skip flagged messages itself, but skips those
outside the ack_set): broker.core.compacted_reads."""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.codec.compression import NONE
from herald.common.codec.entry import open_entry
from herald.common.codec.herald_entry import FLAG_EVENT_TIME, FLAG_KEY, FLAG_PROPERTIES, FLAG_SEQUENCE_ID, RECORD_HEADER
from herald.common.errors import HeraldError

# A Herald record's flag for a message compaction left out (herald_entry's FLAG_COMPACTED_OUT).
FLAG_COMPACTED_OUT = 16
_U16_LE, _U32_LE, _U32_BE = struct.Struct("<H"), struct.Struct("<I"), struct.Struct(">I")


def kept_messages(entry: bytes) -> int | None:
    """Of an entry read from a compacted view, the bitmask of the messages it keeps (bit i: batch
    index i); None when it keeps them all, or is not a batch. A batch the compactor rewrote is
    stored uncompressed (broker.core.compaction), so a compressed one was kept whole. A batch whose
    framing does not read is passed on whole (the client reports it)."""
    try:
        opened = open_entry(entry, verify=False)
    except HeraldError:
        return None
    metadata = opened.metadata
    if not metadata.batched or metadata.compression != NONE or metadata.num_chunks > 0:
        return None
    try:
        out = _pulsar_compacted_out(opened.payload) if opened.pulsar is not None \
            else _herald_compacted_out(opened.payload)
    except (struct.error, DecodeError, IndexError):
        return None
    if not any(out):
        return None
    return sum(1 << i for i, gone in enumerate(out) if not gone)


def _herald_compacted_out(payload: memoryview) -> list[bool]:
    """Per record of a Herald batch payload: whether it is flagged compacted-out (herald_entry's
    record framing: a header, then the fields its flags announce, then the value)."""
    out: list[bool] = []
    offset, end = 0, len(payload)
    while offset < end:
        length, flags = RECORD_HEADER.unpack_from(payload, offset)
        offset += RECORD_HEADER.size
        if flags & FLAG_KEY:
            offset += 2 + _U16_LE.unpack_from(payload, offset)[0]
        if flags & FLAG_EVENT_TIME:
            offset += 8
        if flags & FLAG_SEQUENCE_ID:
            offset += 8
        if flags & FLAG_PROPERTIES:
            (count,) = _U16_LE.unpack_from(payload, offset)
            offset += 2
            for _ in range(count):
                offset += 2 + _U16_LE.unpack_from(payload, offset)[0]
                offset += 4 + _U32_LE.unpack_from(payload, offset)[0]
        offset += length
        if offset > end:
            raise IndexError("a record runs past the end of the payload")
        out.append(bool(flags & FLAG_COMPACTED_OUT))
    return out


def _pulsar_compacted_out(payload: memoryview) -> list[bool]:
    """Per message of a Pulsar batch payload: its SingleMessageMetadata's compacted_out."""
    out: list[bool] = []
    offset, end = 0, len(payload)
    while offset < end:
        (size,) = _U32_BE.unpack_from(payload, offset)
        offset += 4
        single = pulsar.SingleMessageMetadata()
        single.ParseFromString(bytes(payload[offset:offset + size]))
        offset += size + single.payload_size
        if offset > end:
            raise IndexError("a message runs past the end of the payload")
        out.append(single.compacted_out)
    return out
