"""The etcd metadata store: the production backend, a consensus store whose acknowledged writes survive
the loss of any minority of its members (Redis's asynchronous replication can drop the last one).

The client is generated from etcd's own v3 gRPC API (proto/etcd, vendored from etcd v3.4) and runs on
grpc.aio, which Herald already uses everywhere. We chose that over a third-party asyncio etcd client:
the maintained ones are thin wrappers over the same protos that pin their own grpc/protobuf versions
and hide the failover and error handling this store must get exactly right; the API we need (KV,
Txn, Lease, Watch) is small and stable across etcd 3.x.

Herald's contract maps onto etcd directly: a key's etcd `version` is Herald's version (1 on create,
+1 per put, reset by a delete); compare-and-set is a Txn comparing that version (create_revision 0
for "absent"); ephemeral keys are puts with an etcd lease; watches read etcd's revisioned history,
so one resumes after a lost connection from the last revision it saw, on any member, losing nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncGenerator, Awaitable, Callable

import grpc
from grpc import aio

from herald.api.etcd.etcdserverpb import rpc_pb2 as rpc
from herald.api.etcd.mvccpb import kv_pb2
from herald.common.errors import BadVersionError, MetadataError
from herald.metadata.etcd_client import REQUIRE_LEADER, EtcdCluster, LeaseNotFound, cancel_quietly, parse_endpoints
from herald.metadata.store import (
    NOT_EXISTS,
    LeaseExpiredError,
    MetadataStore,
    Versioned,
    WatchEvent,
    WatchHub,
    check_delete_arguments,
    check_lease_ttl,
    check_put_arguments,
)

log = logging.getLogger(__name__)

_LIST_PAGE = 1000  # keys per Range of a list, all read at one revision
_WATCH_BACKOFF_MAX = 2.0


class EtcdMetadataStore(MetadataStore):
    """MetadataStore on an etcd v3 cluster (`etcd://h1:p1,h2:p2,...`); call `await start()` first.

    Every key lives under `namespace` (a key prefix), so several clusters or tests can share one
    etcd. Lease TTLs are whole seconds in etcd: a shorter one is rounded up, and etcd raises it to
    its own minimum (1.5 election timeouts). Writes are not retried when their outcome is unknown.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "/herald/",
        timeout: float = 5.0,
        watch_capacity: int = 10_000,
    ) -> None:
        self._cluster = EtcdCluster(parse_endpoints(url), timeout)
        self._prefix = namespace.encode()
        self._watch_capacity = watch_capacity
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        self._watches: dict[asyncio.Task[None], WatchHub] = {}
        self._seen_revision = 0  # the newest store revision in any reply so far

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._start_lock:
            if self._closed:
                raise MetadataError(f"metadata store on {self._cluster.where} is closed: open a new one")
            if self._started:
                return
            self._cluster.open()
            self._started = True
            try:
                await self.get("/health/ping")  # also learns the current revision, where watches start
            except Exception as exc:
                self._started = False
                await self._cluster.close()
                raise MetadataError(
                    f"cannot connect to the metadata store at {self._cluster.where}: {exc}; "
                    "is etcd running there?"
                ) from exc

    async def close(self) -> None:
        async with self._start_lock:
            if self._closed:
                return
            self._closed = True
            if not self._started:
                return
            watches, self._watches = self._watches, {}
            for task, hub in watches.items():
                await cancel_quietly(task)
                hub.close_all()
            await self._cluster.close()

    # -- operations ---------------------------------------------------------------------------------

    async def get(self, key: str) -> Versioned | None:
        self._check_open()
        reply = await self._cluster.call("get", self._range(rpc.RangeRequest(key=self._key(key))), retry="always")
        self._saw(reply.header)
        return _versioned(reply.kvs[0]) if reply.kvs else None

    async def put(
        self, key: str, value: bytes, *, expected_version: int | None = None, lease_id: int = 0
    ) -> int:
        check_put_arguments(expected_version, lease_id)
        self._check_open()
        full = self._key(key)
        request = rpc.TxnRequest(
            compare=_compare_version(full, expected_version),
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=full, value=bytes(value), lease=lease_id,
                                                               prev_kv=True))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=full))],
        )
        try:
            reply = await self._txn("put", request, cas=expected_version is not None)
        except LeaseNotFound as exc:
            raise LeaseExpiredError(
                f"lease {lease_id} is unknown or expired, so {key!r} was not written: "
                "grant a new lease and create the session's keys again"
            ) from exc
        if not reply.succeeded:
            raise BadVersionError(_mismatch(key, expected_version or 0, _found(reply)))
        previous = reply.responses[0].response_put.prev_kv
        return previous.version + 1 if previous.key else 1

    async def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        check_delete_arguments(expected_version)
        self._check_open()
        full = self._key(key)
        reply = await self._txn("delete", cas=expected_version is not None, request=rpc.TxnRequest(
            compare=_compare_version(full, expected_version),
            success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=full))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=full))],
        ))
        if reply.succeeded:
            return reply.responses[0].response_delete_range.deleted > 0
        current = _found(reply)
        if current == 0:
            return False  # absent: as for an unconditional delete, whatever version was expected
        raise BadVersionError(_mismatch(key, expected_version or 0, current))

    async def list(self, prefix: str) -> dict[str, Versioned]:
        self._check_open()
        start, end = self._key(prefix), _prefix_end(self._key(prefix))
        found: dict[str, Versioned] = {}
        revision = 0  # every page after the first reads the first one's revision: one snapshot
        while True:
            request = rpc.RangeRequest(key=start, range_end=end, limit=_LIST_PAGE, revision=revision)
            reply = await self._cluster.call("list", self._range(request), retry="always")
            self._saw(reply.header)
            revision = revision or reply.header.revision
            for kv in reply.kvs:
                found[self._unkey(kv.key)] = _versioned(kv)
            if not reply.more or not reply.kvs:
                return found
            start = reply.kvs[-1].key + b"\0"

    async def grant_lease(self, ttl: float) -> int:
        check_lease_ttl(ttl)
        self._check_open()
        # A retried grant at worst leaves an unused lease behind, which expires on its own.
        reply = await self._cluster.call(
            "grant_lease",
            lambda m, t: self._cluster.lease(m).LeaseGrant(rpc.LeaseGrantRequest(TTL=math.ceil(ttl)), timeout=t,
                                                           metadata=REQUIRE_LEADER),
            retry="always",
        )
        self._saw(reply.header)
        if reply.error:
            raise MetadataError(f"metadata grant_lease failed on {self._cluster.where}: {reply.error}")
        return int(reply.ID)

    async def keepalive(self, lease_id: int) -> bool:
        self._check_open()

        async def renew(member: int, left: float) -> rpc.LeaseKeepAliveResponse:
            call = self._cluster.lease(member).LeaseKeepAlive(iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]),
                                                              timeout=left, metadata=REQUIRE_LEADER)
            try:
                async for reply in call:
                    return reply
            finally:
                call.cancel()
            raise MetadataError(f"metadata keepalive: {self._cluster.where} closed the stream unanswered")

        reply = await self._cluster.call("keepalive", renew, retry="always")
        self._saw(reply.header)
        return reply.TTL > 0  # etcd answers TTL 0 for a lease it no longer has

    async def revoke_lease(self, lease_id: int) -> None:
        self._check_open()
        try:
            reply = await self._cluster.call(
                "revoke_lease",
                lambda m, t: self._cluster.lease(m).LeaseRevoke(rpc.LeaseRevokeRequest(ID=lease_id), timeout=t,
                                                                metadata=REQUIRE_LEADER),
                retry="always",  # revoking twice is revoking once
            )
            self._saw(reply.header)
        except LeaseNotFound:
            return

    def watch(self, prefix: str) -> AsyncGenerator[WatchEvent, None]:
        self._check_open()
        # Changes up to the newest revision this process has seen happened before this call.
        hub = WatchHub(self._watch_capacity)
        events = hub.watch(prefix)
        task = asyncio.create_task(self._follow(prefix, self._seen_revision + 1, hub),
                                   name=f"metadata-watch {prefix!r}")
        self._watches[task] = hub
        task.add_done_callback(lambda done: self._watches.pop(done, None))
        return self._iterate(events, task)

    # -- plumbing -----------------------------------------------------------------------------------

    def _key(self, key: str) -> bytes:
        return self._prefix + key.encode()

    def _unkey(self, key: bytes) -> str:
        return key[len(self._prefix):].decode()

    def _saw(self, header: rpc.ResponseHeader) -> None:
        self._seen_revision = max(self._seen_revision, header.revision)

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataError(f"metadata store on {self._cluster.where} is closed: open a new one")
        if not self._started:
            raise MetadataError(
                f"metadata store on {self._cluster.where} is not started: await store.start() first"
            )

    def _range(self, request: rpc.RangeRequest) -> Callable[[int, float], Awaitable[rpc.RangeResponse]]:
        def attempt(member: int, left: float) -> Awaitable[rpc.RangeResponse]:
            return self._cluster.kv(member).Range(request, timeout=left, metadata=REQUIRE_LEADER)

        return attempt

    async def _txn(self, op: str, request: rpc.TxnRequest, *, cas: bool) -> rpc.TxnResponse:
        unknown: list[str] = []
        reply = await self._cluster.call(
            op, lambda m, t: self._cluster.kv(m).Txn(request, timeout=t, metadata=REQUIRE_LEADER),
            retry="cas" if cas else "not-sent", unknown=unknown,
        )
        self._saw(reply.header)
        if unknown and not reply.succeeded:
            # An earlier attempt may have applied and be the write the compare now fails on.
            raise MetadataError(
                f"metadata {op} on {self._cluster.where}: an attempt's outcome is unknown ({unknown[0]}) and "
                "the retry found the key changed, perhaps by that attempt; re-read it before retrying"
            )
        return reply

    async def _iterate(
        self, events: AsyncGenerator[WatchEvent, None], task: asyncio.Task[None]
    ) -> AsyncGenerator[WatchEvent, None]:
        try:
            async for event in events:
                yield event
        finally:
            # No await here: on Python 3.11 an await in an async generator's finally during aclose()
            # leaves it marked running, so the next anext() fails instead of ending. close() awaits
            # the cancelled task; the hub's generator is finalized with this one.
            task.cancel()

    async def _follow(self, prefix: str, revision: int, hub: WatchHub) -> None:
        """Feed hub with the changes under prefix from revision on, across members and reconnects."""
        key = self._key(prefix)
        member = self._cluster.current
        backoff = 0.05
        while True:
            try:
                create = rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                    key=key, range_end=_prefix_end(key), start_revision=revision))
                # The create request is written, not fed from an async generator: a generator parked in
                # gRPC's request-consuming task is left pending when the call is dropped, and asyncio
                # then logs "Task was destroyed but it is pending" and a failed aclose() at ERROR.
                call = self._cluster.watch(member).Watch(None, metadata=REQUIRE_LEADER)
                try:
                    await call.write(create)
                    async for reply in call:
                        if reply.compact_revision:
                            hub.fail_all(
                                f"etcd compacted its history up to revision {reply.compact_revision}, past "
                                f"revision {revision} the watch resumes from, so events may have been missed: "
                                "re-read the keys and watch again"
                            )
                            return
                        if reply.canceled:
                            log.warning("etcd member %s cancelled a watch: %s",
                                        self._cluster.endpoints[member], reply.cancel_reason)
                            break
                        hub.publish(self._event(e) for e in reply.events)
                        if reply.events:
                            revision = reply.events[-1].kv.mod_revision + 1
                        backoff = 0.05
                finally:
                    call.cancel()
            except aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.CANCELLED:
                    log.info("metadata watch on etcd member %s lost (%s): resuming from revision %d",
                             self._cluster.endpoints[member], exc.details(), revision)
            except asyncio.InvalidStateError:  # the call ended before the create request was written
                log.info("metadata watch on etcd member %s ended at once: resuming from revision %d",
                         self._cluster.endpoints[member], revision)
            member = self._cluster.next_member(member)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _WATCH_BACKOFF_MAX)

    def _event(self, event: kv_pb2.Event) -> WatchEvent:
        key = self._unkey(event.kv.key)
        if event.type == kv_pb2.Event.DELETE:
            return WatchEvent("delete", key, None, 0)
        return WatchEvent("put", key, event.kv.value, event.kv.version)


def _versioned(kv: kv_pb2.KeyValue) -> Versioned:
    return Versioned(kv.value, kv.version, kv.lease)


def _compare_version(key: bytes, expected: int | None) -> list[rpc.Compare]:
    if expected is None:
        return []
    if expected == NOT_EXISTS:
        return [rpc.Compare(key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0)]
    return [rpc.Compare(key=key, target=rpc.Compare.VERSION, result=rpc.Compare.EQUAL, version=expected)]


def _found(reply: rpc.TxnResponse) -> int:
    """The key's version read by a failed txn's Range (0 when absent)."""
    kvs = reply.responses[0].response_range.kvs
    return kvs[0].version if kvs else 0


def _prefix_end(prefix: bytes) -> bytes:
    """The first key after every key starting with prefix (etcd's range_end for a prefix)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\0"  # every key
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _mismatch(key: str, expected: int, current: int) -> str:
    found = f"version {current}" if current else "no key"
    wanted = f"version {expected}" if expected else "no key"
    return f"{key!r} changed under you: expected {wanted}, found {found}; re-read it and retry"
