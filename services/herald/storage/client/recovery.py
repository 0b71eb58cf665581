"""Ledger recovery (BookKeeper's LedgerRecoveryOp): close a ledger whose writer may have died, at an
entry no earlier than the last one it had acknowledged, so that a new writer can take over.

1. Mark the ledger IN_RECOVERY by compare-and-set. A lost CAS is another recoverer (or the writer
   changing its ensemble): read again; CLOSED means someone finished, so just open it.
2. Fence it on every node of its last ensemble (earlier ensembles hold only acknowledged entries).
   Unreachable nodes are tolerated while at least E - Qa + 1 of that ensemble are fenced: then no ack
   quorum can form without a fenced node, so the old writer can acknowledge nothing more.
3. Start from the highest LAC the fenced nodes report (the writer piggybacks it on every add):
   every entry up to it was acknowledged.
4. If some nodes of that ensemble did not answer, record (by CAS) a new ensemble from LAC + 1 with
   them replaced, or dropped as the writer would (never below Qw nodes).
5. Read forward entry by entry from any replica of its write set; re-add each entry found, with the
   recovery flag, to its whole (new) write set (at least Qa must take it). Stop at the first entry that
   at least Qw - Qa + 1 replicas answer they lack: at most Qa - 1 nodes could hold it, so it was
   never acknowledged. If too few replicas answer to tell, recovery fails and is retried later.
6. Close by CAS with that last entry and the ledger's length; if another recoverer closed it first,
   its result stands.

The recovered length is exact: the writer piggybacks the ledger's length with each add (as
BookKeeper's entry header does) and each node reports the one of its last entry with its LAC. A
node whose last entry is one recovery reaches (from the LAC to the last entry recovered) anchors
the count; each entry read after it adds its size, and the re-added entries carry their lengths in
turn. When no node can tell (entries written before lengths were piggybacked), the length is what
is known without reading the ledger: the bytes before its last ensemble (recorded at each ensemble
change) plus those of the entries recovered after the LAC, a lower bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from herald.api.v1 import storage_pb2
from herald.common import errors
from herald.common.transport.rpc import error_from_proto
from herald.metadata.store import MetadataStore
from herald.storage.client.add_frame import AddFrame
from herald.storage.client.ledger_metadata import LedgerMetadata, ledger_key, read_ledger_metadata
from herald.storage.client.node_connection import NODE_FAILURES, NodePool

log = logging.getLogger(__name__)

# Compare-and-set attempts to mark a ledger IN_RECOVERY before giving up (each lost one re-reads).
_MARK_ATTEMPTS = 10
# Recovered entries whose re-replication may be under way at once.
_MAX_REPLICATING = 64
# Entries read ahead of the one being recovered.
_READ_AHEAD = 32

_NOT_HELD = (errors.EntryNotFoundError, errors.LedgerNotFoundError)


class LedgerRecoveryOp:
    """One recovery of one ledger; `run()` returns the CLOSED metadata and its version."""

    def __init__(self, pool: NodePool, store: MetadataStore, ledger_id: int) -> None:
        self._pool = pool
        self._store = store
        self.ledger_id = ledger_id
        self._replicating: deque[tuple[int, list[tuple[str, asyncio.Future[storage_pb2.AddResponse]]]]] = deque()

    async def run(self) -> tuple[LedgerMetadata, int]:
        metadata, version = await self._mark_in_recovery()
        if metadata.state == "CLOSED":
            return metadata, version
        lac, unreachable, anchors = await self._fence(metadata)
        # The lower bound, should no node know the length: the bytes before the last ensemble
        # (recorded at each ensemble change) and those of the entries recovered after lac.
        length = metadata.length
        # The exact length up to `last`, once `last` reaches an entry a node knows the length at.
        exact = anchors.get(lac, -1)
        if exact >= 0:
            length = exact
        # Entries are read where the writer put them and re-added where they will be read from: the
        # same ensemble, unless some of its nodes are unreachable and get replaced first.
        target = metadata
        if unreachable:
            target, version = await self._change_ensemble(metadata, version, unreachable, lac, length)
            if target.state == "CLOSED":
                return target, version
        last = lac
        # Entries after lac are read a window ahead (each on its own) and taken in order.
        reads: deque[asyncio.Task[bytes | None]] = deque()
        try:
            while True:
                while len(reads) < _READ_AHEAD:
                    reads.append(asyncio.ensure_future(self._read_for_recovery(metadata, last + 1 + len(reads))))
                data = await reads.popleft()
                if data is None:
                    break
                last += 1
                length += len(data)
                if exact >= 0:
                    exact += len(data)
                elif last in anchors:
                    exact = anchors[last]
                await self._replicate(target, last, data, lac, exact)
            while self._replicating:
                await self._settle_oldest(target)
        finally:
            for task in reads:
                task.cancel()
            await asyncio.gather(*reads, return_exceptions=True)  # reads past the end may have failed
            for _, sends in self._replicating:
                for _, future in sends:
                    future.cancel()
        if exact >= 0:
            length = exact
        log.info("ledger %d recovered: last entry %d (the nodes reported %d confirmed), %d bytes (%s)",
                 self.ledger_id, last, lac, length, "exact" if exact >= 0 else "a lower bound: no node knew it")
        return await self._close(target, version, last, length)

    async def _mark_in_recovery(self) -> tuple[LedgerMetadata, int]:
        for _ in range(_MARK_ATTEMPTS):
            metadata, found = await read_ledger_metadata(self._store, self.ledger_id)
            if metadata.state != "OPEN":
                # CLOSED: done already. IN_RECOVERY: another recoverer is at it (or died at it);
                # recovering again is safe, and whichever closes first wins.
                return metadata, found.version
            metadata.state = "IN_RECOVERY"
            try:
                version = await self._store.put(ledger_key(self.ledger_id), metadata.to_bytes(),
                                                expected_version=found.version)
            except errors.BadVersionError:
                continue
            return metadata, version
        raise errors.BadVersionError(f"ledger {self.ledger_id} kept changing while it was being marked for "
                                     "recovery; retry")

    async def _fence(self, metadata: LedgerMetadata) -> tuple[int, set[str], dict[int, int]]:
        """Fence the last ensemble; the highest LAC its fenced nodes report, the nodes not fenced, and
        the lengths they know: their last entry id -> the writer's length of the ledger up to it."""
        ensemble = metadata.ensemble
        results = await asyncio.gather(*(self._fence_one(address) for address in ensemble), return_exceptions=True)
        answers = [r for r in results if isinstance(r, storage_pb2.LacResponse)]
        lacs = [int(r.last_add_confirmed) for r in answers]
        anchors = {int(r.last_entry_id): int(r.length) for r in answers if r.HasField("length") and r.length >= 0}
        unreachable = {a for a, r in zip(ensemble, results, strict=True) if not isinstance(r, storage_pb2.LacResponse)}
        needed = len(ensemble) - metadata.ack_quorum + 1
        if len(lacs) < needed:
            failures = "; ".join(f"{a}: {r}" for a, r in zip(ensemble, results, strict=True)
                                 if not isinstance(r, storage_pb2.LacResponse))
            raise errors.ServiceNotReadyError(
                f"cannot recover ledger {self.ledger_id}: it is fenced on {len(lacs)} of the {len(ensemble)} storage "
                f"nodes of its ensemble and {needed} are needed so that no ack quorum can form without them "
                f"({failures}); retry once they answer")
        # Entries before the last ensemble were all acknowledged before it was recorded.
        return max([*lacs, metadata.ensemble_start - 1]), unreachable, anchors

    async def _change_ensemble(self, metadata: LedgerMetadata, version: int, unreachable: set[str], lac: int,
                               length: int) -> tuple[LedgerMetadata, int]:
        """Replace (or drop, as the writer does) the unreachable nodes from the first entry after lac,
        so that the recovered entries get Qw copies where readers will look."""
        new = self._pool.new_ensemble(metadata.ensemble, unreachable)
        if len(new) < metadata.write_quorum:
            await self._pool.probe_quarantined()  # restarted nodes become spares again
            new = self._pool.new_ensemble(metadata.ensemble, unreachable)
        if len(new) < metadata.write_quorum:
            raise errors.ServiceNotReadyError(
                f"cannot recover ledger {self.ledger_id}: {sorted(unreachable)} do not answer and only {len(new)} "
                f"storage nodes are left for its ensemble ({self._pool.describe_health()}); it needs "
                f"Qw={metadata.write_quorum}; retry once nodes are back")
        updated = metadata.with_ensemble(lac + 1, new, length_before=length)
        try:
            version = await self._store.put(ledger_key(self.ledger_id), updated.to_bytes(), expected_version=version)
        except errors.BadVersionError:
            current, found = await read_ledger_metadata(self._store, self.ledger_id)
            if current.state == "CLOSED":
                return current, found.version
            raise errors.BadVersionError(
                f"ledger {self.ledger_id} changed while it was being recovered; retry") from None
        log.info("recovery of ledger %d: ensemble from entry %d is %s (was %s; %s do not answer)", self.ledger_id,
                 lac + 1, new, metadata.ensemble, sorted(unreachable))
        return updated, version

    async def _fence_one(self, address: str) -> storage_pb2.LacResponse:
        node = self._pool.node(address)
        try:
            await node.fence(self.ledger_id)
            return await node.last_add_confirmed(self.ledger_id)
        except errors.HeraldError as exc:
            if isinstance(exc, NODE_FAILURES):
                self._pool.quarantine(address, exc)
            log.warning("recovery of ledger %d: fencing on storage node %s failed: %s", self.ledger_id, address, exc)
            raise

    async def _read_for_recovery(self, metadata: LedgerMetadata, entry_id: int) -> bytes | None:
        """The entry from any replica, or None if too many replicas lack it for it to have been acknowledged."""
        write_set = metadata.write_set(entry_id)
        lacking = 0
        failures: list[tuple[str, errors.HeraldError]] = []
        for address in self._pool.read_order(write_set):
            try:
                got = await self._pool.node(address).read(self.ledger_id, entry_id, entry_id)
            except errors.HeraldError as exc:
                failures.append((address, exc))
                if isinstance(exc, _NOT_HELD):
                    lacking += 1
                elif isinstance(exc, NODE_FAILURES):
                    self._pool.quarantine(address, exc)
                elif isinstance(exc, errors.ChecksumError):
                    log.error("storage node %s holds a corrupt copy of entry %d of ledger %d (%s)",
                              address, entry_id, self.ledger_id, exc)
                continue
            if got and got[0][0] == entry_id:
                return got[0][1]
            lacking += 1
        if lacking >= metadata.write_quorum - metadata.ack_quorum + 1:
            return None
        raise errors.ServiceNotReadyError(
            f"cannot recover ledger {self.ledger_id}: whether entry {entry_id} was acknowledged is unknown, "
            f"{lacking} of its {len(write_set)} replicas answered they lack it and "
            f"{metadata.write_quorum - metadata.ack_quorum + 1} must "
            f"({'; '.join(f'{a}: {e}' for a, e in failures)}); retry once they answer")

    async def _replicate(self, metadata: LedgerMetadata, entry_id: int, data: bytes, lac: int, length: int) -> None:
        """Re-add a recovered entry to its whole write set (recovery adds pass the fence), with the
        ledger's length up to it when known (-1: not)."""
        # Serialized once for the whole write set, as the writer's adds are.
        frame = AddFrame(self._pool.next_request_id(), self.ledger_id, entry_id, data, last_add_confirmed=lac,
                         recovery=True, length=length)
        sends = [(address, self._pool.node(address).add(frame)) for address in metadata.write_set(entry_id)]
        self._replicating.append((entry_id, sends))
        if len(self._replicating) > _MAX_REPLICATING:
            await self._settle_oldest(metadata)

    async def _settle_oldest(self, metadata: LedgerMetadata) -> None:
        entry_id, sends = self._replicating[0]
        await asyncio.gather(*(future for _, future in sends), return_exceptions=True)
        self._replicating.popleft()
        stored = 0
        problems: list[str] = []
        for address, future in sends:
            exc: BaseException | None = (errors.ConnectionError_("cancelled") if future.cancelled()
                                         else future.exception())
            if exc is None and future.result().HasField("error"):
                exc = error_from_proto(future.result().error)
            if exc is None:
                stored += 1
                continue
            problems.append(f"{address}: {exc}")
            if isinstance(exc, NODE_FAILURES):
                self._pool.quarantine(address, exc)
        if problems:
            log.warning("recovery of ledger %d: entry %d re-replicated to %d of %d nodes (%s)", self.ledger_id,
                        entry_id, stored, len(sends), "; ".join(problems))
        if stored < metadata.ack_quorum:
            raise errors.ServiceNotReadyError(
                f"cannot recover ledger {self.ledger_id}: entry {entry_id} reached only {stored} storage nodes "
                f"and needs Qa={metadata.ack_quorum} ({'; '.join(problems)}); retry once they answer")

    async def _close(self, metadata: LedgerMetadata, version: int, last: int,
                     length: int) -> tuple[LedgerMetadata, int]:
        metadata.state = "CLOSED"
        metadata.last_entry_id = last
        metadata.length = length
        try:
            version = await self._store.put(ledger_key(self.ledger_id), metadata.to_bytes(), expected_version=version)
        except errors.BadVersionError:
            current, found = await read_ledger_metadata(self._store, self.ledger_id)
            if current.state != "CLOSED":
                raise errors.BadVersionError(
                    f"ledger {self.ledger_id} changed while it was being recovered; retry") from None
            if current.last_entry_id != last:
                log.info("ledger %d was closed by another recoverer at entry %d (this one found %d)",
                         self.ledger_id, current.last_entry_id, last)
            return current, found.version
        return metadata, version
