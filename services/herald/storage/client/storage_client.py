"""The broker's side of storage (BookKeeper's client): creates, writes, reads, recovers and deletes
ledgers on storage nodes, knowing ensembles and quorums.

`StorageClient` places ledgers on healthy nodes and opens them; the handle (`ledger_handle`) writes
and reads, replacing a failed node by an ensemble change (or, with no spare node, shrinking the
ensemble to its live nodes while they are at least Qw: Herald's choice, so that a 3/2/2 ledger on
exactly three nodes keeps writing when one dies); `recovery` closes a ledger whose writer died;
`node_connection` holds the connections and the nodes' health; `replica_read` reads with failover.
The nodes are those registered in the metadata store (`node_registry`, followed by a watch: a node
started later is used without a restart, a draining one is left out of new ensembles), or the
static bootstrap list while none registered.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from herald.common import errors
from herald.common.transport.tls import PLAINTEXT, Dialer
from herald.metadata.store import MetadataStore
from herald.storage.client.ledger_handle import LedgerHandle
from herald.storage.client.ledger_metadata import (
    LEDGER_ID_COUNTER,
    LedgerMetadata,
    check_quorums,
    ledger_key,
    read_ledger_metadata,
)
from herald.storage.client.node_connection import NodeConnection, NodePool
from herald.storage.client.node_registry import NodeRegistry
from herald.storage.client.recovery import LedgerRecoveryOp

log = logging.getLogger(__name__)


class StorageClient:
    """Ledgers on the storage nodes at bootstrap_addresses, their metadata in store.

    add_timeout: an add (or fence) a node has not answered within this long counts as that node
    failing (a paused node keeps its connection open); read_timeout: the same for a read's next
    chunk (or a LAC query), which then goes to another replica; quarantine_seconds: a failed node is
    left out of new ensembles for this long; operation_timeout: deletes; add_batches_in_flight:
    messages of adds written to one node and not yet answered, at most (0: no limit); adds made
    meanwhile wait and leave together in the next message (one per group commit of the node).
    discover: follow the nodes registered in the store (storage.membership); the bootstrap list is
    used while none registered.
    """

    def __init__(
        self, store: MetadataStore, bootstrap_addresses: list[str] | None = None,
        operation_timeout: float = 30.0, *, add_timeout: float = 5.0, read_timeout: float = 5.0,
        quarantine_seconds: float = 30.0, dialer: Dialer = PLAINTEXT, add_batches_in_flight: int = 1,
        discover: bool = True,
    ) -> None:
        for name, value in (("operation_timeout", operation_timeout), ("add_timeout", add_timeout),
                            ("read_timeout", read_timeout)):
            if value <= 0:
                raise errors.InvalidArgumentError(f"storage client {name} {value} must be positive (seconds)")
        if add_batches_in_flight < 0:
            raise errors.InvalidArgumentError(
                f"storage client add_batches_in_flight {add_batches_in_flight} must be 0 (no limit) or more "
                "(messages of adds unanswered per storage node)")
        self.store = store
        self.pool = NodePool(list(bootstrap_addresses or []), add_timeout=add_timeout, read_timeout=read_timeout,
                             operation_timeout=operation_timeout, quarantine_seconds=quarantine_seconds,
                             dialer=dialer, add_batches_in_flight=add_batches_in_flight)
        self.operation_timeout = operation_timeout
        # Ledgers this client writes: moved off a node as soon as it is marked draining.
        self._writers: weakref.WeakSet[LedgerHandle] = weakref.WeakSet()
        self.registry = NodeRegistry(store, self._registered_nodes_changed) if discover else None

    @property
    def addresses(self) -> list[str]:
        return self.pool.addresses

    async def start(self) -> None:
        if self.registry is not None:
            await self.registry.start()
        if not self.addresses:
            raise errors.ServiceNotReadyError(
                "no storage nodes configured: start storage nodes with --metadata-url (they register) or "
                "give the broker --storage-nodes")

    def _registered_nodes_changed(self, registry: NodeRegistry) -> None:
        # Any registered node, even a draining one, means registration is in use: the static list
        # is only the fallback of clusters whose nodes do not register.
        self.pool.use_registered(registry.available() if registry.records else None)
        if not registry.records:
            return
        available = set(registry.available())
        for handle in list(self._writers):
            # Draining, or no longer registered (stopped, or dead past its registration ttl): an idle
            # writer would otherwise keep the entries of its current ensemble on a node that is gone.
            leaving = set(handle.metadata.ensemble) - available
            if leaving:
                handle.leave_nodes(leaving)

    async def close(self) -> None:
        if self.registry is not None:
            await self.registry.close()
        await self.pool.close()

    def node(self, address: str) -> NodeConnection:
        return self.pool.node(address)

    async def create_ledger(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int, properties: dict[str, str] | None = None
    ) -> LedgerHandle:
        """A new ledger OPEN for writing, on min(E, healthy nodes) nodes (never fewer than Qw).

        Raises ServiceNotReadyError (retryable) when fewer than Qw nodes are healthy."""
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        healthy = self.pool.healthy()
        if len(healthy) < write_quorum:
            await self.pool.probe_quarantined()
            healthy = self.pool.healthy()
        size = min(ensemble_size, len(healthy))
        if size < write_quorum:
            raise errors.ServiceNotReadyError(
                f"cannot create a ledger with E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}: it needs at "
                f"least {write_quorum} healthy storage nodes and {self.pool.describe_health()}; retry once nodes "
                "are back")
        if size < ensemble_size:
            log.info("creating a ledger on %d storage nodes instead of E=%d: %s", size, ensemble_size,
                     self.pool.describe_health())
        ledger_id = await self.store.allocate_id(LEDGER_ID_COUNTER)
        metadata = LedgerMetadata(
            ledger_id=ledger_id, ensembles=[(0, self.pool.choose_ensemble(size))],
            write_quorum=write_quorum, ack_quorum=ack_quorum, properties=dict(properties or {}),
        )
        version = await self.store.put(ledger_key(ledger_id), metadata.to_bytes(), expected_version=0)
        handle = LedgerHandle(self.pool, self.store, metadata, version, writable=True)
        self._writers.add(handle)
        return handle

    async def open_ledger(self, ledger_id: int, recover: bool = True) -> LedgerHandle:
        """A read handle. recover=True first closes the ledger if it is not (fencing its writer);
        recover=False reads an open ledger up to the LAC its nodes report."""
        if recover:
            metadata, version = await LedgerRecoveryOp(self.pool, self.store, ledger_id).run()
            return LedgerHandle(self.pool, self.store, metadata, version, writable=False)
        metadata, found = await read_ledger_metadata(self.store, ledger_id)
        if metadata.state != "CLOSED":
            metadata.last_entry_id = await self._last_add_confirmed(metadata)
        return LedgerHandle(self.pool, self.store, metadata, found.version, writable=False)

    async def _last_add_confirmed(self, metadata: LedgerMetadata) -> int:
        """The highest LAC the current ensemble's nodes report (entries before it are all confirmed)."""
        answers = await asyncio.gather(
            *(self.pool.node(address).last_add_confirmed(metadata.ledger_id) for address in metadata.ensemble),
            return_exceptions=True)
        lac = metadata.ensemble_start - 1
        for address, answer in zip(metadata.ensemble, answers, strict=True):
            if isinstance(answer, BaseException):
                log.warning("LAC of ledger %d from storage node %s: %s", metadata.ledger_id, address, answer)
            else:
                lac = max(lac, answer.last_add_confirmed)
        return lac

    async def delete_ledger(self, ledger_id: int) -> None:
        """Drop the ledger's entries on every node that ever held some, then its metadata."""
        metadata, _ = await read_ledger_metadata(self.store, ledger_id)
        for address in metadata.all_nodes():
            try:
                await self.pool.node(address).delete_ledger(ledger_id)
            except errors.HeraldError as exc:
                # Left-over entries cost disk, not correctness; the ledger id is never reused.
                log.warning("ledger %d: delete on storage node %s failed: %s", ledger_id, address, exc)
        await self.store.delete(ledger_key(ledger_id))
