"""A ledger open for writing by its one writer, or for reading (BookKeeper's LedgerHandle).

An add (PendingAdd) is serialized once (storage.client.add_frame), goes as that one buffer to every
node of its write set, and completes once Qa nodes of that write set have acknowledged it, always
in entry order: adds never leave a gap. The handle's queue of PendingAdds is the one completion
point of adds: each completes through its callback (add_entry_nowait), with no task per add.

When a node fails for adds (its stream breaks, it refuses connections, an add is not answered
within add_timeout, or it answers with any error but FENCED) the writer changes the ensemble, as
BookKeeper does: while it changes, no add completes and no add is sent; each failed node is
replaced by a healthy node outside the ensemble; the new ensemble is recorded by compare-and-set
on /ledgers/<id> from the first entry not yet acknowledged (LAC + 1); then every waiting add is sent
to the nodes of its new write set that do not have it yet, and only acks from its new write set
count. A lost compare-and-set means the ledger was fenced for recovery by another broker:
every waiting add fails with FencedError; unless only a fragment before the current ensemble
changed (autorecovery re-replicated it): that is merged in and the compare-and-set retried. A node
marked draining is left the same way as a failed one (`leave_nodes`), without its quarantine.

Shrinking (Herald's choice; BookKeeper would fail the adds): when no spare node exists, a failed
node is dropped instead of replaced, and the ensemble carries on with its live nodes as long as
they are at least Qw. A 3/2/2 ledger on exactly three nodes keeps writing (on two) when one dies.
Below Qw, quarantined nodes that answer a probe again (restarted) become spares; failing that, the
waiting adds fail with PersistenceError and the managed ledger rolls over to a new ledger. A
shrunk ledger keeps Qw copies of every entry, only spread over fewer nodes.

A FENCED answer from any node fails every waiting add with FencedError at once: a newer writer
took the ledger over, and changing the ensemble would not help.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable

from opentelemetry import trace

from herald.api.v1 import storage_pb2
from herald.common import errors, tracing
from herald.common.transport.rpc import error_from_proto
from herald.metadata.store import MetadataStore
from herald.storage.client import replica_read
from herald.storage.client.add_frame import AddFrame
from herald.storage.client.ledger_metadata import LedgerMetadata, ledger_key, read_ledger_metadata
from herald.storage.client.node_connection import NODE_FAILURES, NodePool

log = logging.getLogger(__name__)


AddCallback = Callable[[int, errors.HeraldError | None], None]
"""Called once per add, on the event loop, in entry order and never from within the call that
queued it: (entry id, None) once Qa nodes hold the entry, or (-1, error) if it failed (and then
every later add fails too: entries never leave a gap)."""


class PendingAdd:
    """An add waiting for its ack quorum (BookKeeper's PendingAddOp): serialized once (its frame)
    for every node of its write set, completed through its callback in entry order."""

    __slots__ = ("acked", "callback", "data", "entry_id", "frame", "length", "sent", "span", "write_set")

    def __init__(self, entry_id: int, data: bytes, callback: AddCallback, length: int = -1) -> None:
        self.entry_id = entry_id
        self.data = data
        self.length = length  # the ledger's length with this entry, piggybacked with it
        self.callback = callback
        self.frame: AddFrame | None = None  # built on its first send, then sent to every node as it is
        self.span: tracing.Span | None = None  # its CLIENT span when added within a trace
        self.write_set: list[str] = []  # empty until sent (an add made during an ensemble change waits)
        self.sent: set[str] = set()  # nodes that hold it or have it on the way
        self.acked: set[str] = set()  # nodes of write_set that acknowledged it

    def finish(self, entry_id: int, error: errors.HeraldError | None) -> None:
        if self.span is not None:
            tracing.end(self.span, error)
        try:
            self.callback(entry_id, error)
        except Exception:  # the caller's bug must not stop the adds after this one completing
            log.exception("the completion callback of entry %d failed", self.entry_id)


def _settle(future: asyncio.Future[int], entry_id: int, error: errors.HeraldError | None) -> None:
    if future.done():  # its waiter was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(entry_id)


class LedgerHandle:
    """A ledger open for writing (by its one writer) or for reading."""

    def __init__(self, pool: NodePool, store: MetadataStore, metadata: LedgerMetadata, version: int,
                 writable: bool) -> None:
        self._pool = pool
        self._store = store
        self.metadata = metadata
        self._version = version
        self.writable = writable
        self.ledger_id = metadata.ledger_id
        self.last_add_confirmed = metadata.last_entry_id
        self._last_add_pushed = metadata.last_entry_id
        self._length = metadata.length
        self._length_pushed = metadata.length  # with every add queued: piggybacked on each
        self._pending: deque[PendingAdd] = deque()
        self._failure: errors.HeraldError | None = None
        self._failed_nodes: set[str] = set()  # nodes that failed this writer: never chosen again
        self._changing: asyncio.Task[None] | None = None  # the ensemble change under way
        self._drained: asyncio.Future[None] | None = None  # close() waits for the adds under way

    @property
    def closed(self) -> bool:
        return self.metadata.state == "CLOSED"

    @property
    def length(self) -> int:
        """Bytes of the entries up to last_add_confirmed."""
        return self._length

    # ---- adds -----------------------------------------------------------------------------------

    async def add_entry(self, data: bytes) -> int:
        """Append an entry; returns its id once Qa nodes hold it. Callers may add concurrently:
        ids are given in call order and completions come in that order."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.add_entry_nowait(data, functools.partial(_settle, future))
        return await future

    def add_entry_nowait(self, data: bytes, callback: AddCallback) -> None:
        """Queue an add without waiting: ids are given in call order, and callback runs once per add,
        in that order (the one completion point of adds: no task per add). Raises at once, queueing
        nothing, if the ledger takes no more adds."""
        if not self.writable or self.closed:
            raise errors.PersistenceError(f"ledger {self.ledger_id} is not open for writing")
        if self._failure is not None:
            raise self._failure
        if self._pool.closed:
            raise errors.PersistenceError(f"ledger {self.ledger_id}: the storage client is closed")
        self._last_add_pushed += 1
        self._length_pushed += len(data)
        op = PendingAdd(self._last_add_pushed, data, callback, self._length_pushed)
        if tracing.ENABLED and tracing.current_span_context() is not None:
            op.span = self._start_span(op)
        self._pending.append(op)
        if self._changing is None:
            op.write_set = self.metadata.write_set(op.entry_id)
            if op.span is not None:
                op.span.set_attribute("herald.write_set", list(op.write_set))
            for address in op.write_set:
                self._send(op, address)

    def _start_span(self, op: PendingAdd) -> tracing.Span:
        """The CLIENT span of an add made within a trace (a broker's publish span), child of it,
        until Qa nodes acknowledged; the nodes' add spans are its children."""
        metadata = self.metadata
        return tracing.tracer("herald.storage").start_span(
            "storage add", kind=trace.SpanKind.CLIENT, attributes={
                "herald.ledger_id": self.ledger_id, "herald.entry_id": op.entry_id, "herald.entry_size": len(op.data),
                "herald.write_quorum": metadata.write_quorum, "herald.ack_quorum": metadata.ack_quorum,
            })

    def _send(self, op: PendingAdd, address: str) -> None:
        if address in self._failed_nodes or self._pool.is_quarantined(address):
            # Known bad: replace it now rather than wait for it to fail (or time out) again.
            self._node_failed(address, errors.ConnectionError_(f"storage node {address} is quarantined"),
                              quarantine=False)
            return
        op.sent.add(address)
        frame = op.frame
        if frame is None:
            # Serialized once, with the LAC of its first send (a lower bound is all a node needs).
            frame = op.frame = AddFrame(
                self._pool.next_request_id(), self.ledger_id, op.entry_id, op.data,
                last_add_confirmed=self.last_add_confirmed, length=op.length,
                traceparent=tracing.traceparent(op.span) if op.span is not None else "")
        self._pool.node(address).add(frame).add_done_callback(functools.partial(self._on_response, op, address))

    def _on_response(self, op: PendingAdd, address: str, done: asyncio.Future[storage_pb2.AddResponse]) -> None:
        error: errors.HeraldError | None
        if done.cancelled():
            error = errors.ConnectionError_(f"add to storage node {address} was cancelled")
        elif (exc := done.exception()) is not None:
            error = exc if isinstance(exc, errors.HeraldError) else errors.ConnectionError_(repr(exc))
        else:
            response = done.result()
            error = error_from_proto(response.error) if response.HasField("error") else None
        if error is None:
            if address in op.write_set:
                op.acked.add(address)
                self._complete_in_order()
            return
        op.sent.discard(address)
        if self._pool.closed:
            self._fail_all(errors.PersistenceError(f"ledger {self.ledger_id}: the storage client is closed"))
        elif isinstance(error, errors.FencedError):
            self._fail_all(errors.FencedError(
                f"ledger {self.ledger_id} was fenced by another writer (storage node {address}): this "
                "writer must stop"))
        elif self._failure is None:
            self._node_failed(address, error, quarantine=isinstance(error, NODE_FAILURES))

    def _complete_in_order(self) -> None:
        if self._changing is not None:
            return  # the ensemble change decides where the waiting adds live first
        pending = self._pending
        ack_quorum = self.metadata.ack_quorum
        while pending and len(pending[0].acked) >= ack_quorum:
            op = pending.popleft()
            self.last_add_confirmed = op.entry_id
            self._length += len(op.data)
            op.finish(op.entry_id, None)
        self._check_drained()

    def _fail_all(self, error: errors.HeraldError) -> None:
        """Fail every waiting add and every later one: entries must stay gap-free."""
        if self._failure is None:
            self._failure = error
            log.warning("ledger %d: writes fail from entry %d on: %s", self.ledger_id, self.last_add_confirmed + 1,
                        error)
        while self._pending:
            self._pending.popleft().finish(-1, self._failure)
        self._check_drained()

    def _check_drained(self) -> None:
        if self._drained is not None and not self._pending and self._changing is None and not self._drained.done():
            self._drained.set_result(None)

    # ---- ensemble changes -------------------------------------------------------------------------

    def _node_failed(self, address: str, error: errors.HeraldError, *, quarantine: bool) -> None:
        if quarantine:
            self._pool.quarantine(address, error)
        if address in self._failed_nodes:
            return
        self._failed_nodes.add(address)
        if address not in self.metadata.ensemble:
            return
        log.warning("ledger %d: storage node %s failed for adds (%s): changing the ensemble", self.ledger_id,
                    address, error)
        if self._changing is None:
            self._changing = asyncio.get_running_loop().create_task(
                self._change_ensemble(), name=f"ledger-{self.ledger_id}-ensemble-change")

    async def _change_ensemble(self) -> None:
        try:
            while self._failure is None:
                old = self.metadata.ensemble
                if not self._failed_nodes.intersection(old):
                    break
                new = self._pool.new_ensemble(old, self._failed_nodes)
                if len(new) < self.metadata.write_quorum:
                    # Before giving up: quarantined nodes that answer again (restarted) are spares.
                    released = await self._pool.probe_quarantined()
                    self._failed_nodes -= released - set(old)
                    new = self._pool.new_ensemble(old, self._failed_nodes)
                if len(new) < self.metadata.write_quorum:
                    self._fail_all(errors.PersistenceError(
                        f"ledger {self.ledger_id}: only {len(new)} live storage nodes are left for its ensemble "
                        f"{old} and no spare one ({self._pool.describe_health()}); it needs "
                        f"Qw={self.metadata.write_quorum}: write to a new ledger"))
                    return
                start = self.last_add_confirmed + 1  # completions wait, so this stays put
                updated = self.metadata.with_ensemble(start, new, length_before=self._length)
                if not await self._record(updated):
                    return
                log.info("ledger %d: ensemble from entry %d is %s (was %s)", self.ledger_id, start, new, old)
                for op in self._pending:
                    self._resend(op)
        except Exception as exc:  # never leave adds waiting on a task that died
            log.exception("ledger %d: ensemble change failed", self.ledger_id)
            self._fail_all(errors.PersistenceError(f"ledger {self.ledger_id}: ensemble change failed: {exc!r}"))
        finally:
            self._changing = None
            if self._failure is None:
                self._complete_in_order()
            self._check_drained()

    async def _record(self, updated: LedgerMetadata) -> bool:
        """Compare-and-set the new metadata; False (with every add failed) if that was refused."""
        try:
            version = await self._put(updated)
        except errors.BadVersionError:
            state: str
            try:
                current, _ = await read_ledger_metadata(self._store, self.ledger_id)
                state = current.state
            except errors.HeraldError as exc:
                state = f"unreadable ({exc})"
            if state != "OPEN":
                self._fail_all(errors.FencedError(
                    f"ledger {self.ledger_id} is {state}: another broker fenced it to recover it, so this "
                    "writer must stop"))
            else:
                self._fail_all(errors.PersistenceError(
                    f"ledger {self.ledger_id}: its metadata changed under its writer; write to a new ledger"))
            return False
        except errors.HeraldError as exc:
            self._fail_all(errors.PersistenceError(
                f"ledger {self.ledger_id}: could not record its new ensemble ({exc}); write to a new ledger"))
            return False
        self.metadata, self._version = updated, version
        return self._failure is None

    async def _put(self, updated: LedgerMetadata) -> int:
        """Compare-and-set the writer's metadata. Autorecovery (herald.autorecovery) may have
        re-replicated a fragment before the current ensemble meanwhile: that change is merged in
        and the put retried; any other change raises BadVersionError."""
        while True:
            try:
                return await self._store.put(ledger_key(self.ledger_id), updated.to_bytes(),
                                             expected_version=self._version)
            except errors.BadVersionError:
                current, found = await read_ledger_metadata(self._store, self.ledger_id)
                mine = self.metadata
                if current.state != "OPEN" or current.ensembles[-1] != mine.ensembles[-1] or \
                        found.version == self._version:
                    raise
                start = mine.ensemble_start
                before = [(first, list(nodes)) for first, nodes in current.ensembles if first < start]
                updated.ensembles = before + [item for item in updated.ensembles if item[0] >= start]
                mine.ensembles = before + [item for item in mine.ensembles if item[0] >= start]
                self._version = found.version

    def leave_nodes(self, addresses: set[str]) -> None:
        """Move the current ensemble off these nodes (being drained) by an ensemble change, as for
        failed nodes but without quarantining them; their earlier fragments are autorecovery's."""
        if not self.writable or self.closed or self._failure is not None:
            return
        ensemble = self.metadata.ensemble
        spares = [a for a in self._pool.healthy() if a not in ensemble and a not in addresses]
        # Only as many as can be replaced: a drain must not shrink the ensemble or fail the adds
        # (the rest stay until a node is added; autorecovery cannot finish the drain till then).
        leaving = sorted(addresses.intersection(ensemble))[:len(spares)]
        for address in leaving:
            self._node_failed(address, errors.ServiceNotReadyError(f"storage node {address} is draining"),
                              quarantine=False)

    def _resend(self, op: PendingAdd) -> None:
        """Send op to the nodes of its write set (in the new ensemble) that do not have it."""
        write_set = self.metadata.write_set(op.entry_id)
        op.write_set = write_set
        op.acked.intersection_update(write_set)
        for address in write_set:
            if address not in op.sent:
                self._send(op, address)

    # ---- reads and close --------------------------------------------------------------------------

    async def read_entries(self, first: int, last: int) -> list[tuple[int, bytes]]:
        """Entries first..last (inclusive), from any replica holding them, failing over on error."""
        if first < 0 or last < first:
            raise errors.InvalidArgumentError(f"bad entry range {first}..{last} of ledger {self.ledger_id}")
        if last > self.last_add_confirmed:
            raise errors.EntryNotFoundError(
                f"entry {last} of ledger {self.ledger_id} is beyond its last confirmed entry "
                f"{self.last_add_confirmed}"
            )
        return await replica_read.read_entries(self._pool, self.metadata, first, last)

    async def close(self) -> None:
        """Wait for the adds under way, then record the ledger CLOSED at its last confirmed entry (by CAS).

        Raises FencedError if another broker took the ledger over meanwhile."""
        if self.closed or not self.writable:
            return
        while self._pending or self._changing is not None:
            if self._drained is None or self._drained.done():
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)  # shared by concurrent closes
        closed = LedgerMetadata.from_bytes(self.metadata.to_bytes())
        closed.state = "CLOSED"
        closed.last_entry_id = self.last_add_confirmed
        closed.length = self._length
        try:
            self._version = await self._put(closed)
        except errors.BadVersionError:
            current, _ = await read_ledger_metadata(self._store, self.ledger_id)
            if current.state != "OPEN":
                raise errors.FencedError(
                    f"ledger {self.ledger_id} is {current.state}: another broker took it over") from None
            raise
        self.metadata = closed
