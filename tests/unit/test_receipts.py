"""The producer session's one in-order completion point (Receipts), without a broker: sends complete in
any order, receipts come out in the order the sends were made, each as soon as every send before it
is done; a finished line ends, an abandoned one at once."""

from __future__ import annotations

import asyncio

from herald.broker.core.producer_session import Receipts
from herald.common.errors import PersistenceError


def sequence_ids(receipts: list[object]) -> list[int]:
    return [r.sequence_id for r in receipts]  # type: ignore[attr-defined]


async def test_receipts_come_out_in_send_order_whatever_order_they_complete_in() -> None:
    line = Receipts()
    first, second, third = line.add(1, 1), line.add(2, 2), line.add(3, 5)
    third.succeed(4, 0)
    second.fail(PersistenceError("write failed"))
    assert line.outstanding == 3  # the head is not done: nothing can go yet
    first.succeed(4, 1)
    got = await asyncio.wait_for(line.next(), 5)
    assert sequence_ids(got) == [1, 2, 3]
    assert [(r.ledger_id, r.entry_id, r.error) for r in (got[0], got[2])] == [(4, 1, None), (4, 0, None)]
    assert str(got[1].error) == "write failed" and got[2].highest_sequence_id == 5
    assert line.outstanding == 0


async def test_a_receipt_completes_once() -> None:
    line = Receipts()
    receipt = line.add(1, 1)
    receipt.succeed(4, 1)
    receipt.fail(PersistenceError("late"))  # a second outcome is ignored
    receipt.succeed(9, 9)
    [got] = await asyncio.wait_for(line.next(), 5)
    assert (got.ledger_id, got.entry_id, got.error) == (4, 1, None)


async def test_a_finished_line_ends_once_drained_and_an_abandoned_one_at_once() -> None:
    drained = Receipts()
    pending = drained.add(1, 1)
    drained.finish(abandon=False)
    waiting = asyncio.ensure_future(drained.next())
    pending.succeed(4, 1)
    assert sequence_ids(await asyncio.wait_for(waiting, 5)) == [1]
    assert await asyncio.wait_for(drained.next(), 5) == []

    abandoned = Receipts()
    held = abandoned.add(1, 1)
    abandoned.finish(abandon=True)
    assert await asyncio.wait_for(abandoned.next(), 5) == []
    assert held.done  # a topic still holding the send skips it
    held.succeed(4, 1)  # completing it later changes nothing
    assert await asyncio.wait_for(abandoned.next(), 5) == []
