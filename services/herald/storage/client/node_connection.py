"""The storage client's connections to storage nodes, and what it knows of their health.

`NodeConnection` is one node: a gRPC channel, a pipelined AddEntryBatches stream whose adds must be
answered within `add_timeout` (a paused node keeps its TCP connection open, so only the timeout
notices it), and reads whose chunks must arrive within `read_timeout`. Adds come serialized
already (AddFrame: one buffer for every node of a write set) and are written as bytes; to a node
of this process (standalone) they go to its ledger store directly instead (local_node.py), and so do
reads of its entries.

`NodePool` holds a connection per node of the (static) bootstrap list and quarantines a node that
failed or timed out for `quarantine_seconds`: a quarantined node is chosen for no new ensemble and
no replacement (unless, with fewer than Qw healthy nodes left, it answers a probe), and is read from
only when no other replica is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Callable

import grpc
import grpc.aio

from herald.api.v1 import storage_pb2, storage_pb2_grpc
from herald.common import errors
from herald.common.transport.rpc import channel_options, error_from_rpc
from herald.common.transport.tls import PLAINTEXT, Dialer
from herald.storage.client.add_deadlines import AddDeadlines
from herald.storage.client.add_frame import AddFrame, batch_message
from herald.storage.client.local_node import LocalAddStream, local_store, read_locally

log = logging.getLogger(__name__)

# A restarted node is dialled again within this long (gRPC's default backoff grows to 2 minutes).
_RECONNECT_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 2000)]

# The adds of one AddBatchRequest take at most this many bytes (one bigger entry goes alone): the
# storage nodes' grpc_max_receive_message_bytes (16 MiB) takes it with room to spare.
ADD_BATCH_MAX_BYTES = 8 * 1024 * 1024
# The AddEntryBatches method, called with requests serialized already (AddFrame): its path.
_ADD_BATCHES_PATH = f"/{storage_pb2.DESCRIPTOR.services_by_name['StorageService'].full_name}/AddEntryBatches"

# Errors that say the node itself is unwell (rather than the request being wrong).
NODE_FAILURES = (errors.ConnectionError_, errors.HeraldTimeoutError, errors.ServiceNotReadyError,
                 errors.PersistenceError)


class _AddStream:
    """One AddEntryBatches stream: adds queued while a message is being written, or while
    `batches_in_flight` messages are unanswered, leave together; every add still waiting when the
    stream fails (or an add outlives add_timeout) fails with it.

    Why hold adds while a message is unanswered: the node would only queue them behind the fsync
    under way (its journal commits in groups), and every message costs the node (and this broker)
    wake-ups of several threads: one message per group commit is what the node can use. With
    several brokers and Qw copies on a machine whose cores every process shares, those wake-ups,
    not the bytes, are most of a node's CPU (bench/results/issue20_cluster.md).

    Requests are written as bytes (the method's request serializer is the identity): each add
    comes already serialized (an AddFrame, shared by every node it goes to)."""

    def __init__(self, connection: NodeConnection) -> None:
        self._connection = connection
        self._loop = asyncio.get_running_loop()
        self._outbox: list[AddFrame] = []
        self._waiting: dict[int, asyncio.Future[storage_pb2.AddResponse]] = {}
        self._deadlines = AddDeadlines[int](connection.address, connection.add_timeout,
                                            lambda request_id: request_id not in self._waiting, self.fail)
        # The last request id of each message written and not wholly answered, in write order.
        self._unanswered: deque[int] = deque()
        self._wake = asyncio.Event()
        self._failure: errors.HeraldError | None = None
        self.task = self._loop.create_task(self._run(), name=f"storage-adds-{connection.address}")

    def add(self, frame: AddFrame) -> asyncio.Future[storage_pb2.AddResponse]:
        future: asyncio.Future[storage_pb2.AddResponse] = self._loop.create_future()
        self._waiting[frame.request_id] = future
        frame.queued()
        self._outbox.append(frame)
        self._deadlines.track(frame.request_id)
        self._wake.set()
        return future

    def _take_batch(self) -> list[AddFrame]:
        """The oldest adds queued, up to ADD_BATCH_MAX_BYTES (at least one, whatever its size)."""
        outbox, size, count = self._outbox, 0, 0
        for frame in outbox:
            size += frame.size
            if count and size > ADD_BATCH_MAX_BYTES:
                break
            count += 1
        batch, self._outbox = outbox[:count], outbox[count:]
        return batch

    def fail(self, error: errors.HeraldError) -> None:
        if self._failure is None:
            self._failure = error
        self.task.cancel()

    async def _run(self) -> None:
        address = self._connection.address
        call = self._connection.add_batches()  # type: ignore[call-arg]  # written with call.write()
        reader = asyncio.create_task(self._read_responses(call))
        reader.add_done_callback(lambda _: self._wake.set())  # a failed stream wakes the writer to end
        failure: errors.HeraldError = errors.ConnectionError_(f"storage node {address}: add stream closed")
        try:
            while not reader.done():
                await self._wake.wait()
                self._wake.clear()
                # Everything queued while the previous message was being written goes out together
                # (a gRPC stream moves a few thousand messages a second, not tens of thousands), in
                # messages of at most ADD_BATCH_MAX_BYTES: under the node's receive limit.
                limit = self._connection.batches_in_flight
                while self._outbox and (limit <= 0 or len(self._unanswered) < limit):
                    batch = self._take_batch()
                    self._unanswered.append(batch[-1].request_id)
                    await call.write(batch_message(batch))  # one serialized AddBatchRequest
                    for frame in batch:
                        frame.written()
            await reader
        except grpc.aio.AioRpcError as exc:
            failure = error_from_rpc(exc, f"add to storage node {address}")
        except asyncio.CancelledError:
            if self._failure is None:
                raise
        except Exception as exc:  # the channel broke in a way grpc does not wrap
            failure = errors.ConnectionError_(f"add to storage node {address} failed: {exc!r}")
        finally:
            self._deadlines.cancel()
            reader.cancel()
            call.cancel()
            self._connection.stream_ended(self)
            error = self._failure or failure
            self._outbox = []
            waiting, self._waiting = self._waiting, {}
            for future in waiting.values():
                if not future.done():
                    future.set_exception(error)

    async def _read_responses(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        waiting, unanswered = self._waiting, self._unanswered
        async for batch in call:
            for response in batch.responses:
                future = waiting.pop(response.request_id, None)
                if future is not None and not future.done():
                    future.set_result(response)
            self._deadlines.prune()
            if unanswered and unanswered[0] not in waiting:
                # Answers come in request order: a message is answered once its last add is.
                while unanswered and unanswered[0] not in waiting:
                    unanswered.popleft()
                if self._outbox:
                    self._wake.set()  # the adds held meanwhile leave now, together


class NodeConnection:
    """One storage node: a channel, and a pipelined add stream opened on first use (and again after
    a failure)."""

    def __init__(self, address: str, *, add_timeout: float, read_timeout: float, operation_timeout: float,
                 dialer: Dialer = PLAINTEXT, batches_in_flight: int = 0) -> None:
        self.address = address
        self.add_timeout = add_timeout
        self.batches_in_flight = batches_in_flight  # 0: no limit (each write leaves at once)
        self.read_timeout = read_timeout
        self.operation_timeout = operation_timeout
        self._channel = dialer.channel(address, channel_options() + _RECONNECT_OPTIONS)
        self.stub = storage_pb2_grpc.StorageServiceStub(self._channel)
        # AddEntryBatches taking its requests as bytes: a request serializer of None passes them on.
        self.add_batches = self._channel.stream_stream(
            _ADD_BATCHES_PATH, request_serializer=None,
            response_deserializer=storage_pb2.AddBatchResponse.FromString)
        self._stream: _AddStream | LocalAddStream | None = None

    def add(self, frame: AddFrame) -> asyncio.Future[storage_pb2.AddResponse]:
        """Queue an add on the stream; the future completes with the node's response, or fails with
        the stream (ConnectionError_, or HeraldTimeoutError if no answer came within add_timeout).
        The frame's request id must be unique on this connection (NodePool.next_request_id)."""
        stream = self._stream
        if stream is None:
            # A node of this process (standalone) takes adds directly: local_node.py.
            store = local_store(self.address)
            stream = self._stream = _AddStream(self) if store is None else LocalAddStream(self, store)
        return stream.add(frame)

    def stream_ended(self, stream: _AddStream | LocalAddStream) -> None:
        if self._stream is stream:
            self._stream = None

    async def read(self, ledger_id: int, first: int, last: int) -> list[tuple[int, bytes]]:
        """Entries first..last the node holds, stopping at the first it lacks. Raises the node's
        error (EntryNotFoundError if it lacks `first`, ChecksumError for a damaged entry), or
        HeraldTimeoutError if a chunk does not come within read_timeout."""
        store = local_store(self.address)
        if store is not None:  # a node of this process (standalone): local_node.py
            return await read_locally(store, self.address, ledger_id, first, last, self.read_timeout)
        request = storage_pb2.ReadRequest(ledger_id=ledger_id, first_entry_id=first, last_entry_id=last)
        entries: list[tuple[int, bytes]] = []
        call = self.stub.ReadEntries(request)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.read_timeout) as deadline:
                async for chunk in call:
                    entries.extend((entry.entry_id, entry.data) for entry in chunk.entries)
                    deadline.reschedule(loop.time() + self.read_timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"read ledger {ledger_id} from storage node {self.address}") from None
        except TimeoutError:
            raise errors.HeraldTimeoutError(
                f"read of ledger {ledger_id} entries {first}..{last} from storage node {self.address}: "
                f"no answer within {self.read_timeout} s") from None
        finally:
            call.cancel()
        return entries

    async def fence(self, ledger_id: int) -> int:
        """Fence the ledger on this node (a journaled write, so bounded by add_timeout); its last entry id."""
        try:
            response = await self.stub.Fence(storage_pb2.FenceRequest(ledger_id=ledger_id),
                                             timeout=self.add_timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"fence ledger {ledger_id} on storage node {self.address}") from None
        return int(response.last_entry_id)

    async def last_add_confirmed(self, ledger_id: int) -> storage_pb2.LacResponse:
        """What the node knows of the ledger (a read, so bounded by read_timeout)."""
        try:
            return await self.stub.ReadLastAddConfirmed(storage_pb2.LacRequest(ledger_id=ledger_id),
                                                        timeout=self.read_timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"read the LAC of ledger {ledger_id} on storage node {self.address}") from None

    async def delete_ledger(self, ledger_id: int) -> None:
        try:
            await self.stub.DeleteLedger(storage_pb2.DeleteLedgerRequest(ledger_id=ledger_id),
                                         timeout=self.operation_timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"delete ledger {ledger_id} on storage node {self.address}") from None

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.fail(errors.ConnectionError_(f"storage node {self.address}: the storage client closed"))
            with contextlib.suppress(asyncio.CancelledError):
                await stream.task
        await self._channel.close(None)


class NodePool:
    """The storage nodes the client knows (the bootstrap list), their connections and health."""

    def __init__(self, addresses: list[str], *, add_timeout: float, read_timeout: float, operation_timeout: float,
                 quarantine_seconds: float, clock: Callable[[], float] = time.monotonic,
                 dialer: Dialer = PLAINTEXT, add_batches_in_flight: int = 1) -> None:
        self._dialer = dialer
        self.add_batches_in_flight = add_batches_in_flight
        self.bootstrap = list(dict.fromkeys(addresses))
        # The registered available nodes (storage.membership) once any node registered: they
        # replace the bootstrap list for placement. None: no registry, or nothing registered.
        self.registered: list[str] | None = None
        self.add_timeout = add_timeout
        self.read_timeout = read_timeout
        self.operation_timeout = operation_timeout
        self.quarantine_seconds = quarantine_seconds
        self._clock = clock
        self._connections: dict[str, NodeConnection] = {}
        self._quarantined: dict[str, float] = {}  # address -> until (clock)
        # Request ids of adds, unique across the pool's connections: an add's one frame carries
        # its id to every node of its write set.
        self._request_ids = itertools.count(1)
        self.closed = False

    @property
    def addresses(self) -> list[str]:
        """The nodes new ensembles and replacements are chosen from."""
        return self.bootstrap if self.registered is None else self.registered

    def use_registered(self, available: list[str] | None) -> None:
        """Place on these registered nodes from now on (None: back to the bootstrap list)."""
        self.registered = None if available is None else list(available)

    def next_request_id(self) -> int:
        return next(self._request_ids)

    def node(self, address: str) -> NodeConnection:
        connection = self._connections.get(address)
        if connection is None:
            if self.closed:
                raise errors.ServiceNotReadyError(f"storage node {address}: the storage client is closed")
            connection = self._connections[address] = NodeConnection(
                address, add_timeout=self.add_timeout, read_timeout=self.read_timeout,
                operation_timeout=self.operation_timeout, dialer=self._dialer,
                batches_in_flight=self.add_batches_in_flight)
        return connection

    # ---- health -------------------------------------------------------------------------------

    def quarantine(self, address: str, reason: BaseException) -> None:
        """Keep a node that failed or timed out out of new ensembles for quarantine_seconds."""
        if not self.is_quarantined(address):
            log.warning("storage node %s quarantined for %.0f s: %s", address, self.quarantine_seconds, reason)
        self._quarantined[address] = self._clock() + self.quarantine_seconds

    def is_quarantined(self, address: str) -> bool:
        if not self._quarantined:
            return False
        until = self._quarantined.get(address)
        if until is None:
            return False
        if until <= self._clock():
            del self._quarantined[address]
            return False
        return True

    async def probe_quarantined(self) -> set[str]:
        """Lift the quarantine of every quarantined node that answers again within add_timeout, and
        return those. A last resort before refusing a ledger or failing its adds for want of
        healthy nodes: a node that restarted is back at once rather than after its quarantine."""
        released: set[str] = set()

        async def probe(address: str) -> None:
            try:
                await asyncio.wait_for(self.node(address).last_add_confirmed(0), self.add_timeout)
            except (errors.HeraldError, TimeoutError):
                return
            if self._quarantined.pop(address, None) is not None:
                released.add(address)
                log.info("storage node %s answers again: its quarantine is lifted", address)

        await asyncio.gather(*(probe(a) for a in self.addresses if self.is_quarantined(a)))
        return released

    def healthy(self) -> list[str]:
        """The nodes not quarantined, in bootstrap order."""
        return [a for a in self.addresses if not self.is_quarantined(a)]

    def describe_health(self) -> str:
        quarantined = [a for a in self.addresses if self.is_quarantined(a)]
        return (f"{len(self.addresses) - len(quarantined)} of {len(self.addresses)} storage nodes are healthy"
                + (f" (quarantined: {', '.join(quarantined)})" if quarantined else ""))

    # ---- placement ----------------------------------------------------------------------------

    def choose_ensemble(self, size: int) -> list[str]:
        return random.sample(self.healthy(), size)

    def replacement(self, exclude: set[str]) -> str | None:
        """A healthy node not in `exclude`, or None."""
        spare = [a for a in self.healthy() if a not in exclude]
        return random.choice(spare) if spare else None

    def new_ensemble(self, old: list[str], failed: set[str]) -> list[str]:
        """The ensemble after an ensemble change: each failed node replaced in its place by a healthy
        spare, or dropped when none is left (the caller checks that Qw nodes remain)."""
        taken = set(old) | failed
        new: list[str] = []
        for address in old:
            if address not in failed:
                new.append(address)
                continue
            spare = self.replacement(taken)
            if spare is not None:
                new.append(spare)
                taken.add(spare)
        return new

    def read_order(self, candidates: list[str]) -> list[str]:
        """Candidates in the order to read from them: healthy ones first (shuffled, to spread load)."""
        shuffled = random.sample(candidates, len(candidates))
        return sorted(shuffled, key=self.is_quarantined)

    async def close(self) -> None:
        self.closed = True
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()
