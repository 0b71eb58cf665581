"""maxMessagesPerTrigger: cutting a micro-batch's ranges short. Offsets are entry positions, so the
cut is made in stored entries, from the topic's ledger list (admin internal stats): each partition
gets a share of the limit proportional to its backlog (at least one entry while any is owed), and
its end moves to the start of the first entry past its share. An entry is one producer batch: with
batching on, a micro-batch holds up to the limit in entries, more in messages."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from herald.client.admin import AdminClient
from herald.common.codec.message_id import MessageId

from herald_spark.options import ReadOptions

Ledgers = list[tuple[int, int]]  # (ledger id, entries) in order


def limit_ends(options: ReadOptions, begin: Mapping[str, MessageId], ends: dict[str, MessageId],
               max_entries: int) -> dict[str, MessageId]:
    owed = {name: end for name, end in ends.items() if _start(begin, name, end) < end}
    if not owed:
        return ends
    ledgers = asyncio.run(_ledgers(options, list(owed)))
    counts = {name: entries_between(ledgers[name], _start(begin, name, end), end) for name, end in owed.items()}
    total = sum(counts.values())
    if total <= max_entries:
        return ends
    limited = dict(ends)
    for name, count in counts.items():
        share = min(count, max(1, max_entries * count // total)) if count else 0
        if share < count:
            limited[name] = advance(ledgers[name], _start(begin, name, owed[name]), owed[name], share)
    return limited


def _start(begin: Mapping[str, MessageId], name: str, end: MessageId) -> MessageId:
    return begin.get(name, MessageId(-1, -1, end.partition, -1))


async def _ledgers(options: ReadOptions, names: list[str]) -> dict[str, Ledgers]:
    async with AdminClient(options.service_url, timeout=options.operation_timeout) as admin:
        stats = await asyncio.gather(*(admin.internal_stats(name) for name in names))
    return {name: [(ledger.ledger_id, ledger.entries) for ledger in stat.ledgers] for name, stat in zip(
        names, stats, strict=True)}


def _spans(ledgers: Ledgers, start: MessageId, end: MessageId) -> list[tuple[int, int, int]]:
    """(ledger, first entry, entry after the last) of the entries in [start, end), entry positions."""
    spans = []
    for ledger_id, entries in ledgers:
        if ledger_id < start.ledger_id or ledger_id > end.ledger_id:
            continue
        low = max(start.entry_id, 0) if ledger_id == start.ledger_id else 0
        high = min(entries, end.entry_id) if ledger_id == end.ledger_id else entries
        if high > low:
            spans.append((ledger_id, low, high))
    return spans


def entries_between(ledgers: Ledgers, start: MessageId, end: MessageId) -> int:
    return sum(high - low for _, low, high in _spans(ledgers, start, end))


def advance(ledgers: Ledgers, start: MessageId, end: MessageId, count: int) -> MessageId:
    """The offset `count` entries after `start` (the start of the entry after them), at most `end`."""
    for ledger_id, low, high in _spans(ledgers, start, end):
        if count < high - low:
            return MessageId(ledger_id, low + count, end.partition, -1)
        count -= high - low
    return end
