"""broker.core.compacted_reads without I/O: what a read_compacted read takes from a compacted view
(an in-memory stand-in with the compactor's read interface) and where reading goes on: the view
from the start asked, past its horizon the log, a view replaced while read, and the refusals."""

from __future__ import annotations

import pytest
from herald.broker.core.compacted_reads import (
    NO_COMPACTION,
    CompactedRead,
    CompactedView,
    after,
    check_read_compacted,
    read_compacted,
)
from herald.broker.core.ledger_list import Position
from herald.broker.core.subscription_type import SubscriptionType
from herald.common.errors import EntryNotFoundError, NotAllowedError


class View:
    """A published compacted view: entries at their original positions, up to `horizon`."""

    def __init__(self, horizon: Position, positions: list[Position], *, deleted: bool = False) -> None:
        self.horizon = horizon
        self.entries = [(p, f"{p.ledger_id}:{p.entry_id}".encode()) for p in positions]
        self.deleted = deleted

    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        if self.deleted:
            raise EntryNotFoundError("compacted ledger 9 was deleted")
        return [e for e in self.entries if e[0] >= start][:max_entries]


class Source:
    def __init__(self, view: CompactedView | None) -> None:
        self.view = view


P = Position
VIEW = View(P(3, 9), [P(1, 4), P(2, 0), P(2, 7), P(3, 9)])


def positions(read: CompactedRead | None) -> list[Position]:
    assert read is not None
    return [p for p, _ in read.entries]


async def test_no_view_reads_the_log() -> None:
    assert await read_compacted(NO_COMPACTION, P(0, 0), 10) is None
    assert await read_compacted(Source(None), P(0, 0), 10) is None


async def test_a_start_at_or_before_the_horizon_reads_the_view_from_there() -> None:
    read = await read_compacted(Source(VIEW), P(-1, -1), 10)
    assert positions(read) == [P(1, 4), P(2, 0), P(2, 7), P(3, 9)]
    assert read is not None and read.next == P(3, 10)
    read = await read_compacted(Source(VIEW), P(2, 1), 1)  # between kept entries: the next kept one
    assert positions(read) == [P(2, 7)] and read is not None and read.next == P(2, 8)
    read = await read_compacted(Source(VIEW), P(3, 9), 5)  # the horizon itself
    assert positions(read) == [P(3, 9)]


async def test_a_view_with_nothing_more_sends_reading_to_the_log_after_the_horizon() -> None:
    view = View(P(3, 9), [P(1, 4)])  # the last keys were deleted: nothing kept after 1:4
    read = await read_compacted(Source(view), P(1, 5), 10)
    assert read == CompactedRead([], P(3, 10))


async def test_a_start_past_the_horizon_reads_the_log() -> None:
    assert await read_compacted(Source(VIEW), P(3, 10), 10) is None
    assert await read_compacted(Source(VIEW), P(4, 0), 10) is None


async def test_a_view_replaced_during_the_read_is_read_again_in_the_new_one() -> None:
    source = Source(None)
    newer = View(P(5, 0), [P(2, 7), P(4, 2)])

    class Replaced(View):
        async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
            source.view = newer  # published meanwhile; this one's ledger deleted
            raise EntryNotFoundError("compacted ledger 8 was deleted")

    source.view = Replaced(P(3, 9), [])
    read = await read_compacted(source, P(2, 1), 10)
    assert positions(read) == [P(2, 7), P(4, 2)]


async def test_a_failing_view_that_is_still_current_raises() -> None:
    with pytest.raises(EntryNotFoundError):
        await read_compacted(Source(View(P(3, 9), [P(1, 1)], deleted=True)), P(0, 0), 10)


def test_after_is_the_next_entry_of_the_same_ledger() -> None:
    assert after(P(7, 41)) == P(7, 42)


@pytest.mark.parametrize("sub_type", [SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER])
def test_exclusive_and_failover_may_read_compacted(sub_type: SubscriptionType) -> None:
    check_read_compacted(sub_type, persistent=True)


@pytest.mark.parametrize("sub_type", [SubscriptionType.SHARED, SubscriptionType.KEY_SHARED])
def test_shared_types_may_not(sub_type: SubscriptionType) -> None:
    with pytest.raises(NotAllowedError) as refused:
        check_read_compacted(sub_type, persistent=True)
    assert str(refused.value) == (
        f"read_compacted is only allowed on Exclusive and Failover subscriptions (and readers), not on a "
        f"{sub_type.label} subscription: subscribe without read_compacted, or with an Exclusive or Failover "
        "subscription")


def test_a_non_persistent_topic_may_not() -> None:
    with pytest.raises(NotAllowedError, match=r"^read_compacted needs a persistent topic"):
        check_read_compacted(SubscriptionType.EXCLUSIVE, persistent=False)
