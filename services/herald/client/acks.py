"""The consumer's acknowledgement tracker: which messages of each delivered batch are acked (an
entry is acked on the broker only once all its messages are: BatchAcks, which the batch's
Messages point to), and the acks grouped for the next flush. Pure bookkeeping: the consumer
decides when to flush and sends what `take()` returns."""

from __future__ import annotations

Position = tuple[int, int]  # (ledger id, entry id)


class BatchAcks:
    """One delivered batch's messages not acked yet: a flag per batch index and their count. The
    batch's Messages point to it (EntryInfo.acks), so that acking one that is not the batch's last
    is a flag cleared and a count decremented, with no lookup (TopicConsumer.acknowledge); the
    last one goes through AckTracker.acknowledge, which queues the entry's ack."""

    __slots__ = ("left", "unacked")

    def __init__(self, num_messages: int) -> None:
        self.unacked = bytearray(b"\x01") * num_messages
        self.left = num_messages  # 0 once done, or dropped by the tracker (then never used again)

    def clear(self, index: int) -> int:
        """Mark one message acked (an index outside the batch: nothing); returns how many are left."""
        flags = self.unacked
        if index < len(flags) and flags[index]:
            flags[index] = 0
            self.left -= 1
        return self.left

    def clear_up_to(self, index: int) -> int:
        """Mark every message up to and including `index` acked; returns how many are left."""
        flags = self.unacked
        end = min(index + 1, len(flags))
        self.left -= flags.count(1, 0, end)
        flags[:end] = bytes(end)
        return self.left

    def mask(self) -> int:
        """The indexes not acked yet, as a bitmask."""
        return sum(1 << index for index, flag in enumerate(self.unacked) if flag)


class AckTracker:
    """Batches' acks plus the positions waiting to be acknowledged on the broker."""

    __slots__ = ("_batches", "_cumulative", "_floor", "_individual")

    def __init__(self) -> None:
        # Position -> the batch's BatchAcks. Only batches of two or more messages that were
        # delivered (or acked by id) and are partly unacked are here; one dropped from here is
        # retired (left 0), so that the Messages still pointing to it take the tracker's path.
        self._batches: dict[Position, BatchAcks] = {}
        self._individual: set[Position] = set()
        self._cumulative: Position | None = None  # the newest cumulative ack not sent yet
        self._floor: Position | None = None  # the newest cumulative ack ever recorded

    def track(self, ledger_id: int, entry_id: int, num_messages: int) -> int:
        """Register a delivered batch; returns the bitmask of its indexes still unacked (all of
        them unless this is a redelivery of a batch the application partly acked)."""
        acks = self.batch(ledger_id, entry_id, num_messages)
        return (1 << num_messages) - 1 if acks is None else acks.mask()

    def batch(self, ledger_id: int, entry_id: int, num_messages: int) -> BatchAcks | None:
        """Register a delivered batch; its BatchAcks (a redelivered batch's holds what the
        application acked before), None for fewer than two messages (nothing to track)."""
        if num_messages < 2:
            return None
        position = (ledger_id, entry_id)
        acks = self._batches.get(position)
        if acks is None:
            acks = self._batches[position] = BatchAcks(num_messages)
        return acks

    def acknowledge(self, ledger_id: int, entry_id: int, batch_index: int, num_messages: int = 0) -> bool:
        """Record an individual ack; True when it completes the entry (an ack for the broker was
        queued). `num_messages` is the batch size when known (0: unknown)."""
        position = (ledger_id, entry_id)
        if batch_index >= 0:
            acks = self._batches.get(position)
            if acks is None:
                if num_messages < 2:
                    # Untracked: a one-message batch, or one already fully acked; ack the entry.
                    self._individual.add(position)
                    return True
                acks = BatchAcks(num_messages)
            if acks.clear(batch_index):
                self._batches[position] = acks
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
            acks = self._batches.get(position)
            if acks is None and num_messages >= 2:
                acks = BatchAcks(num_messages)
            if acks is not None:
                if acks.clear_up_to(batch_index):
                    # The batch is only partly acked: the broker may move up to the entry before.
                    self._batches[position] = acks
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
                kept: dict[Position, BatchAcks] = {}
                for position, acks in self._batches.items():
                    if position > floor:
                        kept[position] = acks
                    else:
                        acks.left = 0  # retired
                self._batches = kept
        return sorted(individual), cumulative

    def is_acked(self, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        """Whether this message was acked here (for filtering redeliveries)."""
        position = (ledger_id, entry_id)
        if self._floor is not None and position <= self._floor:
            return True
        acks = self._batches.get(position)
        if acks is None or batch_index < 0:
            return False
        return batch_index >= len(acks.unacked) or not acks.unacked[batch_index]

    def batches_tracked(self) -> int:
        return len(self._batches)

    def has_unacked_messages(self, ledger_id: int, entry_id: int) -> bool:
        """Whether this entry is a batch delivered here with messages not acknowledged yet."""
        return (ledger_id, entry_id) in self._batches

    def reset(self) -> None:
        """Forget the partly acked batches and the cumulative floor: after a seek every message
        may come again and must count as unacked. Acks waiting for the next flush are kept."""
        for acks in self._batches.values():
            acks.left = 0  # retired
        self._batches = {}
        self._floor = None
