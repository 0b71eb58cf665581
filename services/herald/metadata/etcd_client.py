"""The etcd store's connection to its cluster: one gRPC channel per member, calls with a deadline that
fail over to another member when one is unreachable, and etcd's errors turned into Herald's.

Kept apart from herald.metadata.etcd, which maps the MetadataStore contract onto etcd's KV, lease and
watch services and knows nothing of channels or members.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from grpc import aio

from herald.api.etcd.etcdserverpb import rpc_pb2_grpc
from herald.common.errors import HeraldTimeoutError, InvalidArgumentError, MetadataError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Writes are retried on another member only when etcd cannot have applied them: the channel never
# reached the member, or the member refused the request before proposing it (no leader). Any other
# UNAVAILABLE (a reply lost mid-call, "request timed out") leaves the outcome unknown. Calls carry
# etcd's require-leader header, so a member that knows it has no leader refuses before proposing.
_NOT_SENT_MARKERS = ("failed to connect", "connection refused", "etcdserver: no leader", "dns resolution failed")
_MIN_ATTEMPT = 1.0  # seconds: the least an attempt gets before the call moves to another member
# A member without a leader refuses calls carrying this (ErrNoLeader) and cancels such watches, so
# they move to a member of the majority instead of waiting on a partitioned one.
REQUIRE_LEADER = (("hasleader", "true"),)
_LEASE_NOT_FOUND = "requested lease not found"
_RETRY_PAUSE = 0.1  # between rounds over every member, while a new leader is being elected


class LeaseNotFound(Exception):
    """etcd answered NOT_FOUND for a lease (unknown, expired or revoked): the store maps it to
    LeaseExpiredError or to False/no-op as the operation's contract says."""


def parse_endpoints(url: str) -> list[str]:
    """`etcd://h1:p1,h2:p2` -> ["h1:p1", "h2:p2"]."""
    if not url.startswith("etcd://"):
        raise InvalidArgumentError(f"etcd URL {url!r} is invalid: use etcd://host:port[,host:port...]")
    endpoints = [part.strip() for part in url.removeprefix("etcd://").rstrip("/").split(",")]
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(
                f"etcd URL {url!r} is invalid: {endpoint!r} is not host:port; "
                "use etcd://host:port[,host:port...]"
            )
    return endpoints


class EtcdCluster:
    """Channels to every member of one etcd cluster; `call` runs an RPC on the member last known to
    answer, moving on to the next one on UNAVAILABLE until the operation's deadline."""

    def __init__(self, endpoints: list[str], timeout: float) -> None:
        self.endpoints = endpoints
        self.timeout = timeout
        self._channels: list[aio.Channel] = []
        self._current = 0  # the member calls go to first

    @property
    def where(self) -> str:
        return "etcd at " + ",".join(self.endpoints)

    def open(self) -> None:
        # Keepalive pings notice a member that vanished without closing its connections.
        options = [("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
                   ("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        self._channels = [aio.insecure_channel(endpoint, options=options) for endpoint in self.endpoints]

    async def close(self) -> None:
        channels, self._channels = self._channels, []
        for channel in channels:
            await channel.close(None)

    def kv(self, member: int) -> rpc_pb2_grpc.KVAsyncStub:
        return rpc_pb2_grpc.KVStub(self._channels[member])  # type: ignore[return-value]

    def lease(self, member: int) -> rpc_pb2_grpc.LeaseAsyncStub:
        return rpc_pb2_grpc.LeaseStub(self._channels[member])  # type: ignore[return-value]

    def watch(self, member: int) -> rpc_pb2_grpc.WatchAsyncStub:
        return rpc_pb2_grpc.WatchStub(self._channels[member])  # type: ignore[return-value]

    def next_member(self, after: int) -> int:
        return (after + 1) % len(self.endpoints)

    @property
    def current(self) -> int:
        return self._current

    async def call(self, op: str, rpc: Callable[[int, float], Awaitable[T]], *, retry: str,
                   unknown: list[str] | None = None) -> T:
        """rpc(member, seconds left for this attempt) on the current member, failing over to the next
        on UNAVAILABLE or a stalled attempt, until the operation's deadline.

        retry "always": reads and lease calls, which may run twice. "not-sent": a write that could
        apply twice moves on only when the member cannot have applied it; otherwise the caller
        hears that the outcome is unknown. "cas": a compare-and-set, which can never apply twice
        (etcd evaluates its compare when it applies it), is retried too, and each failure whose
        outcome was unknown is appended to `unknown`, so the caller can tell a lost race from its
        own earlier attempt having won."""
        deadline = time.monotonic() + self.timeout
        member = self._current
        tried = 0
        last: str = ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._timed_out(op, last)
            try:
                # An attempt gets part of the budget, so one stuck on a member that lost its leader
                # leaves time to try another.
                result = await rpc(member, min(left, max(self.timeout / 2, _MIN_ATTEMPT)))
                self._current = member
                return result
            except aio.AioRpcError as exc:
                details = exc.details() or ""
                code = exc.code()
                if code == grpc.StatusCode.NOT_FOUND and _LEASE_NOT_FOUND in details:
                    raise LeaseNotFound(details) from exc
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise self.failed(op, exc) from exc
                not_sent = code == grpc.StatusCode.UNAVAILABLE and any(
                    marker in details.lower() for marker in _NOT_SENT_MARKERS)
                if retry == "not-sent" and not not_sent:
                    self._current = self.next_member(member)  # the next call tries elsewhere
                    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                        raise self._timed_out(op, details) from exc
                    raise self.failed(op, exc) from exc
                if retry == "cas" and not not_sent and unknown is not None:
                    unknown.append(details)
                log.info("metadata %s: etcd member %s did not answer (%s: %s), trying the next one",
                         op, self.endpoints[member], code.name, details)
                last = f"{code.name}: {details}"
                member = self.next_member(member)
                tried += 1
                if tried % len(self.endpoints) == 0:
                    # Every member failed once: pause while they elect a leader or come back.
                    await asyncio.sleep(min(_RETRY_PAUSE, max(0.0, deadline - time.monotonic())))

    def _timed_out(self, op: str, last: str) -> HeraldTimeoutError:
        cause = f" (last error: {last})" if last else ""
        return HeraldTimeoutError(
            f"metadata {op} timed out after {self.timeout}s: no member of {self.where} answered{cause}; "
            "the operation may or may not have happened, so re-read before retrying"
        )

    def failed(self, op: str, exc: aio.AioRpcError) -> MetadataError:
        return MetadataError(
            f"metadata {op} failed on {self.where}: {exc.code().name}: {exc.details()}; "
            "the operation may or may not have happened, so re-read before retrying"
        )


async def cancel_quietly(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
