"""The storage node's gRPC server: a thin StorageService servicer over the ledger store.

Error convention (the storage client parses it with herald.common.transport.rpc.error_from_rpc):
- AddEntries answers every add, failed or not, with an AddResponse; a failed add carries
  AddResponse.error (HeraldError.to_proto()) and the stream goes on.
- The other RPCs fail by aborting with a gRPC status (herald.common.transport.rpc.status_for) whose details
  are "<HERALD ErrorCode number>:<message>", e.g. "12:ledger 5 is fenced ..." or "3:entry 7 of
  ledger 5 ... is corrupt ...": a CHECKSUM_ERROR (DATA_LOSS status) is never sent with data.

AddEntries is pipelined: requests are read continuously and each add starts at once; responses
leave in request order (hence in order within each ledger) as their journal fsyncs complete.
AddEntryBatches is the same with many adds per message and the results done together per message.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from herald.api.v1 import storage_pb2, storage_pb2_grpc
from herald.common import tracing
from herald.common.errors import HeraldError, PersistenceError, ServiceNotReadyError
from herald.common.http.endpoint import HttpEndpoint, serve_endpoint
from herald.common.security.service import ServiceSecurity
from herald.common.tasks import cancel_and_wait
from herald.common.transport.health import ServiceHealth
from herald.common.transport.rpc import abort, error_to_proto, server_options
from herald.common.transport.tls import add_port
from herald.common.transport.tracing import server_interceptors
from herald.metadata.backends import open_store
from herald.storage.node.gc import LedgerGarbageCollector
from herald.storage.node.ledger_store import LedgerStore
from herald.storage.node.metrics import StorageMetrics
from herald.storage.node.registration import NodeRegistration
from herald.storage.node.settings import StorageSettings

log = logging.getLogger(__name__)
# The add streams carry entries: limited by grpc_max_receive_message_bytes only; every other
# request (reads, fences, deletes) by the per-method limit (1 MiB).
BULK_METHODS = ("/herald.v1.StorageService/AddEntries", "/herald.v1.StorageService/AddEntryBatches")

if TYPE_CHECKING:
    _Context = grpc.aio.ServicerContext[Any, Any]


def _herald_error(exc: BaseException) -> HeraldError:
    if isinstance(exc, HeraldError):
        return exc
    return PersistenceError(f"storage node failure: {exc!r}")


_Started = asyncio.Future[None] | HeraldError
# At most this many results go in one AddBatchResponse.
_MAX_RESULTS_PER_BATCH = 4096


class _AddStream:
    """One add stream: adds begin as requests arrive; results leave in request order once durable."""

    def __init__(self, store: LedgerStore, max_pending: int) -> None:
        self._store = store
        self._slots = asyncio.Semaphore(max_pending)
        self._items: deque[tuple[storage_pb2.AddRequest, _Started]] = deque()
        self._more = asyncio.Event()
        self._ended = False

    async def read(self, requests: AsyncIterator[storage_pb2.AddRequest]) -> None:
        """Begin an add per request until the client half-closes (runs as its own task)."""
        try:
            async for request in requests:
                await self._begin(request)
        finally:
            self._end()

    async def read_batches(self, requests: AsyncIterator[storage_pb2.AddBatchRequest]) -> None:
        """Begin the adds of each batch, in order, until the client half-closes."""
        try:
            async for batch in requests:
                for request in batch.adds:
                    await self._begin(request)
        finally:
            self._end()

    async def _begin(self, request: storage_pb2.AddRequest) -> None:
        await self._slots.acquire()
        data = request.data  # each read of a bytes field is a copy: once
        span = _add_span(request, len(data)) if tracing.ENABLED and request.traceparent else None
        started: _Started
        try:
            started = await self._store.begin_add(
                request.ledger_id, request.entry_id, data,
                last_add_confirmed=request.last_add_confirmed, recovery=request.recovery,
                length=request.length if request.HasField("length") else -1)
        except HeraldError as exc:
            started = exc
        if span is not None:
            _end_add_span(span, started)
        self._items.append((request, started))
        self._more.set()

    def _end(self) -> None:
        self._ended = True
        self._more.set()

    async def responses(self) -> AsyncIterator[storage_pb2.AddResponse]:
        """Each add's response once it is durable (or failed), in request order."""
        while await self._wait_for_item():
            yield await self._respond(self._items.popleft())

    async def response_batches(self) -> AsyncIterator[storage_pb2.AddBatchResponse]:
        """Responses in request order, batched: the first waiting one plus all done after it."""
        items = self._items
        while await self._wait_for_item():
            batch = storage_pb2.AddBatchResponse()
            batch.responses.append(await self._respond(items.popleft()))
            while items and len(batch.responses) < _MAX_RESULTS_PER_BATCH and _done(items[0][1]):
                batch.responses.append(await self._respond(items.popleft()))
            yield batch

    async def _wait_for_item(self) -> bool:
        while not self._items:
            if self._ended:
                return False
            self._more.clear()
            await self._more.wait()
        return True

    async def _respond(self, item: tuple[storage_pb2.AddRequest, _Started]) -> storage_pb2.AddResponse:
        request, started = item
        error = started if isinstance(started, HeraldError) else None
        if isinstance(started, asyncio.Future):
            try:
                await started
            except Exception as exc:
                error = _herald_error(exc)
        self._slots.release()
        response = storage_pb2.AddResponse(
            request_id=request.request_id, ledger_id=request.ledger_id, entry_id=request.entry_id)
        if error is not None:
            response.error.CopyFrom(error_to_proto(error))
        return response

    def abandon(self) -> None:
        """The client went away: retrieve the outcome of adds nobody will answer (they still land)."""
        for _, started in self._items:
            if isinstance(started, asyncio.Future):
                started.add_done_callback(_retrieve)
        self._items.clear()


def _add_span(request: storage_pb2.AddRequest, size: int) -> tracing.Span:
    return _traced_add_span(request.traceparent, request.ledger_id, request.entry_id, size, request.recovery)


def _traced_add_span(traceparent: str, ledger_id: int, entry_id: int, size: int, recovery: bool) -> tracing.Span:
    """The node's span of one traced add, child of the writer's: until the add is durable (its
    journal group commit, shared with other adds, is not a span of its own)."""
    return tracing.tracer("herald.storage").start_span(
        "storage add", context=tracing.parent(tracing.parse(traceparent)), kind=trace.SpanKind.SERVER,
        attributes={"herald.ledger_id": ledger_id, "herald.entry_id": entry_id,
                    "herald.entry_size": size, "herald.recovery": recovery})


def _end_add_span(span: tracing.Span, started: _Started) -> None:
    if isinstance(started, asyncio.Future):
        started.add_done_callback(
            lambda done: tracing.end(span, None if done.cancelled() else done.exception()))
    else:
        tracing.end(span, started)


def _done(started: _Started) -> bool:
    return not isinstance(started, asyncio.Future) or started.done()


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class StorageServicer(storage_pb2_grpc.StorageServiceServicer):
    """Translates StorageService requests into ledger store calls and back; no logic of its own."""

    def __init__(self, store: LedgerStore, settings: StorageSettings) -> None:
        self._store = store
        self._settings = settings

    async def AddEntries(self, request_iterator: AsyncIterator[storage_pb2.AddRequest],
                         context: _Context) -> AsyncIterator[storage_pb2.AddResponse]:
        stream = _AddStream(self._store, self._settings.max_pending_adds_per_stream)
        reader = asyncio.create_task(stream.read(request_iterator), name="storage-add-reader")
        try:
            async for response in stream.responses():
                yield response
            await reader  # surfaces a failure to read the requests
        finally:
            await _stop_reader(reader, stream)

    async def AddEntryBatches(self, request_iterator: AsyncIterator[storage_pb2.AddBatchRequest],
                              context: _Context) -> AsyncIterator[storage_pb2.AddBatchResponse]:
        stream = _AddStream(self._store, self._settings.max_pending_adds_per_stream)
        reader = asyncio.create_task(stream.read_batches(request_iterator), name="storage-add-batch-reader")
        try:
            async for response in stream.response_batches():
                yield response
            await reader
        finally:
            await _stop_reader(reader, stream)

    async def ReadEntries(self, request: storage_pb2.ReadRequest,
                          context: _Context) -> AsyncIterator[storage_pb2.ReadResponse]:
        try:
            async for chunk in self._store.read_entries(request.ledger_id, request.first_entry_id,
                                                        request.last_entry_id, max_bytes=request.max_bytes):
                # Built in place: a StoredEntry made apart and then put in the list is copied again.
                response = storage_pb2.ReadResponse(ledger_id=request.ledger_id)
                add = response.entries.add
                for entry_id, data in chunk:
                    add(entry_id=entry_id, data=data)
                yield response
        except (HeraldError, OSError) as exc:
            await abort(context, _herald_error(exc))

    async def ReadLastAddConfirmed(self, request: storage_pb2.LacRequest,
                                   context: _Context) -> storage_pb2.LacResponse:
        try:
            info = self._store.ledger_info(request.ledger_id)
        except HeraldError as exc:
            await abort(context, exc)
        return storage_pb2.LacResponse(ledger_id=request.ledger_id, last_entry_id=info.last_entry_id,
                                       last_add_confirmed=info.last_add_confirmed, fenced=info.fenced,
                                       length=info.length if info.length >= 0 else None)

    async def Fence(self, request: storage_pb2.FenceRequest, context: _Context) -> storage_pb2.FenceResponse:
        try:
            last_entry_id = await self._store.fence(request.ledger_id)
        except HeraldError as exc:
            await abort(context, exc)
        return storage_pb2.FenceResponse(ledger_id=request.ledger_id, last_entry_id=last_entry_id)

    async def DeleteLedger(self, request: storage_pb2.DeleteLedgerRequest,
                           context: _Context) -> storage_pb2.DeleteLedgerResponse:
        try:
            await self._store.delete_ledger(request.ledger_id)
        except HeraldError as exc:
            await abort(context, exc)
        return storage_pb2.DeleteLedgerResponse()


async def _stop_reader(reader: asyncio.Task[None], stream: _AddStream) -> None:
    await cancel_and_wait(reader, swallow_errors=True)
    stream.abandon()


class LocalAccess:
    """What a storage client of this process (standalone) calls instead of this node's rpcs
    (storage/client/local_node.py): the ledger store's add, traced as a streamed add is, and its read."""

    def __init__(self, store: LedgerStore) -> None:
        self._store = store

    async def begin_add(self, ledger_id: int, entry_id: int, data: bytes, *, last_add_confirmed: int = -1,
                        recovery: bool = False, traceparent: str = "", length: int = -1) -> asyncio.Future[None]:
        span = (_traced_add_span(traceparent, ledger_id, entry_id, len(data), recovery)
                if tracing.ENABLED and traceparent else None)
        try:
            started = await self._store.begin_add(ledger_id, entry_id, data, last_add_confirmed=last_add_confirmed,
                                                  recovery=recovery, length=length)
        except HeraldError as exc:
            if span is not None:
                tracing.end(span, exc)
            raise
        if span is not None:
            _end_add_span(span, started)
        return started

    def read_entries(self, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
                     max_bytes: int = 0) -> AsyncIterator[list[tuple[int, bytes]]]:
        return self._store.read_entries(ledger_id, first_entry_id, last_entry_id, max_bytes=max_bytes)


class StorageServer:
    """A storage node: the ledger store on settings.data_dir behind a gRPC server, and its HTTP
    endpoint (/metrics) unless settings.metrics_port is -1. `registry`: where its metrics go (None:
    a registry of its own); an embedding process (standalone) passes its own and serves it."""

    def __init__(self, settings: StorageSettings, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        # With authorization on, only the brokers' roles (and superusers) may use a storage node.
        self.security = ServiceSecurity(settings, allowed_roles=(
            [*settings.broker_roles, *settings.superuser_roles] if settings.authorization_enabled else None))
        self.metrics = StorageMetrics(registry)
        self.store = LedgerStore(settings, metrics=self.metrics)
        self.http_endpoint: HttpEndpoint | None = None
        self._server: grpc.aio.Server | None = None
        self._port = 0
        self._state = "new"
        self.registration: NodeRegistration | None = None  # with settings.metadata_url
        self.gc: LedgerGarbageCollector | None = None  # with settings.metadata_url and gc_interval
        # Ready while the journal takes adds: open, its writer running, no failed write.
        self.health = ServiceHealth("storage", [storage_pb2.DESCRIPTOR.services_by_name["StorageService"].full_name])
        self.health.add_check("journal", self._journal_open)

    async def _journal_open(self) -> str | None:
        return self.store.problem()

    @property
    def port(self) -> int:
        if not self._port:
            raise ServiceNotReadyError("the storage server is not started")
        return self._port

    def local_access(self) -> LocalAccess:
        """This node's adds and reads for a storage client of the same process (standalone)."""
        return LocalAccess(self.store)

    @property
    def address(self) -> str:
        return f"{self.settings.host}:{self.port}"

    async def start(self) -> None:
        """Recover the ledger store, then serve on host:port (port 0: a free one)."""
        if self._state != "new":
            raise ServiceNotReadyError(f"the storage server is {self._state}: start it once")
        self._state = "starting"
        try:
            await self.store.open()
        except BaseException:
            self._state = "stopped"
            raise
        try:
            self.metrics.watch(self.store.reading, self.settings.data_dir, asyncio.get_running_loop())
            self._serve_metrics()
            server = grpc.aio.server(
                options=server_options(self.settings.grpc_max_receive_message_bytes,
                                       self.settings.max_streams_per_connection),
                interceptors=[*self.security.interceptors, *server_interceptors(BULK_METHODS)])
            storage_pb2_grpc.add_StorageServiceServicer_to_server(StorageServicer(self.store, self.settings),
                                                                  server)
            await self.health.add_to_server(server)
            target = f"{self.settings.host}:{self.settings.port}"
            port = add_port(server, target, self.security.server_credentials)  # AddressInUseError when taken
            await server.start()
        except BaseException:
            self._stop_metrics()
            await self.store.close()
            self._state = "stopped"
            raise
        self._server, self._port, self._state = server, port, "running"
        await self.health.start()
        if self.settings.metadata_url:
            await self._register()
        log.info("storage node serving %s on %s", self.settings.data_dir, self.address)

    async def stop(self) -> None:
        """Stop accepting RPCs, let running ones finish (up to stop_grace), checkpoint, close. Idempotent."""
        if self._state in ("stopping", "stopped"):
            return
        self._state = "stopping"
        try:
            await self._unregister()
            await self.health.stop()
            if self._server is not None:
                await self._server.stop(self.settings.stop_grace)
        finally:
            self._stop_metrics()
            await self.store.close()
            self._state = "stopped"

    async def _register(self) -> None:
        """Register in the metadata store (storage.membership); a failure stops the node (it would
        serve while no broker finds it)."""
        store = open_store(self.settings.metadata_url)
        address = self.settings.advertised_address or self.address
        self.registration = NodeRegistration(store, address, self.settings.data_dir, self.settings.registration_ttl)
        try:
            await store.start()
            await self.registration.start()
            if self.settings.gc_interval > 0:
                self.gc = LedgerGarbageCollector(self.store, store, interval=self.settings.gc_interval,
                                                 grace=self.settings.gc_grace)
                self.gc.start()
        except BaseException:
            self.registration = None
            await store.close()
            await self.stop()
            raise

    async def _unregister(self) -> None:
        gc, self.gc = self.gc, None
        if gc is not None:
            await gc.stop()
        registration, self.registration = self.registration, None
        if registration is not None:
            try:
                await registration.stop()
            finally:
                await registration.store.close()

    def _serve_metrics(self) -> None:
        settings = self.settings
        self.http_endpoint = serve_endpoint("storage", self.metrics.registry, settings.metrics_host,
                                            settings.metrics_port, self.health, access=settings)

    def _stop_metrics(self) -> None:
        if self.http_endpoint is not None:
            self.http_endpoint.stop()
            self.http_endpoint = None
        self.metrics.unwatch()


async def run_forever(settings: StorageSettings) -> None:
    """Run a storage node until SIGINT or SIGTERM; print `storage listening on HOST:PORT` once up."""
    server = StorageServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        print(f"storage listening on {server.address}", flush=True)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.stop()
