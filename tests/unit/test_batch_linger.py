"""When an open batch ships before it is full (client/linger.py), without a network: at the end of
the loop turn that queued it when nothing earlier is in flight; kept filling behind entries in
flight until they settle or the max publish delay passes; at once on flush(). The accumulators
get the producer's count of entries in flight as a function, here a list's length the tests set."""

from __future__ import annotations

import asyncio

from herald.client.accumulator import BatchAccumulator, KeyBasedAccumulator, PendingOp
from herald.common.codec.message_id import MessageId

DEADLINE = 10.0  # seconds a test waits for an entry it expects; never a figure under test


class Producer:
    """What the accumulator's owner does: ship closed entries (they are in flight until settled)."""

    def __init__(self) -> None:
        self.emitted: list[PendingOp] = []
        self.in_flight: list[PendingOp] = []
        self.shipped = asyncio.Event()

    def emit(self, op: PendingOp) -> None:
        self.emitted.append(op)
        self.in_flight.append(op)
        self.shipped.set()

    def count(self) -> int:
        return len(self.in_flight)

    async def next_entry(self) -> PendingOp:
        """Wait (with a deadline) for the next entry shipped, and return it."""
        seen = len(self.emitted)
        while len(self.emitted) == seen:
            self.shipped.clear()
            await asyncio.wait_for(self.shipped.wait(), DEADLINE)
        return self.emitted[seen]


def batch(producer: Producer, *, max_delay: float = 3600.0, max_bytes: int = 128 * 1024) -> BatchAccumulator:
    return BatchAccumulator(max_messages=1000, max_bytes=max_bytes, max_delay=max_delay, batched=True,
                            emit=producer.emit, loop=asyncio.get_running_loop(), producer_name="p",
                            in_flight=producer.count)


def keyed(producer: Producer, *, max_delay: float = 3600.0) -> KeyBasedAccumulator:
    return KeyBasedAccumulator(max_messages=1000, max_bytes=128 * 1024, max_delay=max_delay, emit=producer.emit,
                               loop=asyncio.get_running_loop(), producer_name="p", in_flight=producer.count)


def add(acc: BatchAccumulator | KeyBasedAccumulator, value: bytes, key: str | None = None) -> asyncio.Future[MessageId]:
    future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
    acc.append(value, key, None, 0, None, future)
    return future


async def next_turn() -> None:
    """Let the loop run one turn: what the appends scheduled for the end of this one runs first."""
    await asyncio.sleep(0)


async def test_an_open_batch_ships_when_the_turn_that_queued_it_ends_with_nothing_in_flight() -> None:
    producer = Producer()
    acc = batch(producer)  # an hour's delay: only the end of the turn can ship it
    for value in (b"a", b"b", b"c"):
        add(acc, value)
    assert producer.emitted == [] and acc.count == 3  # not while the application is still sending
    op = await producer.next_entry()
    assert (op.num_messages, op.sequence_id, op.highest_sequence_id) == (3, 0, 2)
    assert acc.count == 0


async def test_messages_of_one_turn_share_one_batch_and_the_next_turn_starts_another() -> None:
    producer = Producer()
    acc = batch(producer)
    for _ in range(5):
        add(acc, b"x")
    first = await producer.next_entry()
    producer.in_flight.clear()  # its receipt came
    for _ in range(2):
        add(acc, b"y")
    second = await producer.next_entry()
    assert [first.num_messages, second.num_messages] == [5, 2]
    assert second.sequence_id == 5


async def test_entries_closed_full_in_the_same_turn_do_not_hold_back_its_last_batch() -> None:
    producer = Producer()
    acc = batch(producer, max_bytes=100)  # 45 bytes a message with its record header: 2 a batch
    for _ in range(5):
        add(acc, b"m" * 40)
    assert [op.num_messages for op in producer.emitted] == [2, 2]  # closed full, in flight
    last = await producer.next_entry()
    assert last.num_messages == 1 and len(producer.in_flight) == 3


async def test_a_batch_keeps_filling_behind_an_earlier_entry_until_the_max_publish_delay() -> None:
    producer = Producer()
    acc = batch(producer, max_delay=0.05)
    add(acc, b"first")
    await producer.next_entry()  # in flight from here on: no receipt comes
    add(acc, b"a")
    await next_turn()
    assert acc.count == 1  # the turn ended behind an entry in flight: the batch stays open...
    add(acc, b"b")
    await next_turn()
    add(acc, b"c")
    op = await producer.next_entry()  # ...until the delay, its upper bound, ships it
    assert op.num_messages == 3 and op.sequence_id == 1


async def test_a_held_batch_ships_at_the_end_of_the_turn_whose_receipts_settled_what_was_in_flight() -> None:
    producer = Producer()
    acc = batch(producer)
    add(acc, b"first")
    await producer.next_entry()
    add(acc, b"a")
    add(acc, b"b")
    await next_turn()
    assert acc.count == 2  # held behind "first"
    producer.in_flight.clear()  # the receipt of "first"
    acc.settled()
    add(acc, b"c")  # a sender the receipt woke, in the same turn: it joins the batch
    op = await producer.next_entry()
    assert op.num_messages == 3


async def test_settled_does_not_ship_a_held_batch_while_entries_are_still_in_flight() -> None:
    producer = Producer()
    acc = batch(producer)
    for value in (b"one", b"two"):
        add(acc, value)
        acc.flush()
    await next_turn()  # two entries in flight, closed in an earlier turn
    add(acc, b"held")
    await next_turn()
    producer.in_flight.pop(0)  # one of the two receipts
    acc.settled()
    await next_turn()
    assert acc.count == 1
    producer.in_flight.pop(0)
    acc.settled()
    assert (await producer.next_entry()).num_messages == 1


async def test_ship_soon_ships_at_the_end_of_the_turn_even_behind_entries_in_flight() -> None:
    producer = Producer()
    acc = batch(producer)
    add(acc, b"first")
    await producer.next_entry()  # in flight
    add(acc, b"sent")
    acc.ship_soon()  # what send() does: its caller awaits this message
    add(acc, b"other")  # another task's message of the same turn rides along
    assert acc.count == 2
    op = await producer.next_entry()
    assert op.num_messages == 2


async def test_flush_ships_at_once_and_a_later_turn_end_finds_nothing_to_ship() -> None:
    producer = Producer()
    acc = batch(producer)
    add(acc, b"a")
    add(acc, b"b")
    acc.flush()
    assert [op.num_messages for op in producer.emitted] == [2]
    await next_turn()
    assert len(producer.emitted) == 1


async def test_without_an_in_flight_count_the_batch_waits_for_the_delay_as_before() -> None:
    producer = Producer()
    acc = BatchAccumulator(max_messages=1000, max_bytes=1 << 20, max_delay=0.05, batched=True, emit=producer.emit,
                           loop=asyncio.get_running_loop())
    add(acc, b"a")
    await next_turn()
    add(acc, b"b")
    op = await producer.next_entry()
    assert op.num_messages == 2  # both turns' messages: the turn's end did not ship the first


async def test_key_based_batches_all_ship_at_the_end_of_the_turn_in_the_order_they_were_started() -> None:
    producer = Producer()
    acc = keyed(producer)
    for key in ("k2", "k1", "k2", "k3"):
        add(acc, key.encode(), key)
    assert producer.emitted == []
    await producer.next_entry()
    assert [(op.num_messages, op.sequence_id) for op in producer.emitted] == [(2, 0), (1, 2), (1, 3)]
    assert acc.count == 0


async def test_key_based_batches_keep_filling_behind_an_entry_in_flight_until_it_settles() -> None:
    producer = Producer()
    acc = keyed(producer)
    add(acc, b"first", "k")
    await producer.next_entry()
    add(acc, b"a", "k")
    add(acc, b"b", "j")
    await next_turn()
    assert acc.count == 2 and len(producer.emitted) == 1
    producer.in_flight.clear()
    acc.settled()
    await producer.next_entry()
    assert [op.num_messages for op in producer.emitted] == [1, 1, 1]
