"""The consumer's acknowledgement tracker: which messages of each delivered batch are acked (an
entry is acked on the broker only once all its messages are), and the acks grouped for the next
flush. Pure bookkeeping: the consumer decides when to flush and sends what `take()` returns."""

from __future__ import annotations

Position = tuple[int, int]  # (ledger id, entry id)


class AckTracker:
    """Batch bitmasks plus the positions waiting to be acknowledged on the broker."""

    __slots__ = ("_batches", "_cumulative", "_floor", "_individual")

    def __init__(self) -> None:
        # Position -> bitmask of the batch's indexes not acked yet. Only batches of two or more
        # messages that were delivered and are partly unacked are here.
        self._batches: dict[Position, int] = {}
        self._individual: set[Position] = set()
        self._cumulative: Position | None = None  # the newest cumulative ack not sent yet
        self._floor: Position | None = None  # the newest cumulative ack ever recorded

    def track(self, ledger_id: int, entry_id: int, num_messages: int) -> int:
        """Register a delivered batch; returns the bitmask of its indexes still unacked (all of
        them unless this is a redelivery of a batch the application partly acked)."""
        full = (1 << num_messages) - 1
        if num_messages < 2:
            return full
        return self._batches.setdefault((ledger_id, entry_id), full)

    def acknowledge(self, ledger_id: int, entry_id: int, batch_index: int, num_messages: int = 0) -> bool:
        """Record an individual ack; True when it completes the entry (an ack for the broker was
        queued). `num_messages` is the batch size when known (0: unknown)."""
        position = (ledger_id, entry_id)
        if batch_index >= 0:
            mask = self._batches.get(position)
            if mask is None:
                if num_messages < 2:
                    # Untracked: a one-message batch, or one already fully acked; ack the entry.
                    self._individual.add(position)
                    return True
                mask = (1 << num_messages) - 1
            mask &= ~(1 << batch_index)
            if mask:
                self._batches[position] = mask
                return False
            self._batches.pop(position, None)
        self._individual.add(position)
        return True

    def acknowledge_cumulative(
        self, ledger_id: int, entry_id: int, batch_index: int, num_messages: int = 0
    ) -> bool:
        """Record a cumulative ack of everything up to and including this message; True when a
        cumulative ack for the broker was queued."""
        position = (ledger_id, entry_id)
        if batch_index >= 0:
            mask = self._batches.get(position)
            if mask is None and num_messages >= 2:
                mask = (1 << num_messages) - 1
            if mask is not None:
                mask &= ~((1 << (batch_index + 1)) - 1)
                if mask:
                    # The batch is only partly acked: the broker may move up to the entry before.
                    self._batches[position] = mask
                    if entry_id == 0:
                        return False
                    position = (ledger_id, entry_id - 1)
                else:
                    self._batches.pop(position, None)
        if self._floor is not None and position <= self._floor:
            return False
        self._floor = self._cumulative = position
        return True

    def __len__(self) -> int:
        """How many acks wait for the next flush."""
        return len(self._individual) + (self._cumulative is not None)

    def take(self) -> tuple[list[Position], Position | None]:
        """The individual positions and the cumulative position to send now; clears them, and
        forgets batches the cumulative floor has passed."""
        cumulative = self._cumulative
        individual = self._individual
        self._individual = set()
        self._cumulative = None
        floor = self._floor
        if floor is not None:
            if individual:
                individual = {position for position in individual if position > floor}
            if self._batches:
                self._batches = {pos: mask for pos, mask in self._batches.items() if pos > floor}
        return sorted(individual), cumulative

    def is_acked(self, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        """Whether this message was acked here (for filtering redeliveries)."""
        position = (ledger_id, entry_id)
        if self._floor is not None and position <= self._floor:
            return True
        mask = self._batches.get(position)
        return mask is not None and batch_index >= 0 and not (mask >> batch_index) & 1

    def batches_tracked(self) -> int:
        return len(self._batches)

    def has_unacked_messages(self, ledger_id: int, entry_id: int) -> bool:
        """Whether this entry is a batch delivered here with messages not acknowledged yet."""
        return (ledger_id, entry_id) in self._batches

    def reset(self) -> None:
        """Forget the partly acked batches and the cumulative floor: after a seek every message
        may come again and must count as unacked. Acks waiting for the next flush are kept."""
        self._batches = {}
        self._floor = None
