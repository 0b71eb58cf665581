"""Batch-index acknowledgements (Pulsar's ack_set): the broker's record of partly acknowledged
batches, and the ack_set words as Pulsar's clients write and read them."""

from __future__ import annotations

from herald.broker.core.batch_acks import BatchAcks
from herald.broker.core.ledger_list import Position
from herald.broker.pulsar.consumers import ack_set_words, bitmask

ENTRY = Position(3, 7)


def unacked_of(*indexes: int) -> int:
    return sum(1 << i for i in indexes)


def test_an_entry_is_acknowledged_once_every_message_of_its_batch_is() -> None:
    acks = BatchAcks()
    # The client's ack set lists the messages still unacknowledged: 0, 1, 2 and 5 of 6 acked 3, 4.
    assert not acks.ack(ENTRY, unacked_of(0, 1, 2, 5), size=6)
    assert acks.unacked(ENTRY) == unacked_of(0, 1, 2, 5)
    assert not acks.ack(ENTRY, unacked_of(0, 1, 2, 3, 4), size=6)  # another ack set: 5 acked too
    assert acks.unacked(ENTRY) == unacked_of(0, 1, 2)
    assert acks.ack(ENTRY, unacked_of(3, 4, 5), size=6)  # 0, 1, 2: the batch is done
    assert acks.unacked(ENTRY) is None and len(acks) == 0


def test_bits_past_the_batch_are_ignored() -> None:
    acks = BatchAcks()
    # A client's bitset is whole 64-bit words: bits past the batch's size mean nothing.
    assert not acks.ack(ENTRY, unacked_of(1, 10, 63), size=3)
    assert acks.unacked(ENTRY) == unacked_of(1)
    assert acks.ack(ENTRY, (1 << 64) - 1 - 0b10, size=3)  # only 1 acked in this one
    assert len(acks) == 0


def test_forgetting_what_the_cursor_acknowledged() -> None:
    acks = BatchAcks()
    for entry_id in range(5):
        acks.ack(Position(3, entry_id), unacked_of(0), size=2)
    acks.forget([Position(3, 0)])
    acks.forget_up_to(Position(3, 2))
    assert [acks.unacked(Position(3, e)) for e in range(5)] == [None, None, None, 1, 1]
    acks.forget_acknowledged(lambda p: p.entry_id == 4)
    assert len(acks) == 1
    acks.clear()
    assert acks.unacked(Position(3, 3)) is None


def test_ack_set_words_are_java_bitset_words() -> None:
    # Java's BitSet.toLongArray: bit i is bit i % 64 of word i // 64, words signed 64-bit.
    assert bitmask([0b1011]) == 0b1011
    assert bitmask([-1]) == (1 << 64) - 1
    assert bitmask([0, 1]) == 1 << 64
    assert bitmask([-(1 << 63), 2]) == (1 << 63) | (1 << 65)
    for mask in (0b1, (1 << 64) - 1, 1 << 64 | 5, (1 << 63) | (1 << 130)):
        assert bitmask(ack_set_words(mask)) == mask
    assert ack_set_words((1 << 63) | 1) == [-(1 << 63) + 1]
    assert ack_set_words(0) == []
