"""The broker's side of storage (BookKeeper's client): creates, writes, reads, recovers and deletes
ledgers on storage nodes, knowing ensembles and quorums.

An add goes to the entry's Qw nodes in parallel and completes once Qa have acknowledged it, always
in entry order. Opening a ledger with recovery fences it on its nodes, finds the last entry that may
have been acknowledged, re-replicates it and closes the ledger by compare-and-set.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
from collections import deque

import grpc
import grpc.aio

from herald.api.v1 import storage_pb2, storage_pb2_grpc
from herald.common import errors
from herald.common.rpc import channel_options, error_from_rpc
from herald.metadata.store import MetadataStore
from herald.storage.ledger_metadata import (
    LEDGER_ID_COUNTER,
    LedgerMetadata,
    check_quorums,
    ledger_key,
    read_ledger_metadata,
)

log = logging.getLogger(__name__)


class NodeConnection:
    """One storage node: a channel, and a pipelined AddEntryBatches stream opened on first use."""

    def __init__(self, address: str, timeout: float) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = grpc.aio.insecure_channel(address, options=channel_options())
        self.stub = storage_pb2_grpc.StorageServiceStub(self._channel)
        self._outbox: list[storage_pb2.AddRequest] = []
        self._wake: asyncio.Event | None = None
        self._stream: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[storage_pb2.AddResponse]] = {}
        self._request_ids = itertools.count(1)

    def add(self, request: storage_pb2.AddRequest) -> asyncio.Future[storage_pb2.AddResponse]:
        """Queue an add on the stream; the future completes with the node's response."""
        if self._stream is None or self._stream.done():
            self._wake = asyncio.Event()
            self._stream = asyncio.get_running_loop().create_task(self._run_stream(self._wake))
        assert self._wake is not None
        request.request_id = next(self._request_ids)
        future: asyncio.Future[storage_pb2.AddResponse] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = future
        self._outbox.append(request)
        self._wake.set()
        return future

    async def _run_stream(self, wake: asyncio.Event) -> None:
        call = self.stub.AddEntryBatches()  # type: ignore[call-arg]  # written with call.write()
        reader = asyncio.create_task(self._read_responses(call))
        reader.add_done_callback(lambda _: wake.set())  # a failed stream wakes the writer to end
        failure: errors.HeraldError = errors.ConnectionError_(f"storage node {self.address}: stream closed")
        try:
            while not reader.done():
                await wake.wait()
                wake.clear()
                # Everything queued while the previous message was being written goes out as one
                # message: a gRPC stream moves a few thousand messages a second, not tens of thousands.
                batch, self._outbox = self._outbox, []
                if batch:
                    await call.write(storage_pb2.AddBatchRequest(adds=batch))
            await reader
        except grpc.aio.AioRpcError as exc:
            failure = error_from_rpc(exc, f"add to storage node {self.address}")
        finally:
            reader.cancel()
            call.cancel()
            # Every add still waiting on this stream failed with it; the next add opens a new stream.
            self._outbox = []
            waiting, self._waiting = self._waiting, {}
            for future in waiting.values():
                if not future.done():
                    future.set_exception(failure)

    async def _read_responses(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        async for batch in call:
            for response in batch.responses:
                future = self._waiting.pop(response.request_id, None)
                if future is not None and not future.done():
                    future.set_result(response)

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stream
        await self._channel.close(None)


class PendingAdd:
    """An add waiting for its ack quorum (BookKeeper's PendingAddOp)."""

    __slots__ = ("acks", "data", "entry_id", "error", "future")

    def __init__(self, entry_id: int, data: bytes, future: asyncio.Future[int]) -> None:
        self.entry_id = entry_id
        self.data = data
        self.future = future
        self.acks = 0
        self.error: errors.HeraldError | None = None


class LedgerHandle:
    """A ledger open for writing (by its one writer) or for reading."""

    def __init__(self, client: StorageClient, metadata: LedgerMetadata, version: int, writable: bool) -> None:
        self._client = client
        self.metadata = metadata
        self._version = version
        self.writable = writable
        self.ledger_id = metadata.ledger_id
        self.last_add_confirmed = metadata.last_entry_id
        self._last_add_pushed = metadata.last_entry_id
        self._length = metadata.length
        self._pending: deque[PendingAdd] = deque()
        self._failure: errors.HeraldError | None = None

    @property
    def closed(self) -> bool:
        return self.metadata.state == "CLOSED"

    @property
    def length(self) -> int:
        return self._length

    async def add_entry(self, data: bytes) -> int:
        """Append an entry; returns its id once Qa nodes hold it. Callers may add concurrently:
        ids are given in call order and completions come in that order."""
        if not self.writable or self.closed:
            raise errors.PersistenceError(f"ledger {self.ledger_id} is not open for writing")
        if self._failure is not None:
            raise self._failure
        self._last_add_pushed += 1
        entry_id = self._last_add_pushed
        op = PendingAdd(entry_id, data, asyncio.get_running_loop().create_future())
        self._pending.append(op)
        for address in self.metadata.write_set(entry_id):
            request = storage_pb2.AddRequest(
                ledger_id=self.ledger_id, entry_id=entry_id, data=data,
                last_add_confirmed=self.last_add_confirmed,
            )
            self._client.node(address).add(request).add_done_callback(functools.partial(self._on_node_response, op))
        return await op.future

    def _on_node_response(self, op: PendingAdd, done: asyncio.Future[storage_pb2.AddResponse]) -> None:
        error: errors.HeraldError | None
        if done.cancelled():
            error = errors.PersistenceError(f"add of entry {op.entry_id} was cancelled")
        elif done.exception() is not None:
            exc = done.exception()
            error = exc if isinstance(exc, errors.HeraldError) else errors.PersistenceError(str(exc))
        else:
            response = done.result()
            error = errors.from_proto(response.error) if response.HasField("error") else None
        if error is None:
            op.acks += 1
        elif op.error is None or isinstance(error, errors.FencedError):
            op.error = error
        self._complete_in_order()

    def _complete_in_order(self) -> None:
        pending = self._pending
        while pending:
            op = pending[0]
            if op.acks >= self.metadata.ack_quorum:
                pending.popleft()
                self.last_add_confirmed = op.entry_id
                self._length += len(op.data)
                if not op.future.done():
                    op.future.set_result(op.entry_id)
            elif op.error is not None:
                # A failed add fails every later one too: entries must stay gap-free.
                self._fail_all(op.error)
                return
            else:
                return

    def _fail_all(self, error: errors.HeraldError) -> None:
        if isinstance(error, errors.FencedError):
            error = errors.FencedError(f"ledger {self.ledger_id} was fenced by another writer")
        elif not isinstance(error, errors.PersistenceError):
            error = errors.PersistenceError(f"storage write to ledger {self.ledger_id} failed: {error}")
        self._failure = error
        while self._pending:
            op = self._pending.popleft()
            if not op.future.done():
                op.future.set_exception(error)

    async def read_entries(self, first: int, last: int) -> list[tuple[int, bytes]]:
        """Entries first..last (inclusive), from any replica holding them, failing over on error."""
        if first < 0 or last < first:
            raise errors.InvalidArgumentError(f"bad entry range {first}..{last} of ledger {self.ledger_id}")
        if last > self.last_add_confirmed:
            raise errors.EntryNotFoundError(
                f"entry {last} of ledger {self.ledger_id} is beyond its last confirmed entry "
                f"{self.last_add_confirmed}"
            )
        return await self._client.read_range(self.metadata, first, last)

    async def close(self) -> None:
        """Wait for in-flight adds, then record the ledger CLOSED with its last entry (by CAS)."""
        if self.closed or not self.writable:
            return
        if self._pending:
            with contextlib.suppress(errors.HeraldError):
                await asyncio.gather(*(op.future for op in list(self._pending)), return_exceptions=True)
        self.metadata.state = "CLOSED"
        self.metadata.last_entry_id = self.last_add_confirmed
        self.metadata.length = self._length
        self._version = await self._client.store.put(
            ledger_key(self.ledger_id), self.metadata.to_bytes(), expected_version=self._version
        )


class StorageClient:
    def __init__(
        self, store: MetadataStore, bootstrap_addresses: list[str] | None = None,
        operation_timeout: float = 30.0,
    ) -> None:
        self.store = store
        self.addresses = list(bootstrap_addresses or [])
        self.operation_timeout = operation_timeout
        self._nodes: dict[str, NodeConnection] = {}

    async def start(self) -> None:
        if not self.addresses:
            raise errors.ServiceNotReadyError("no storage nodes configured")

    async def close(self) -> None:
        nodes, self._nodes = self._nodes, {}
        for node in nodes.values():
            await node.close()

    def node(self, address: str) -> NodeConnection:
        connection = self._nodes.get(address)
        if connection is None:
            connection = self._nodes[address] = NodeConnection(address, self.operation_timeout)
        return connection

    async def create_ledger(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int, properties: dict[str, str] | None = None
    ) -> LedgerHandle:
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        if ensemble_size > len(self.addresses):
            raise errors.ServiceNotReadyError(
                f"ensemble size {ensemble_size} needs {ensemble_size} storage nodes; "
                f"only {len(self.addresses)} are available"
            )
        ledger_id = await self.store.allocate_id(LEDGER_ID_COUNTER)
        metadata = LedgerMetadata(
            ledger_id=ledger_id, ensemble=random.sample(self.addresses, ensemble_size),
            write_quorum=write_quorum, ack_quorum=ack_quorum, properties=dict(properties or {}),
        )
        version = await self.store.put(ledger_key(ledger_id), metadata.to_bytes(), expected_version=0)
        return LedgerHandle(self, metadata, version, writable=True)

    async def open_ledger(self, ledger_id: int, recover: bool = True) -> LedgerHandle:
        metadata, found = await read_ledger_metadata(self.store, ledger_id)
        if metadata.state == "CLOSED" or not recover:
            if metadata.state != "CLOSED":
                metadata.last_entry_id = await self._last_add_confirmed(metadata)
            return LedgerHandle(self, metadata, found.version, writable=False)
        return await self._recover(metadata, found.version)

    async def _recover(self, metadata: LedgerMetadata, version: int) -> LedgerHandle:
        """Fence, find the last entry, re-replicate it to its write set, close by CAS."""
        metadata.state = "IN_RECOVERY"
        version = await self.store.put(ledger_key(metadata.ledger_id), metadata.to_bytes(), expected_version=version)
        lac = -1
        fenced = 0
        for address in metadata.ensemble:
            try:
                response = await self.node(address).stub.Fence(
                    storage_pb2.FenceRequest(ledger_id=metadata.ledger_id), timeout=self.operation_timeout
                )
                lac = max(lac, response.last_entry_id)
                fenced += 1
            except grpc.aio.AioRpcError as exc:
                log.warning("fencing ledger %d on %s failed: %s", metadata.ledger_id, address, exc.details())
        # Enough nodes must be fenced that no ack quorum can form without one of them.
        if fenced < len(metadata.ensemble) - metadata.ack_quorum + 1:
            raise errors.ServiceNotReadyError(
                f"could not fence ledger {metadata.ledger_id}: {fenced} of {len(metadata.ensemble)} nodes answered"
            )
        # Read forward past the fenced nodes' answer: any entry a node holds may have been acked.
        last = lac
        while True:
            try:
                (entry,) = await self.read_range(metadata, last + 1, last + 1)
            except (errors.EntryNotFoundError, errors.LedgerNotFoundError):
                break
            for address in metadata.write_set(entry[0]):
                request = storage_pb2.AddRequest(
                    ledger_id=metadata.ledger_id, entry_id=entry[0], data=entry[1], recovery=True
                )
                added = await asyncio.wait_for(self.node(address).add(request), self.operation_timeout)
                if added.HasField("error"):
                    raise errors.from_proto(added.error)
            last = entry[0]
        metadata.state = "CLOSED"
        metadata.last_entry_id = last
        metadata.length = 0
        version = await self.store.put(ledger_key(metadata.ledger_id), metadata.to_bytes(), expected_version=version)
        return LedgerHandle(self, metadata, version, writable=False)

    async def _last_add_confirmed(self, metadata: LedgerMetadata) -> int:
        lac = -1
        for address in metadata.ensemble:
            with contextlib.suppress(grpc.aio.AioRpcError):
                response = await self.node(address).stub.ReadLastAddConfirmed(
                    storage_pb2.LacRequest(ledger_id=metadata.ledger_id), timeout=self.operation_timeout
                )
                lac = max(lac, response.last_add_confirmed)
        return lac

    async def read_range(self, metadata: LedgerMetadata, first: int, last: int) -> list[tuple[int, bytes]]:
        if metadata.write_quorum == len(metadata.ensemble):
            return await self._read_from_any(metadata, metadata.ensemble, first, last)
        # Striped ledger: each entry lives on its own write set.
        result: list[tuple[int, bytes]] = []
        for entry_id in range(first, last + 1):
            result += await self._read_from_any(metadata, metadata.write_set(entry_id), entry_id, entry_id)
        return result

    async def _read_from_any(
        self, metadata: LedgerMetadata, candidates: list[str], first: int, last: int
    ) -> list[tuple[int, bytes]]:
        failure: errors.HeraldError | None = None
        for address in random.sample(candidates, len(candidates)):
            try:
                entries: list[tuple[int, bytes]] = []
                request = storage_pb2.ReadRequest(
                    ledger_id=metadata.ledger_id, first_entry_id=first, last_entry_id=last
                )
                async for chunk in self.node(address).stub.ReadEntries(request, timeout=self.operation_timeout):
                    entries.extend((entry.entry_id, entry.data) for entry in chunk.entries)
                if entries and entries[-1][0] == last:
                    return entries
                failure = errors.EntryNotFoundError(
                    f"entries {first}..{last} of ledger {metadata.ledger_id} not found on {address}"
                )
            except grpc.aio.AioRpcError as exc:
                failure = error_from_rpc(exc, f"read ledger {metadata.ledger_id} from {address}")
                if isinstance(failure, errors.ChecksumError):
                    log.error("storage node %s holds a corrupt entry in ledger %d: %s",
                              address, metadata.ledger_id, failure)
        assert failure is not None
        raise failure

    async def delete_ledger(self, ledger_id: int) -> None:
        metadata, _ = await read_ledger_metadata(self.store, ledger_id)
        for address in metadata.ensemble:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.node(address).stub.DeleteLedger(
                    storage_pb2.DeleteLedgerRequest(ledger_id=ledger_id), timeout=self.operation_timeout
                )
        await self.store.delete(ledger_key(ledger_id))
