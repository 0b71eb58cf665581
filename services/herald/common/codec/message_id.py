"""Message ids: (ledger id, entry id, partition, batch index); ordered, and serialisable to bytes
and text so applications can store them."""

from __future__ import annotations

import struct
from typing import ClassVar, NamedTuple

from herald.common.errors import InvalidArgumentError

_PACKED = struct.Struct(">qqii")
INT64_MAX = 2**63 - 1


def check_position(ledger_id: int, entry_id: int, what: str = "position") -> None:
    """InvalidArgumentError unless (ledger_id, entry_id) is a position to start reading from: a
    seek, a cursor reset, a reader's start and a pull all take the same ones (this function, on
    the broker and in the client). Each id runs from -1 (MessageId.earliest's) to 2^63 - 1
    (MessageId.latest's); an id between, or past a topic's end, means the first entry at or after it."""
    for name, value in (("ledger id", ledger_id), ("entry id", entry_id)):
        if not -1 <= value <= INT64_MAX:
            raise InvalidArgumentError(
                f"{what} {ledger_id}:{entry_id} is invalid: its {name} {value} is out of range; ledger and entry "
                "ids run from -1 (the earliest) to 2^63-1 (the latest)")


class _MessageIdFields(NamedTuple):
    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1


class MessageId(_MessageIdFields):
    """Where a message is: ordered as the tuple (ledger, entry, partition, batch index).
    MessageId.earliest and MessageId.latest stand for a topic's two ends."""

    __slots__ = ()
    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def to_bytes(self) -> bytes:
        return _PACKED.pack(self.ledger_id, self.entry_id, self.partition, self.batch_index)

    @classmethod
    def from_bytes(cls, data: bytes) -> MessageId:
        if len(data) != _PACKED.size:
            raise InvalidArgumentError(f"a message id is {_PACKED.size} bytes, got {len(data)}")
        return cls(*_PACKED.unpack(data))

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.partition}:{self.batch_index}"

    @classmethod
    def from_str(cls, text: str) -> MessageId:
        try:
            parts = [int(p) for p in text.split(":")]
        except ValueError:
            parts = []
        if len(parts) not in (2, 3, 4):
            raise InvalidArgumentError(
                f"message id {text!r} is invalid: expected ledger:entry[:partition[:batch_index]]"
            )
        return cls(*parts)


EARLIEST = MessageId.earliest = MessageId(-1, -1)
LATEST = MessageId.latest = MessageId(2**63 - 1, 2**63 - 1)
