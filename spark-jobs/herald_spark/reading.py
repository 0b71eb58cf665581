"""Reading one range [start, end) of one topic partition, in a Spark task: Pull calls through the
service URL (the proxy), entries unpacked into Arrow record batches. Runs in Python workers: the
range is a small picklable InputPartition, the client is made here and closed when done.

Data loss: a pull starts at the first entry kept at or after where it asks. When that is not the
entry asked for, the ledgers in between are looked up (admin internal stats): a ledger still in
the topic's list means there was simply nothing there (the end of a ledger); a ledger that is gone
was deleted by retention, with whatever it held, and failOnDataLoss decides.

read_compacted: the pulls read the topic's compacted view (the latest message per key) up to the
compaction horizon, then the log. Entries compaction left out are skipped on purpose there, so a
read that begins past where it asked is not data loss; what is left of the range is still read,
and a range whose end was deleted is still reported."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]
from herald.client import Client
from herald.client.admin import AdminClient
from herald.common.codec.message_id import MessageId
from herald.common.errors import HeraldError
from pyspark.sql.datasource import InputPartition

from herald_spark.offsets import entry_of
from herald_spark.rows import Columns

log = logging.getLogger(__name__)

ROWS_PER_BATCH = 8192  # Arrow record batch size handed to Spark
PULL_MAX_BYTES = 8 * 1024 * 1024


class DataLossError(HeraldError):
    """Messages in the requested range were deleted (retention) before they were read."""


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """Messages start <= id < end of one topic partition (offsets.py)."""

    topic: str  # the partition's own name
    partition: int  # its index; -1 for a topic that is not partitioned
    start: MessageId
    end: MessageId


@dataclass(frozen=True)
class ReadSettings:
    service_url: str
    fail_on_data_loss: bool
    pull_max_entries: int
    operation_timeout: float
    read_compacted: bool = False


def read_range(settings: ReadSettings, part: TopicRange) -> Iterator[pa.RecordBatch]:
    """The messages of `part` in id order, as Arrow record batches of up to ROWS_PER_BATCH rows."""
    if part.start >= part.end:
        return
    end_entry = entry_of(part.end)
    with Client(settings.service_url, operation_timeout=settings.operation_timeout) as client:
        columns = Columns(part.topic, part.partition)
        position: MessageId | None = None if part.start.ledger_id < 0 else part.start
        first = True
        while True:
            result = client.pull(part.topic, position, max_entries=settings.pull_max_entries,
                                 max_bytes=PULL_MAX_BYTES, read_compacted=settings.read_compacted)
            entries = result.entries
            found = (entries[0].ledger_id, entries[0].entry_id) if entries else entry_of(result.next)
            if position is not None and found != entry_of(position) and not settings.read_compacted:
                _check_gap(settings, part, position, found, first)
            first = False
            done = False
            for entry in entries:
                if (entry.ledger_id, entry.entry_id) > end_entry or (
                        (entry.ledger_id, entry.entry_id) == end_entry and part.end.batch_index < 0):
                    done = True
                    break
                columns.add_entry(entry, part.start, part.end)
                if len(columns) >= ROWS_PER_BATCH:
                    yield columns.batch()
                    columns = Columns(part.topic, part.partition)
            if done or not entries or entry_of(result.next) >= end_entry:
                if not done and not entries and entry_of(result.next) < end_entry:
                    _missing_tail(settings, part, result.next)
                break
            position = result.next
        if len(columns):
            yield columns.batch()


def _check_gap(settings: ReadSettings, part: TopicRange, asked: MessageId, found: tuple[int, int],
               first: bool) -> None:
    """The pull asked for `asked` and began at `found`: data loss when asked's ledger is gone."""
    ledgers = asyncio.run(_ledger_ids(settings, part.topic))
    if asked.ledger_id in ledgers:
        return  # the end of a ledger (or an empty one): nothing was skipped
    where = "the range's start" if first else "a position the read had reached"
    _lost(settings, part, f"{where} {asked.ledger_id}:{asked.entry_id} is in ledger {asked.ledger_id}, which "
                          f"retention deleted; the first message kept is at entry {found[0]}:{found[1]}")


def _missing_tail(settings: ReadSettings, part: TopicRange, reached: MessageId) -> None:
    _lost(settings, part, f"the topic has no messages from {reached.ledger_id}:{reached.entry_id} on, but the "
                          f"range ends at {part.end}: they were deleted")


def _lost(settings: ReadSettings, part: TopicRange, why: str) -> None:
    message = (f"data loss reading {part.topic} range [{part.start}, {part.end}): {why}. Set option "
               "failOnDataLoss=false to skip what was deleted and go on, or lengthen the topic's retention.")
    if settings.fail_on_data_loss:
        raise DataLossError(message)
    log.warning("%s (failOnDataLoss=false: skipped)", message)


async def _ledger_ids(settings: ReadSettings, topic: str) -> set[int]:
    async with AdminClient(settings.service_url, timeout=settings.operation_timeout) as admin:
        stats = await admin.internal_stats(topic)
    return {ledger.ledger_id for ledger in stats.ledgers}
