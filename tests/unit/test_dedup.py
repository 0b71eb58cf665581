"""Message deduplication: pushed and persisted marks per producer, NEW / DUP / UNKNOWN, and recovery
from a snapshot plus a replay of the entries written after it."""

from __future__ import annotations

import json
import time

from herald.broker.core.dedup import DedupStatus, MessageDeduplication
from herald.broker.core.managed_ledger import Position
from herald.common.codec.entry import EntryMetadata, encode_entry
from herald.metadata.store import MetadataStore


def entry(producer: str, sequence_id: int, highest: int | None = None) -> bytes:
    meta = EntryMetadata(producer_name=producer, sequence_id=sequence_id,
                         highest_sequence_id=sequence_id if highest is None else highest, num_messages=1)
    return encode_entry(meta, b"payload")


class FakeLog:
    """A list of entries standing in for a managed ledger: recovery only reads."""

    def __init__(self, entries: list[bytes], ledger_id: int = 1) -> None:
        self.entries = [(Position(ledger_id, i), data) for i, data in enumerate(entries)]

    @property
    def last_confirmed_position(self) -> Position:
        return self.entries[-1][0] if self.entries else Position(1, -1)

    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        return [e for e in self.entries if e[0] >= start][:max_entries]


def make(store: MetadataStore, interval: int = 1000, enabled: bool = True) -> MessageDeduplication:
    return MessageDeduplication("public/default/persistent/t", store, enabled, interval)


async def test_new_then_duplicate_once_persisted(store: MetadataStore) -> None:
    dedup = make(store)
    assert dedup.check("p", 0, 0) is DedupStatus.NEW
    assert dedup.check("p", 0, 0) is DedupStatus.UNKNOWN  # pushed, not yet persisted
    dedup.persisted("p", 0, Position(1, 0))
    assert dedup.check("p", 0, 0) is DedupStatus.DUP
    assert dedup.check("p", 1, 1) is DedupStatus.NEW
    assert dedup.last_sequence_id("p") == 0
    assert dedup.last_sequence_id("other") == -1


async def test_batch_raises_pushed_mark_to_its_highest_sequence_id(store: MetadataStore) -> None:
    dedup = make(store)
    assert dedup.check("p", 10, 19) is DedupStatus.NEW
    assert dedup.check("p", 15, 15) is DedupStatus.UNKNOWN
    dedup.persisted("p", 19, Position(1, 0))
    assert dedup.check("p", 10, 19) is DedupStatus.DUP
    assert dedup.check("p", 20, 29) is DedupStatus.NEW


async def test_producers_are_tracked_separately(store: MetadataStore) -> None:
    dedup = make(store)
    assert dedup.check("a", 5, 5) is DedupStatus.NEW
    assert dedup.check("b", 0, 0) is DedupStatus.NEW


async def test_failed_write_lets_the_producer_resend(store: MetadataStore) -> None:
    dedup = make(store)
    dedup.check("p", 0, 0)
    dedup.persisted("p", 0, Position(1, 0))
    assert dedup.check("p", 1, 1) is DedupStatus.NEW
    dedup.write_failed("p")
    assert dedup.check("p", 1, 1) is DedupStatus.NEW
    dedup.write_failed("q")  # unknown producer: nothing to reset
    assert dedup.check("q", 0, 0) is DedupStatus.NEW
    dedup.write_failed("q")
    assert dedup.check("q", 0, 0) is DedupStatus.NEW


async def test_disabled_dedup_accepts_everything(store: MetadataStore) -> None:
    dedup = make(store, enabled=False)
    assert dedup.check("p", 0, 0) is DedupStatus.NEW
    dedup.persisted("p", 0, Position(1, 0))
    assert dedup.check("p", 0, 0) is DedupStatus.NEW
    assert dedup.last_sequence_id("p") == -1


async def test_recovery_without_snapshot_replays_the_whole_log(store: MetadataStore) -> None:
    log = FakeLog([entry("a", 0), entry("b", 0), entry("a", 1, 5), entry("b", 1)])
    dedup = make(store)
    assert await dedup.recover(log) == 4
    assert dedup.last_sequence_id("a") == 5 and dedup.last_sequence_id("b") == 1
    assert dedup.check("a", 5, 5) is DedupStatus.DUP
    assert dedup.check("a", 6, 6) is DedupStatus.NEW


async def test_snapshot_is_taken_every_interval_and_on_close(store: MetadataStore) -> None:
    dedup = make(store, interval=2)
    for seq in range(3):
        dedup.check("p", seq, seq)
        dedup.persisted("p", seq, Position(1, seq))
    await dedup.close()
    got = await store.get(dedup.key)
    assert got is not None
    assert json.loads(got.value) == {"position": [1, 2], "producers": {"p": 2}}
    await dedup.close()  # idempotent


async def test_recovery_replays_only_after_the_snapshot(store: MetadataStore) -> None:
    entries = [entry("a", seq) for seq in range(10)]
    log = FakeLog(entries)
    first = make(store)
    for position, _ in log.entries[:6]:
        first.check("a", int(position.entry_id), int(position.entry_id))
        first.persisted("a", int(position.entry_id), position)
    await first.close()  # snapshot at 1:5
    second = make(store)
    assert await second.recover(log) == 4  # entries 6..9 only
    assert second.last_sequence_id("a") == 9


async def test_unreadable_entries_are_skipped_in_replay(store: MetadataStore) -> None:
    log = FakeLog([entry("a", 0), b"garbage", entry("a", 1)])
    dedup = make(store)
    assert await dedup.recover(log) == 3
    assert dedup.last_sequence_id("a") == 1


# ---- forgetting producers gone for long ----

async def test_a_producer_disconnected_past_the_inactivity_is_forgotten(store: MetadataStore) -> None:
    dedup = make(store)
    for name in ("gone", "back", "connected"):
        dedup.producer_connected(name)
        assert dedup.check(name, 0, 0) is DedupStatus.NEW
        dedup.persisted(name, 0, Position(1, 0))
    dedup.producer_disconnected("gone", now=100.0)
    dedup.producer_disconnected("back", now=100.0)
    dedup.producer_connected("back")  # reconnected: active again
    assert dedup.purge_inactive(now=159.0, inactivity=60.0) == 0  # not yet
    assert dedup.purge_inactive(now=160.0, inactivity=60.0) == 1
    assert dedup.producers == {"back": 0, "connected": 0}
    assert dedup.last_sequence_id("gone") == -1
    assert dedup.check("gone", 0, 0) is DedupStatus.NEW  # a resend after that counts as new


async def test_recovered_producers_are_inactive_until_they_connect(store: MetadataStore) -> None:
    dedup = make(store)
    await dedup.recover(FakeLog([entry("old", 0), entry("returning", 0)]))
    dedup.producer_connected("returning")
    forgotten = dedup.purge_inactive(now=time.monotonic() + 61.0, inactivity=60.0)
    assert forgotten == 1 and dedup.producers == {"returning": 0}
