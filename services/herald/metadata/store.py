"""The MetadataStore interface every backend implements (herald.metadata.backends picks one by URL).

Keys are '/'-separated strings; values are bytes. Every key has a version that starts at 1 and
grows by one on each put, so writers can compare-and-set. Ephemeral keys belong to a session
lease: they vanish when the lease expires (its owner stopped renewing it) or is revoked.
"""

from __future__ import annotations

import abc
import asyncio
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Literal

from herald.common.errors import BadVersionError, HeraldError, InvalidArgumentError, MetadataError

# put(expected_version=NOT_EXISTS) creates the key only if it is absent.
NOT_EXISTS = 0


class LeaseExpiredError(HeraldError):
    """The lease named in a put is unknown or expired."""


@dataclass(frozen=True, slots=True)
class Versioned:
    value: bytes
    version: int
    lease_id: int = 0  # 0: a persistent key


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    key: str
    value: bytes | None  # None for a delete
    version: int  # the new version for a put, 0 for a delete


def check_put_arguments(expected_version: int | None, lease_id: int) -> None:
    """Argument checks every backend's put makes before touching storage."""
    if expected_version is not None and expected_version < 0:
        raise InvalidArgumentError(
            f"expected_version {expected_version} is invalid: use None, 0 (absent) or a version >= 1"
        )
    if lease_id < 0:
        raise InvalidArgumentError(f"lease id {lease_id} is invalid: use 0 (persistent) or a granted lease")


def check_delete_arguments(expected_version: int | None) -> None:
    if expected_version is not None and expected_version < 0:
        raise InvalidArgumentError(f"expected_version {expected_version} is invalid: use None or a version >= 1")


def check_lease_ttl(ttl: float) -> None:
    if not ttl > 0:
        raise InvalidArgumentError(f"lease ttl {ttl} is invalid: it must be > 0 seconds")


class MetadataStore(abc.ABC):
    """Async key-value store with versions, leases and watches."""

    async def start(self) -> None:
        """Connect / open; idempotent."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and background tasks; idempotent."""

    @abc.abstractmethod
    async def get(self, key: str) -> Versioned | None:
        """The key's value and version, or None when absent."""

    @abc.abstractmethod
    async def put(
        self, key: str, value: bytes, *, expected_version: int | None = None, lease_id: int = 0
    ) -> int:
        """Store value and return the new version.

        expected_version None: unconditional; NOT_EXISTS (0): only if the key is absent; n > 0:
        only if the current version is n. A mismatch raises BadVersionError and changes nothing.
        lease_id > 0 makes the key ephemeral (bound to that lease); an unknown or expired lease
        raises LeaseExpiredError.
        """

    @abc.abstractmethod
    async def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        """Delete the key; False when it was absent. A version mismatch raises BadVersionError."""

    @abc.abstractmethod
    async def list(self, prefix: str) -> dict[str, Versioned]:
        """Every key starting with prefix, in key order."""

    @abc.abstractmethod
    async def grant_lease(self, ttl: float) -> int:
        """A new session lease (> 0) that expires ttl seconds after its last renewal."""

    @abc.abstractmethod
    async def keepalive(self, lease_id: int) -> bool:
        """Renew a lease; False when it already expired (its keys are gone)."""

    @abc.abstractmethod
    async def revoke_lease(self, lease_id: int) -> None:
        """End a lease now, deleting its ephemeral keys."""

    @abc.abstractmethod
    def watch(self, prefix: str) -> AsyncIterator[WatchEvent]:
        """Changes (puts, deletes, lease expiries) to keys under prefix, from now on.

        The watch is registered before this call returns; iterate it with `async for` and close it
        with `aclose()` (or break out of the loop).
        """

    async def compare_and_set(self, key: str, old: Versioned | None, value: bytes) -> int:
        """Replace `old` (as read earlier) with value; BadVersionError when someone else wrote first."""
        return await self.put(key, value, expected_version=old.version if old else NOT_EXISTS)

    async def ping(self) -> None:
        """Raise (MetadataError, HeraldTimeoutError) unless the store answers now: a read of a
        key nobody writes, for readiness checks."""
        await self.get("/health/ping")

    _allocation_locks: dict[str, asyncio.Lock] | None = None  # per counter key, made on first use

    async def allocate_id(self, counter_key: str) -> int:
        """A cluster-unique, increasing id (>= 1) from a counter key, by compare-and-set.

        Allocations of one process take turns: concurrent ones (a broker loading thousands of
        topics, each with a ledger and a producer name) would otherwise lose their compare-and-set
        to each other and retry, k at a time costing O(k²) store round trips. Only other processes'
        allocations can make one retry."""
        if self._allocation_locks is None:
            self._allocation_locks = {}
        async with self._allocation_locks.setdefault(counter_key, asyncio.Lock()):
            while True:
                current = await self.get(counter_key)
                next_id = int(current.value) + 1 if current else 1
                try:
                    await self.compare_and_set(counter_key, current, str(next_id).encode())
                    return next_id
                except BadVersionError:
                    continue


class WatchHub:
    """Fans a backend's change events out to its open watches (for backends, not callers).

    Each watch buffers at most `capacity` events: one that falls further behind ends with a
    MetadataError rather than growing without bound or silently dropping events.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        # Weak, so a watch dropped without being iterated or closed does not linger here.
        self._watches: weakref.WeakSet[_Watch] = weakref.WeakSet()

    def watch(self, prefix: str, *, after: int = 0) -> AsyncGenerator[WatchEvent, None]:
        """A watch on prefix; it skips events published with a sequence number <= after."""
        watch = _Watch(prefix, self._capacity, after)
        self._watches.add(watch)  # registered now, before the first iteration
        return self._iterate(watch)

    async def _iterate(self, watch: _Watch) -> AsyncGenerator[WatchEvent, None]:
        try:
            while (event := await watch.next()) is not None:
                yield event
        finally:
            self._watches.discard(watch)

    def publish(self, events: Iterable[WatchEvent], *, seq: int = 0) -> None:
        """Deliver events to the watches whose prefix they match (seq: the events' sequence number)."""
        events = list(events)
        for watch in list(self._watches):
            if seq and seq <= watch.after:
                continue
            for event in events:
                if event.key.startswith(watch.prefix):
                    watch.offer(event)

    def fail_all(self, reason: str) -> None:
        """End every open watch with a MetadataError (e.g. events may have been lost)."""
        for watch in list(self._watches):
            watch.fail(MetadataError(f"watch on {watch.prefix!r} ended: {reason}"))
        self._watches.clear()

    def close_all(self) -> None:
        """End every open watch normally, after the events it already holds."""
        for watch in list(self._watches):
            watch.end()
        self._watches.clear()


class _Watch:
    def __init__(self, prefix: str, capacity: int, after: int) -> None:
        self.prefix = prefix
        self.after = after
        self._capacity = capacity
        self._events: deque[WatchEvent] = deque()
        self._error: HeraldError | None = None
        self._ended = False
        self._wakeup = asyncio.Event()

    def offer(self, event: WatchEvent) -> None:
        if self._ended or self._error is not None:
            return
        if len(self._events) >= self._capacity:
            self.fail(MetadataError(
                f"watch on {self.prefix!r} fell {self._capacity} events behind and was dropped: "
                "read it faster, or re-read the keys and watch again"
            ))
            return
        self._events.append(event)
        self._wakeup.set()

    def fail(self, error: HeraldError) -> None:
        if self._error is None and not self._ended:
            self._error = error
            self._wakeup.set()

    def end(self) -> None:
        self._ended = True
        self._wakeup.set()

    async def next(self) -> WatchEvent | None:
        """The next event; None once ended; raises once failed (after the events before it)."""
        while True:
            if self._events:
                return self._events.popleft()
            if self._error is not None:
                raise self._error
            if self._ended:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()
