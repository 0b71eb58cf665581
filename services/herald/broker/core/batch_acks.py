"""Batch-index acknowledgements (Pulsar's ack_set): a consumer may acknowledge some messages of a
batch entry and not the others. An acknowledgement names the batch's messages still unacknowledged
as a bitmask (bit i: message i; Pulsar's ack_set words, as one Python int); the subscription keeps,
per entry, the indexes acknowledged so far, and once every message of the entry is, the entry itself
is acknowledged on the cursor. A redelivered entry carries the mask of the messages still to
deliver, so the client hands out only those.

Partial acknowledgements live in memory only: after a restart or an unload the whole entry is
delivered again (at-least-once). They are kept only for entries dispatched to the acknowledging
consumer (whose size the broker knows), so they never outnumber the entries outstanding.
"""

from __future__ import annotations

from collections.abc import Callable

from herald.broker.core.ledger_list import Position


def full_mask(size: int) -> int:
    """Every message of a batch of `size`."""
    return (1 << size) - 1


class BatchAcks:
    """The acknowledged batch indexes of entries not acknowledged whole yet."""

    __slots__ = ("_acked",)

    def __init__(self) -> None:
        self._acked: dict[Position, tuple[int, int]] = {}  # position -> (batch size, acked mask)

    def __len__(self) -> int:
        return len(self._acked)

    def ack(self, position: Position, unacked: int, size: int) -> bool:
        """Acknowledge the messages of the batch of `size` at `position` that `unacked` (a bitmask
        of the indexes still unacknowledged) leaves out; True when the batch is now acknowledged
        whole (and forgotten here). Bits past the batch are ignored."""
        full = full_mask(size)
        _, acked = self._acked.get(position, (size, 0))
        acked |= ~unacked & full
        if acked == full:
            self._acked.pop(position, None)
            return True
        self._acked[position] = (size, acked)
        return False

    def unacked(self, position: Position) -> int | None:
        """The bitmask of the messages of the batch at `position` still to deliver; None when none
        was acknowledged."""
        found = self._acked.get(position)
        if found is None:
            return None
        size, acked = found
        return full_mask(size) & ~acked

    def forget(self, positions: list[Position]) -> None:
        """These entries were acknowledged whole."""
        if self._acked:
            for position in positions:
                self._acked.pop(position, None)

    def forget_up_to(self, position: Position) -> None:
        """Everything up to `position` was acknowledged (a cumulative ack)."""
        if self._acked:
            for done in [p for p in self._acked if p <= position]:
                del self._acked[done]

    def forget_acknowledged(self, is_acked: Callable[[Position], bool]) -> None:
        """The cursor moved (a skip, the message TTL): drop what it acknowledged."""
        if self._acked:
            for done in [p for p in self._acked if is_acked(p)]:
                del self._acked[done]

    def clear(self) -> None:
        """The subscription was reset: nothing partial holds any more."""
        self._acked.clear()
