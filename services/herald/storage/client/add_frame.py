"""One add serialized once for every storage node it goes to (BookKeeper's PendingAddOp sends one
buffer to every bookie).

An `AddBatchRequest` is `repeated AddRequest adds = 1`, so its wire form is the concatenation of
one length-delimited field per add: a frame. A frame is built once per add, from the entry bytes
as the broker gave them, and each node's add stream writes it as it is (an add sent alone: the
same bytes object for every replica) or joined with the frames queued with it into one message.
The bytes are the canonical serialization of the same `AddRequest` (a unit test compares them with
protobuf's), so the storage contract on the wire is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from herald.api.v1 import storage_pb2

# Wire tags (field number << 3 | wire type 2, length-delimited) of AddBatchRequest.adds and
# AddRequest.data: both fit in one byte.
_ADDS_TAG = b"\x0a"
_DATA_TAG = b"\x22"


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of value; a negative int64 is its 64-bit two's complement."""
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class AddFrame:
    """An AddRequest as one `adds` field of an AddBatchRequest, in three parts: the fields before
    data with data's tag and length, the entry bytes themselves (never copied here), the fields
    after data. `size` is the frame's length in bytes."""

    __slots__ = ("_message", "_parts", "_streams", "entry_id", "last_add_confirmed", "ledger_id", "length",
                 "recovery", "request_id", "size", "traceparent")

    def __init__(self, request_id: int, ledger_id: int, entry_id: int, data: bytes, *, last_add_confirmed: int,
                 recovery: bool = False, traceparent: str = "", length: int = -1) -> None:
        self.request_id = request_id
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        # As given, for a node of this process that takes the add without its bytes (local_node.py).
        self.last_add_confirmed = last_add_confirmed
        self.recovery = recovery
        self.traceparent = traceparent
        self.length = length  # the writer's length of the ledger with this entry (-1: not known, not sent)
        # protobuf encodes the small fields (C code, canonical); only data is framed by hand, so
        # that its bytes are copied once, into the message that leaves.
        head = storage_pb2.AddRequest(request_id=request_id, ledger_id=ledger_id, entry_id=entry_id
                                      ).SerializeToString()
        tail = storage_pb2.AddRequest(last_add_confirmed=last_add_confirmed, recovery=recovery,
                                      traceparent=traceparent, length=length if length >= 0 else None
                                      ).SerializeToString()
        if data:  # proto3 leaves an empty bytes field out
            head += _DATA_TAG + varint(len(data))
        length = len(head) + len(data) + len(tail)
        head = _ADDS_TAG + varint(length) + head
        self._parts = (head, data, tail)
        self.size = len(head) + len(data) + len(tail)
        self._message: bytes | None = None
        self._streams = 0  # node streams that have it queued and not yet written

    def message(self) -> bytes:
        """The AddBatchRequest holding this add alone: built on first use, then the same bytes
        for every node that sends it alone (kept only while some stream still has it queued)."""
        message = self._message
        if message is None:
            message = b"".join(self._parts)
            if self._streams > 1:
                self._message = message
        return message

    def queued(self) -> None:
        """A node's stream queued it."""
        self._streams += 1

    def written(self) -> None:
        """A node's stream wrote it: once every stream did, its message is not kept any longer
        (an add waits for its acks with only the entry bytes it was given)."""
        self._streams -= 1
        if self._streams <= 0:
            self._message = None

    @property
    def parts(self) -> tuple[bytes, bytes, bytes]:
        return self._parts

    @property
    def data(self) -> bytes:
        """The entry's bytes, as the broker gave them."""
        return self._parts[1]


def batch_message(frames: Sequence[AddFrame]) -> bytes:
    """The serialized AddBatchRequest of frames, in order: one frame's shared bytes as they are,
    several joined (one copy of their entries)."""
    if len(frames) == 1:
        return frames[0].message()
    return b"".join([part for frame in frames for part in frame.parts])
