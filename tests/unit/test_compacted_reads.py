"""broker.core.compacted_reads without I/O: what a read_compacted read takes from a compacted view
(an in-memory stand-in with the compactor's read interface) and where reading goes on: the view
from the start asked, past its horizon the log, a view replaced while read, and the refusals; and
the mask of the messages a compacted batch keeps (common.codec.compacted_out)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.core.compacted_reads import (
    NO_COMPACTION,
    VIEW_START,
    CompactedRead,
    CompactedView,
    after,
    check_read_compacted,
    compacted_start,
    read_compacted,
    wanted_start,
)
from herald.broker.core.cursor import InitialPosition, PublishTime
from herald.broker.core.ledger_list import Position
from herald.broker.core.subscription_type import SubscriptionType
from herald.common.codec import pulsar_entry
from herald.common.codec.compacted_out import FLAG_COMPACTED_OUT, kept_messages
from herald.common.codec.compression import NONE, ZLIB, compress
from herald.common.codec.entry import EntryMetadata, decode_entry, encode_entry, pack_record
from herald.common.codec.herald_entry import RECORD_HEADER
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


# ---- which messages of a compacted batch are delivered (common.codec.compacted_out) ----

def herald_batch(records: list[tuple[str, bytes] | None], compression: int = NONE) -> bytes:
    """A Herald batch; None: a record flagged compacted-out (empty, as the compactor writes it)."""
    payload = bytearray()
    for record in records:
        if record is None:
            payload += RECORD_HEADER.pack(0, FLAG_COMPACTED_OUT)
        else:
            pack_record(payload, record[1], record[0], 7, 3, {"p": "v"})
    data = bytes(payload)
    metadata = EntryMetadata(producer_name="p", sequence_id=0, highest_sequence_id=len(records) - 1,
                             num_messages=len(records), batched=True, uncompressed_size=len(data))
    if compression != NONE:
        metadata.compression = compression  # type: ignore[assignment]
        data = compress(compression, data)
    return encode_entry(metadata, data)


def pulsar_batch(records: list[tuple[str, bytes] | None]) -> bytes:
    parts = []
    for record in records:
        single = pulsar.SingleMessageMetadata(compacted_out=record is None)
        value = b"" if record is None else record[1]
        if record is not None:
            single.partition_key = record[0]
        single.payload_size = len(value)
        meta = single.SerializeToString()
        parts.append(struct.pack(">I", len(meta)) + meta + value)
    payload = b"".join(parts)
    metadata = pulsar.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                                      num_messages_in_batch=len(records), uncompressed_size=len(payload))
    return pulsar_entry.encode(metadata, payload)


@pytest.mark.parametrize("make", [herald_batch, pulsar_batch], ids=["herald", "pulsar"])
def test_a_batch_is_delivered_with_the_mask_of_the_messages_it_keeps(make: Any) -> None:
    assert kept_messages(make([None, ("a", b"1"), None, ("b", b"2")])) == 0b1010
    assert kept_messages(make([("a", b"1"), ("b", b"2")])) is None  # all kept: no mask
    assert kept_messages(make([("a", b"1")] + [None] * 69)) == 1  # past 64 messages


def test_an_unbatched_compressed_or_unreadable_entry_is_delivered_whole() -> None:
    plain = EntryMetadata(producer_name="p", sequence_id=0, highest_sequence_id=0, num_messages=1)
    assert kept_messages(encode_entry(plain, b"value")) is None
    assert kept_messages(herald_batch([("a", b"1"), ("b", b"2")], compression=ZLIB)) is None
    assert kept_messages(b"not an entry") is None
    torn = herald_batch([None, ("a", b"1")])
    metadata, payload = decode_entry(torn)
    assert kept_messages(encode_entry(metadata, bytes(payload)[:-1])) is None  # framing runs past the end


# ---- where a read_compacted cursor starts (ledgers before first_kept were deleted) ----

FIRST_KEPT = Position(7, 0)


def test_the_earliest_is_before_every_original_position() -> None:
    assert wanted_start(InitialPosition.EARLIEST) == VIEW_START < Position(0, 0)
    assert compacted_start(VIEW_START, FIRST_KEPT, FIRST_KEPT) == VIEW_START


def test_a_start_in_a_deleted_ledger_is_kept_not_snapped_forward() -> None:
    assert wanted_start(Position(3, 5)) == Position(3, 5)
    assert compacted_start(Position(3, 5), FIRST_KEPT, FIRST_KEPT) == Position(3, 5)
    assert compacted_start(Position(-1, -1), FIRST_KEPT, FIRST_KEPT) == VIEW_START  # never before it


def test_a_start_in_the_log_and_targets_the_view_does_not_change_resolve_as_the_log_does() -> None:
    assert compacted_start(Position(7, 3), Position(7, 3), FIRST_KEPT) == Position(7, 3)
    assert compacted_start(Position(99, 0), Position(8, 2), FIRST_KEPT) == Position(8, 2)  # past the end
    assert wanted_start(InitialPosition.LATEST) is None and wanted_start(PublishTime(5)) is None
    assert compacted_start(None, Position(8, 2), FIRST_KEPT) == Position(8, 2)
