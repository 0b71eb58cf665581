"""The auditor: which ledgers have entries on a lost storage node (draining, or unregistered for
longer than the grace period), and the daemon that elects one auditor and audits periodically."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field

from herald.autorecovery.replicate import FragmentReplicationOp
from herald.common.errors import HeraldError, InvalidArgumentError
from herald.common.tasks import cancel_and_wait, wait_event
from herald.metadata.store import NOT_EXISTS, MetadataStore
from herald.storage.client.ledger_metadata import LedgerMetadata
from herald.storage.client.storage_client import StorageClient

log = logging.getLogger(__name__)
AUDITOR_KEY = "/storage/autorecovery/auditor"
LEDGERS_PREFIX = "/ledgers/"


@dataclass
class AuditReport:
    """What one audit did: fragments re-replicated, and those it could not (with why)."""

    ledgers_checked: int = 0
    fragments_copied: int = 0
    entries_copied: int = 0
    bytes_copied: int = 0
    problems: list[str] = field(default_factory=list)


class Auditor:
    """Finds fragments on lost nodes and re-replicates them, CLOSED ledgers first."""

    def __init__(self, storage: StorageClient, grace_seconds: float) -> None:
        if storage.registry is None:
            raise InvalidArgumentError("the auditor needs a storage client that follows the registered nodes")
        self.storage = storage
        self.registry = storage.registry
        self.grace_seconds = grace_seconds
        self._missing_since: dict[str, float] = {}  # address -> when first seen unregistered

    def lost_nodes(self, referenced: set[str]) -> set[str]:
        """Of the nodes ledgers reference, those draining, or unregistered for longer than the grace."""
        records = self.registry.records
        if not records:
            return set()  # no node registers (a static cluster): nothing tells a gone node apart
        now = time.monotonic()
        lost = {address for address, record in records.items() if record.state == "draining"}
        for address in referenced:
            if address in records:
                self._missing_since.pop(address, None)
            elif now - self._missing_since.setdefault(address, now) >= self.grace_seconds:
                lost.add(address)
        return lost & referenced

    async def audit(self) -> AuditReport:
        report = AuditReport()
        found = await self.storage.store.list(LEDGERS_PREFIX)
        ledgers = [LedgerMetadata.from_bytes(item.value) for item in found.values()]
        report.ledgers_checked = len(ledgers)
        referenced = {node for metadata in ledgers for node in metadata.all_nodes()}
        lost = self.lost_nodes(referenced)
        if not lost:
            return report
        ledgers.sort(key=lambda metadata: metadata.state != "CLOSED")  # closed ledgers first
        for metadata in ledgers:
            for op in self._plan(metadata, lost, report):
                try:
                    await op.run()
                except HeraldError as exc:
                    report.problems.append(f"ledger {metadata.ledger_id} entries {op.first}..{op.last} "
                                           f"on {op.lost}: {exc}")
                    log.warning("autorecovery: %s", report.problems[-1])
                    continue
                report.fragments_copied += 1
                report.entries_copied += op.copied_entries
                report.bytes_copied += op.copied_bytes
                metadata = op.metadata  # the next fragment's CAS starts from this version
        return report

    def _plan(self, metadata: LedgerMetadata, lost: set[str], report: AuditReport) -> list[FragmentReplicationOp]:
        ops: list[FragmentReplicationOp] = []
        ensembles = metadata.ensembles
        for index, (first, nodes) in enumerate(ensembles):
            current = index == len(ensembles) - 1
            if current and metadata.state != "CLOSED":
                continue  # the open ledger's current ensemble: its writer's business
            last = metadata.last_entry_id if current else ensembles[index + 1][0] - 1
            taken = set(nodes)
            for address in [node for node in nodes if node in lost]:
                spares = [a for a in self.registry.available() if a not in taken and a not in lost]
                if not spares:
                    report.problems.append(
                        f"ledger {metadata.ledger_id} entries {first}..{last} on {address}: no available storage "
                        "node outside its ensemble to copy them to; add a node")
                    continue
                target = random.choice(spares)
                taken.add(target)
                ops.append(FragmentReplicationOp(self.storage.pool, self.storage.store, metadata, first, last,
                                                 address, target))
        return ops


class AutoRecovery:
    """The daemon in a storage process: elected auditor by an ephemeral key on a lease, it audits
    every `interval` seconds; the others stand by and take over when the lease expires."""

    def __init__(self, storage: StorageClient, *, interval: float, grace_seconds: float, lease_ttl: float,
                 name: str) -> None:
        self.storage = storage
        self.auditor = Auditor(storage, grace_seconds)
        self.interval = interval
        self.lease_ttl = lease_ttl
        self.name = name
        self.lease_id = 0
        self.last_report: AuditReport | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def store(self) -> MetadataStore:
        return self.storage.store

    async def start(self) -> None:
        await self.storage.start()
        self._stop.clear()
        self._tasks = [asyncio.create_task(self._elect_forever(), name="autorecovery-election"),
                       asyncio.create_task(self._audit_forever(), name="autorecovery-audit")]

    async def stop(self) -> None:
        """Stop auditing and give up the election. Idempotent."""
        self._stop.set()
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks = []
        if self.lease_id:
            lease_id, self.lease_id = self.lease_id, 0
            try:
                await self.store.revoke_lease(lease_id)
            except HeraldError as exc:
                log.warning("autorecovery: giving up the auditor lease failed: %s", exc)
        await self.storage.close()

    async def _elect_forever(self) -> None:
        while True:
            try:
                await self._elect()
            except HeraldError as exc:
                log.warning("autorecovery: auditor election failed (retrying): %s", exc)
            if await wait_event(self._stop, self.lease_ttl / 3):
                return

    async def _elect(self) -> None:
        if self.lease_id and await self.store.keepalive(self.lease_id):
            return
        self.lease_id = 0
        lease_id = await self.store.grant_lease(self.lease_ttl)
        try:
            await self.store.put(AUDITOR_KEY, self.name.encode(), expected_version=NOT_EXISTS, lease_id=lease_id)
        except HeraldError:
            await self.store.revoke_lease(lease_id)
            return  # another process audits
        self.lease_id = lease_id
        log.info("autorecovery: %s is the auditor", self.name)

    async def _audit_forever(self) -> None:
        while not await wait_event(self._stop, self.interval):
            if not self.lease_id:
                continue
            try:
                self.last_report = await self.auditor.audit()
            except HeraldError as exc:
                log.warning("autorecovery: audit failed (retrying in %.0f s): %s", self.interval, exc)
