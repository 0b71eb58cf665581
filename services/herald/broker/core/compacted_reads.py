"""Reading a topic's compacted view (read_compacted, the read side of Pulsar's CompactedTopic): a
subscription or pull whose read position is at or before the view's horizon reads the view from
there (the latest message per key, at their original positions), then the live log after the
horizon, so that nothing is lost or repeated at the boundary.

The view itself is the compactor's (broker.core.compaction); this module sees it through the two
Protocols below, so that dispatchers and pulls only know "a view with a horizon that reads entries".
Positions are original positions, hence monotonic across views: when a new compaction publishes
another view while a reader is in the compacted range, the next read continues from its read
position in the new view. Acks, redelivery and seeks all work on those original positions.

Starting before the log: once a topic is compacted, the "__compaction" cursor holds retention only
from the horizon on, so retention deletes the ledgers before it while the view still holds the
latest message of their keys. A read_compacted cursor asked for the earliest therefore starts at
VIEW_START, a position before every original position a view can hold, not at the log's first kept
entry (that would skip every key whose latest message lies in a deleted ledger); likewise a reader's
start, or a seek, in a deleted ledger stays where it was asked (compacted_start) instead of being
snapped forward into the log. The log, the cursor's backlog and retention see such a position as
"before the first kept entry" (the ledger list normalizes it), so nothing else changes for them.
Only new positions are chosen so: a cursor that already has a position keeps it (a subscription that
read the deleted range is not given it again).

A view's batch keeps its compacted-out messages in place, flagged (Herald's record flag
FLAG_COMPACTED_OUT, Pulsar's SingleMessageMetadata.compacted_out), so that batch indexes stay
stable. Herald's client skips them; Pulsar's C++ client does not, so to a reader each such entry
is delivered with the mask of the messages it keeps (common.codec.compacted_out), which a Pulsar
front end sends as the MESSAGE's ack_set: the client skips the others, as it does for messages
acknowledged by index. A durable subscription's consumer gets the batch whole (as from Pulsar's
broker): that client acknowledges a batch only once it acknowledged each of its messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from herald.broker.core.cursor import InitialPosition, ResetTarget
from herald.broker.core.ledger_list import Position
from herald.broker.core.subscription_type import SubscriptionType
from herald.common.codec.compacted_out import kept_messages as kept_messages  # re-exported for dispatchers
from herald.common.errors import HeraldError, NotAllowedError

# Subscription types that may read the compacted view (Pulsar's rule: one consumer reads in order;
# Shared and Key_Shared spread a topic's messages, which a per-key view cannot keep in order).
READ_COMPACTED_TYPES = (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER)

# Where a read_compacted cursor asked for the earliest reads first: before every original position
# (ledger ids are >= 0), so the whole view is read, then the log after its horizon.
VIEW_START = Position(-1, 0)

# Attempts to read a view that a new compaction replaced (and deleted) while the read was in flight.
_VIEW_SWAP_RETRIES = 3


class CompactedView(Protocol):
    """One published compacted ledger (broker.core.compaction.CompactedView): immutable."""

    @property
    def horizon(self) -> Position:
        """The last position of the topic the view covers."""

    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """The view's entries whose original position is >= start, in order, at most max_entries
        (stored entries whose compacted-out messages are flagged)."""


class CompactedSource(Protocol):
    """Where a topic's current view is found (broker.core.compaction.TopicCompaction): swapped
    atomically after each successful compaction; None while the topic was never compacted."""

    @property
    def view(self) -> CompactedView | None: ...


class NoCompaction:
    """A topic whose compaction state is not loaded: read_compacted reads the log as usual."""

    view: CompactedView | None = None


NO_COMPACTION = NoCompaction()


@dataclass(frozen=True, slots=True)
class CompactedRead:
    """A read from the view: the entries (original positions) and where reading goes on (just after
    the last entry, or after the horizon when the view had nothing more from the start asked)."""

    entries: list[tuple[Position, bytes]]
    next: Position


def after(position: Position) -> Position:
    """The position right after `position` (readers normalize it across ledgers)."""
    return Position(position.ledger_id, position.entry_id + 1)


def wanted_start(target: ResetTarget) -> Position | None:
    """The first position a read_compacted cursor moved to `target` asks for, before the log
    resolves it (None: a target the view does not change, the latest or a publish time)."""
    if target is InitialPosition.EARLIEST:
        return VIEW_START
    return target if isinstance(target, Position) else None


def compacted_start(wanted: Position | None, resolved: Position, first_kept: Position) -> Position:
    """Where a read_compacted cursor starts: `resolved` (the log's answer: the first kept entry at
    or after what was asked), unless what was asked (`wanted`) lies before the log's first kept
    entry, in ledgers retention deleted whose latest messages per key the view may still hold:
    then there (never before VIEW_START), so that the view is read from that point on."""
    if wanted is None or wanted >= first_kept:
        return resolved
    return max(wanted, VIEW_START)


def check_read_compacted(sub_type: SubscriptionType, persistent: bool) -> None:
    """Refuse read_compacted where Pulsar does: Shared / Key_Shared subscriptions and non-persistent
    topics (which keep nothing to compact)."""
    if sub_type not in READ_COMPACTED_TYPES:
        raise NotAllowedError(
            f"read_compacted is only allowed on Exclusive and Failover subscriptions (and readers), not on a "
            f"{sub_type.label} subscription: subscribe without read_compacted, or with an Exclusive or "
            "Failover subscription")
    if not persistent:
        raise NotAllowedError(
            "read_compacted needs a persistent topic: a non-persistent topic stores nothing to compact; "
            "subscribe without read_compacted")


async def read_compacted(source: CompactedSource, start: Position, max_entries: int) -> CompactedRead | None:
    """Up to max_entries entries of the current view from `start` on; None when there is no view or
    `start` is past its horizon (read the log). An empty read means the view holds nothing more up
    to its horizon: `next` is then the log's first position after it."""
    for attempt in range(_VIEW_SWAP_RETRIES):
        view = source.view
        if view is None:
            return None
        horizon = view.horizon
        if start > horizon:
            return None
        try:
            entries = await view.read_entries(start, max_entries)
        except HeraldError:
            # A new view replaced this one (its ledger may be deleted already): read the new one,
            # from the same original position. Any other failure is the caller's to retry.
            if source.view is view or attempt == _VIEW_SWAP_RETRIES - 1:
                raise
            continue
        if not entries:
            return CompactedRead([], after(horizon))
        return CompactedRead(entries, after(entries[-1][0]))
    raise AssertionError("unreachable")  # the loop returns or raises

