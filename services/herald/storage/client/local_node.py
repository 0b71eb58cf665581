"""Adds to a storage node that runs in this process (`herald standalone`), handed to its ledger store
directly instead of through a gRPC stream to itself.

A standalone's broker and storage node share one event loop: each add crossing gRPC to itself cost
the entry's bytes serialized, copied through the loopback socket and parsed again, plus the
stream's messages both ways (bench/hot_path_profile.py: about a third of the broker process's CPU
per 1 KB message). Here the entry's bytes object itself goes to the journal, and the add's outcome
comes back as the same AddResponse a node's stream would give, so the ledger handle's rules (in
order completion, fencing, ensemble changes, quarantine) are the ones every other add follows.

The process registers its node under the address the broker knows it by (`serve_locally`); the
storage client uses it for adds to that address (`NodeConnection.add`), everything else (reads,
fencing, the LAC, deletes) still goes through gRPC. Reads of that node's entries (a catch-up reader's,
which miss the broker's cache) come from the store directly too (`read_locally`): over gRPC, each
byte of a backlog went through a protobuf reply and the loopback socket into the same process.
This module knows the node only as the `LocalStore` protocol: the storage client and the storage
node stay unaware of each other.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from herald.api.v1 import storage_pb2
from herald.common import errors
from herald.common.transport.rpc import error_to_proto
from herald.storage.client.add_deadlines import AddDeadlines

if TYPE_CHECKING:
    from herald.storage.client.add_frame import AddFrame


class StreamOwner(Protocol):
    """The node connection a stream belongs to (node_connection.NodeConnection)."""

    address: str
    add_timeout: float

    def stream_ended(self, stream: LocalAddStream) -> None: ...


class LocalStore(Protocol):
    """What a storage node of this process offers the storage client: its ledger store's add and read."""

    async def begin_add(self, ledger_id: int, entry_id: int, data: bytes, *, last_add_confirmed: int = -1,
                        recovery: bool = False, traceparent: str = "", length: int = -1) -> asyncio.Future[None]:
        """Queue an add and return the future of its fsync (raises HeraldError when refused); a
        traced add (`traceparent`) is the node's span, as over gRPC."""
        ...

    def read_entries(self, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
                     max_bytes: int = 0) -> AsyncIterator[list[tuple[int, bytes]]]:
        """Entries first..last as chunks, stopping at the first not held (raises HeraldError)."""
        ...


_LOCAL: dict[str, LocalStore] = {}


def serve_locally(address: str, store: LocalStore) -> None:
    """Adds to `address` made by storage clients of this process go to `store` directly."""
    _LOCAL[address] = store


def stop_serving_locally(address: str) -> None:
    """Adds to `address` go through gRPC again (streams already open keep the store they have:
    its own checks refuse adds once it is closed)."""
    _LOCAL.pop(address, None)


def local_store(address: str) -> LocalStore | None:
    return _LOCAL.get(address)


class LocalAddStream:
    """The local counterpart of node_connection's add stream: adds begin in the order they were
    queued (on one task, as a node's stream reader does), and their responses complete in that
    order once durable or refused. An add not answered within add_timeout fails the stream, and
    every add waiting with it, as a remote node's silence does."""

    def __init__(self, connection: StreamOwner, store: LocalStore) -> None:
        self._connection = connection
        self._store = store
        self._loop = asyncio.get_running_loop()
        self._queued: deque[tuple[AddFrame, asyncio.Future[storage_pb2.AddResponse]]] = deque()
        # Begun, in order: (frame, response future, the fsync's future or the refusal).
        self._begun: deque[tuple[AddFrame, asyncio.Future[storage_pb2.AddResponse],
                                 asyncio.Future[None] | errors.HeraldError]] = deque()
        self._deadlines = AddDeadlines[asyncio.Future[storage_pb2.AddResponse]](
            connection.address, connection.add_timeout, asyncio.Future.done, self.fail)
        self._wake = asyncio.Event()
        self._failure: errors.HeraldError | None = None
        self.task = self._loop.create_task(self._run(), name=f"storage-local-adds-{connection.address}")

    def add(self, frame: AddFrame) -> asyncio.Future[storage_pb2.AddResponse]:
        future: asyncio.Future[storage_pb2.AddResponse] = self._loop.create_future()
        if self._failure is not None:
            future.set_exception(self._failure)
            return future
        self._queued.append((frame, future))
        self._deadlines.track(future)
        self._wake.set()
        return future

    def fail(self, error: errors.HeraldError) -> None:
        if self._failure is None:
            self._failure = error
        self.task.cancel()

    async def _run(self) -> None:
        queued, store = self._queued, self._store
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while queued:
                    frame, future = queued.popleft()
                    started: asyncio.Future[None] | errors.HeraldError
                    try:
                        started = await store.begin_add(frame.ledger_id, frame.entry_id, frame.data,
                                                        last_add_confirmed=frame.last_add_confirmed,
                                                        recovery=frame.recovery, traceparent=frame.traceparent,
                                                        length=frame.length)
                    except errors.HeraldError as exc:
                        started = exc
                    self._begun.append((frame, future, started))
                    if isinstance(started, asyncio.Future):
                        started.add_done_callback(self._answer)
                    else:
                        self._answer(None)
        except asyncio.CancelledError:
            if self._failure is None:
                raise
        finally:
            self._deadlines.cancel()
            self._connection.stream_ended(self)
            error = self._failure or errors.ConnectionError_(
                f"storage node {self._connection.address}: add stream closed")
            for _, future in self._queued:
                if not future.done():
                    future.set_exception(error)
            for _, future, started in self._begun:
                if isinstance(started, asyncio.Future):
                    started.remove_done_callback(self._answer)
                    started.add_done_callback(_retrieve)  # it still lands; nobody waits for it
                if not future.done():
                    future.set_exception(error)
            self._queued.clear()
            self._begun.clear()

    def _answer(self, _done: object) -> None:
        """Answer the adds at the head of the line that are done, in order (as a node's stream does)."""
        begun = self._begun
        while begun:
            frame, future, started = begun[0]
            error: errors.HeraldError | None
            if isinstance(started, errors.HeraldError):
                error = started
            elif not started.done():
                return
            elif started.cancelled():
                error = errors.PersistenceError(f"storage node {self._connection.address}: the add was cancelled")
            else:
                exc = started.exception()
                error = None if exc is None else exc if isinstance(exc, errors.HeraldError) else \
                    errors.PersistenceError(f"storage node {self._connection.address}: {exc}")
            begun.popleft()
            if future.done():
                continue
            response = storage_pb2.AddResponse(request_id=frame.request_id, ledger_id=frame.ledger_id,
                                               entry_id=frame.entry_id)
            if error is not None:
                response.error.CopyFrom(error_to_proto(error))
            future.set_result(response)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


async def read_locally(store: LocalStore, address: str, ledger_id: int, first: int, last: int,
                       chunk_timeout: float) -> list[tuple[int, bytes]]:
    """Entries first..last that the node of this process holds, as NodeConnection.read answers them
    over gRPC: the node's own error (EntryNotFoundError, ChecksumError...), a failure of its disk as
    PersistenceError, or HeraldTimeoutError if a chunk takes longer than `chunk_timeout`."""
    entries: list[tuple[int, bytes]] = []
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(chunk_timeout) as deadline:
            async for chunk in store.read_entries(ledger_id, first, last):
                entries.extend(chunk)
                deadline.reschedule(loop.time() + chunk_timeout)
    except TimeoutError:  # before OSError, whose subclass it is
        raise errors.HeraldTimeoutError(
            f"read of ledger {ledger_id} entries {first}..{last} from storage node {address}: "
            f"no answer within {chunk_timeout} s") from None
    except OSError as exc:
        raise errors.PersistenceError(f"read ledger {ledger_id} from storage node {address}: {exc!r}") from None
    return entries
