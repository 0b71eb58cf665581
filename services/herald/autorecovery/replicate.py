"""Re-replicating one fragment of a ledger: the entries that one ensemble of its history placed on a
lost node (draining or gone) copied to a node outside that ensemble, verified, then recorded."""

from __future__ import annotations

import asyncio
import logging
import zlib

from herald.common import errors
from herald.common.transport.rpc import error_from_proto
from herald.metadata.store import MetadataStore
from herald.storage.client import replica_read
from herald.storage.client.add_frame import AddFrame
from herald.storage.client.ledger_metadata import LedgerMetadata, ledger_key, read_ledger_metadata
from herald.storage.client.node_connection import NodePool

log = logging.getLogger(__name__)
# Entries read, copied and verified together: bounds the bytes held at once to this many entries.
CHUNK_ENTRIES = 64


class FragmentReplicationOp:
    """Copies the entries first..last whose write set holds `lost` to `target`, then replaces `lost`
    by `target` in the ensemble starting at `first` (compare-and-set; a lost race re-reads)."""

    def __init__(self, pool: NodePool, store: MetadataStore, metadata: LedgerMetadata, first: int, last: int,
                 lost: str, target: str) -> None:
        self._pool = pool
        self._store = store
        self.metadata = metadata
        self.first = first
        self.last = last
        self.lost = lost
        self.target = target
        self.copied_entries = 0
        self.copied_bytes = 0

    async def run(self) -> None:
        metadata = self.metadata
        needed = [e for e in range(self.first, self.last + 1) if self.lost in metadata.write_set(e)]
        for start in range(0, len(needed), CHUNK_ENTRIES):
            chunk = needed[start:start + CHUNK_ENTRIES]
            await self._copy(chunk[0], chunk[-1], set(chunk))
        await self._record()
        log.info("ledger %d: entries %d..%d re-replicated from %s to %s (%d entries, %d bytes)",
                 metadata.ledger_id, self.first, self.last, self.lost, self.target, self.copied_entries,
                 self.copied_bytes)

    async def _copy(self, first: int, last: int, wanted: set[int]) -> None:
        ledger_id = self.metadata.ledger_id
        entries = [(e, data) for e, data in await replica_read.read_entries(self._pool, self.metadata, first, last)
                   if e in wanted]
        target = self._pool.node(self.target)
        sends = [target.add(AddFrame(self._pool.next_request_id(), ledger_id, entry_id, data,
                                     last_add_confirmed=self.last, recovery=True))
                 for entry_id, data in entries]
        for entry_id, response in zip([e for e, _ in entries], await asyncio.gather(*sends), strict=True):
            if response.HasField("error"):
                raise errors.PersistenceError(
                    f"re-replicating entry {entry_id} of ledger {ledger_id} to storage node {self.target} "
                    f"failed: {error_from_proto(response.error)}")
        # Verify: the target gives back exactly the bytes read from the surviving replica.
        expected = {entry_id: zlib.crc32(data) for entry_id, data in entries}
        copies: dict[int, int] = {}
        for entry_id in sorted(expected):
            if entry_id in copies:
                continue
            run_last = entry_id
            while run_last + 1 in expected:
                run_last += 1
            for got_id, data in await target.read(ledger_id, entry_id, run_last):
                copies[got_id] = zlib.crc32(data)
        bad = [entry_id for entry_id, crc in expected.items() if copies.get(entry_id) != crc]
        if bad:
            raise errors.ChecksumError(
                f"re-replicated entries {bad[:5]} of ledger {ledger_id} read back from storage node "
                f"{self.target} differ from their source: the copy is not recorded; the next audit retries")
        self.copied_entries += len(entries)
        self.copied_bytes += sum(len(data) for _, data in entries)

    async def _record(self) -> None:
        """Replace lost by target in the ensemble that starts at first, by compare-and-set."""
        ledger_id = self.metadata.ledger_id
        while True:
            current, found = await read_ledger_metadata(self._store, ledger_id)
            at = next((i for i, (first, nodes) in enumerate(current.ensembles)
                       if first == self.first and self.lost in nodes), None)
            if at is None or (current.state != "CLOSED" and at == len(current.ensembles) - 1):
                # Replaced meanwhile (another auditor), or now the open ledger's current ensemble
                # (its writer's business): the copies are harmless, the next audit looks again.
                return
            first, nodes = current.ensembles[at]
            current.ensembles[at] = (first, [self.target if node == self.lost else node for node in nodes])
            try:
                await self._store.put(ledger_key(ledger_id), current.to_bytes(), expected_version=found.version)
            except errors.BadVersionError:
                continue
            self.metadata = current
            return
