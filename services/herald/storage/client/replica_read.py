"""Reads of a ledger's entries from its replicas: each entry from any node of its write set (per the
ensemble history), contiguous entries that one node holds in one ReadEntries call (a striped
ledger's runs in parallel), failing over to another replica on any error or timeout.

A ChecksumError is corruption on that node: it is logged (node, ledger, entry) and another replica
answers. A read fails only when every replica of some entry failed for it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import Collection

from herald.common import errors
from herald.storage.client.ledger_metadata import LedgerMetadata
from herald.storage.client.node_connection import NODE_FAILURES, NodePool

log = logging.getLogger(__name__)

_NAMED_ENTRY = re.compile(r"entry (\d+) of ledger")
_NOT_HELD = (errors.EntryNotFoundError, errors.LedgerNotFoundError)
# Runs of a striped ledger read at the same time.
_MAX_PARALLEL_READS = 16


async def read_entries(pool: NodePool, metadata: LedgerMetadata, first: int, last: int) -> list[tuple[int, bytes]]:
    """Entries first..last (inclusive), in order, each from a replica that holds it. The runs of a
    striped ledger (E > Qw) are read in parallel, each from a node holding all of it."""
    suspects: set[str] = set()  # replicas that failed during this read: asked last from then on
    spans = _spans(pool, metadata, first, last)
    if len(spans) == 1:
        return await _read_span(pool, metadata, first, last, suspects)
    slots = asyncio.Semaphore(_MAX_PARALLEL_READS)

    async def read_span(span: tuple[int, int]) -> list[tuple[int, bytes]]:
        async with slots:
            return await _read_span(pool, metadata, span[0], span[1], suspects)

    tasks = [asyncio.ensure_future(read_span(span)) for span in spans]
    try:
        parts = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return [entry for part in parts for entry in part]


def _spans(pool: NodePool, metadata: LedgerMetadata, first: int, last: int) -> list[tuple[int, int]]:
    """first..last cut into the runs that one replica each holds."""
    spans: list[tuple[int, int]] = []
    while first <= last:
        run_last, _ = plan_run(metadata, first, last, avoid=_quarantined(pool, metadata, first))
        spans.append((first, run_last))
        first = run_last + 1
    return spans


async def _read_span(pool: NodePool, metadata: LedgerMetadata, first: int, last: int,
                     suspects: set[str]) -> list[tuple[int, bytes]]:
    ledger_id = metadata.ledger_id
    result: list[tuple[int, bytes]] = []
    failed: dict[int, list[tuple[str, errors.HeraldError]]] = {}  # entry id -> replicas that failed it
    # Replicas that failed a read of several entries: which entry broke is unknown, so they are
    # asked one entry at a time from then on, and a failure then excludes exactly that entry.
    single: set[str] = set()
    next_id = first
    while next_id <= last:
        tried = {address for address, _ in failed.get(next_id, ())}
        avoid = suspects | _quarantined(pool, metadata, next_id)
        run_last, candidates = plan_run(metadata, next_id, last, tried, avoid)
        if not candidates:
            raise unreadable(ledger_id, next_id, failed.get(next_id, []))
        address = random.choice(candidates)  # spreads reads over the replicas
        if address in single:
            run_last = next_id
        error: errors.HeraldError | None = None
        try:
            got = await pool.node(address).read(ledger_id, next_id, run_last)
        except errors.HeraldError as exc:
            got, error = [], exc
        for entry_id, data in got:
            if entry_id != next_id:  # a node answers in order from first; anything else is a gap
                break
            result.append((entry_id, data))
            next_id += 1
        if next_id > run_last:
            continue
        suspects.add(address)
        # A short answer, a one-entry read, "not held" or a node failure pins the failure on this entry.
        precise = error is None or next_id == run_last or isinstance(error, NODE_FAILURES + _NOT_HELD)
        if error is None:
            error = errors.EntryNotFoundError(f"storage node {address} does not hold entry {next_id} of ledger "
                                              f"{ledger_id}")
        _note_failure(pool, address, ledger_id, next_id, error)
        if precise:
            failed.setdefault(next_id, []).append((address, error))
        else:
            single.add(address)
    return result


def plan_run(metadata: LedgerMetadata, first: int, last: int, excluded: Collection[str] = (),
             avoid: Collection[str] = ()) -> tuple[int, list[str]]:
    """The longest run first..run_last (<= last) that one replica holds, and the replicas holding it
    all (none excluded; ones to avoid only if nothing else is left)."""
    write_set = [a for a in metadata.write_set(first) if a not in excluded]
    preferred = [a for a in write_set if a not in avoid]
    candidates = preferred or write_set
    if not candidates:
        return first, []
    holding = set(candidates)
    entry_id = first
    while entry_id < last and holding:
        segment_end = _segment_end(metadata, entry_id)
        if len(metadata.ensemble_for(entry_id)) == metadata.write_quorum:
            # Every node of this ensemble holds every entry of it: jump to its end.
            stop = min(last, segment_end)
            if stop > entry_id:
                entry_id = stop
                continue
        common = holding.intersection(metadata.write_set(entry_id + 1))
        if not common:
            break
        holding = common
        entry_id += 1
    ordered = [a for a in candidates if a in holding]
    return entry_id, ordered


def _segment_end(metadata: LedgerMetadata, entry_id: int) -> int:
    """The last entry id of the ensemble in force for entry_id (a huge number for the current one)."""
    for first, _ in metadata.ensembles:
        if first > entry_id:
            return first - 1
    return 1 << 62


def _quarantined(pool: NodePool, metadata: LedgerMetadata, entry_id: int) -> set[str]:
    return {a for a in metadata.write_set(entry_id) if pool.is_quarantined(a)}


def _note_failure(pool: NodePool, address: str, ledger_id: int, entry_id: int, error: errors.HeraldError) -> None:
    if isinstance(error, errors.ChecksumError):
        named = _NAMED_ENTRY.search(str(error))
        bad_entry = int(named.group(1)) if named else entry_id
        log.error("storage node %s holds a corrupt copy of entry %d of ledger %d; reading it from another "
                  "replica (%s)", address, bad_entry, ledger_id, error)
    elif isinstance(error, NODE_FAILURES):
        pool.quarantine(address, error)
    elif not isinstance(error, _NOT_HELD):
        log.warning("read of entry %d of ledger %d from storage node %s failed: %s", entry_id, ledger_id,
                    address, error)


def unreadable(ledger_id: int, entry_id: int, failures: list[tuple[str, errors.HeraldError]]) -> errors.HeraldError:
    """The error for an entry that every replica failed to give: not found if none holds it."""
    detail = "; ".join(f"{address}: {error}" for address, error in failures) or "no replica"
    message = f"entry {entry_id} of ledger {ledger_id} could not be read from any of its replicas ({detail})"
    if all(isinstance(error, _NOT_HELD) for _, error in failures):
        return errors.EntryNotFoundError(message)
    if any(isinstance(error, NODE_FAILURES) for _, error in failures):
        return errors.ServiceNotReadyError(f"{message}: retry once its storage nodes answer again")
    if any(isinstance(error, errors.ChecksumError) for _, error in failures):
        return errors.ChecksumError(message)
    return errors.PersistenceError(message)
