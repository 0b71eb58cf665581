"""Message ids between Herald and Pulsar's wire. Both name a message by (ledger, entry, partition,
batch index); Pulsar carries ledger and entry ids as uint64, so its "earliest" ((-1, -1) in Herald,
Java's -1L) travels as 2^64-1 and must come back as -1."""

from __future__ import annotations

from herald.api.pulsar import PulsarApi_pb2 as pulsar

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def to_wire(value: int) -> int:
    """An int64 id as Pulsar's uint64 field holds it (-1 -> 2^64-1)."""
    return value & (_U64 - 1)


def from_wire(value: int) -> int:
    """A uint64 id from Pulsar's wire as Herald's int64 (2^64-1 -> -1)."""
    return value - _U64 if value > _I64_MAX else value


def message_id(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1) -> pulsar.MessageIdData:
    data = pulsar.MessageIdData(ledgerId=to_wire(ledger_id), entryId=to_wire(entry_id))
    if partition >= 0:
        data.partition = partition
    if batch_index >= 0:
        data.batch_index = batch_index
    return data


def position(data: pulsar.MessageIdData) -> tuple[int, int]:
    """The (ledger, entry) of a message id from the wire."""
    return from_wire(data.ledgerId), from_wire(data.entryId)
