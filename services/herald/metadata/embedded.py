"""The embedded metadata store: one SQLite file, for standalone mode (a single process).

Every write commits (WAL, synchronous=FULL) before it returns; sqlite3 runs on one worker thread so
the event loop never waits on a disk sync. Watches and leases are in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from herald.common.errors import BadVersionError, MetadataError
from herald.common.tasks import cancel_and_wait
from herald.metadata.store import (
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

T = TypeVar("T")
# Spelled out because inside the class `list` names the list() method.
_Events = list[WatchEvent]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key      TEXT PRIMARY KEY,
    value    BLOB NOT NULL,
    version  INTEGER NOT NULL,
    lease_id INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_by_lease ON kv (lease_id) WHERE lease_id != 0;
-- AUTOINCREMENT so that a lease id is never handed out twice, even across restarts.
CREATE TABLE IF NOT EXISTS leases (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    ttl        REAL NOT NULL,
    granted_at REAL NOT NULL  -- wall clock, for operators reading the file
);
"""


class EmbeddedMetadataStore(MetadataStore):
    """MetadataStore on a SQLite file (or ":memory:"); only one process may open a file at a time.

    Leases live only as long as the process that granted them: at start every lease left in the
    file is treated as expired and its keys deleted, since its owner died with the previous
    process. Lease deadlines are therefore kept in memory on the monotonic clock, and keepalive
    costs no disk write. A put with lease_id 0 stores a persistent key, even over an ephemeral
    one. Call `await start()` before any other operation.
    """

    def __init__(self, path: str, *, reap_interval: float = 0.5, watch_capacity: int = 10_000) -> None:
        self._path = path
        self._reap_interval = reap_interval
        self._hub = WatchHub(watch_capacity)
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._reaper_wakeup = asyncio.Event()
        # The worker thread's state: nothing on the event loop touches these.
        self._db: sqlite3.Connection | None = None
        self._deadlines: dict[int, float] = {}  # lease id -> time.monotonic() deadline
        self._ttls: dict[int, float] = {}

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._start_lock:
            if self._closed:
                raise MetadataError(f"metadata store {self._path} is closed: open a new one")
            if self._started:
                return
            self._loop = asyncio.get_running_loop()
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="herald-metadata-sqlite")
            try:
                await self._loop.run_in_executor(self._executor, self._open)
            except BaseException:
                self._executor.shutdown(wait=False)
                self._executor = None
                raise
            self._reaper = asyncio.create_task(self._reap_loop(), name=f"metadata-reaper {self._path}")
            self._started = True

    async def close(self) -> None:
        async with self._start_lock:
            if self._closed:
                return
            self._closed = True
            if not self._started:
                return
            assert self._reaper is not None and self._executor is not None and self._loop is not None
            await cancel_and_wait(self._reaper)
            # Queued behind every operation already submitted, so they finish first.
            await self._loop.run_in_executor(self._executor, self._close_db)
            self._executor.shutdown(wait=False)  # idle by now: its thread exits at once
            self._hub.close_all()

    # -- operations ---------------------------------------------------------------------------------

    async def get(self, key: str) -> Versioned | None:
        return await self._run("get", self._get, key)

    async def put(
        self, key: str, value: bytes, *, expected_version: int | None = None, lease_id: int = 0
    ) -> int:
        check_put_arguments(expected_version, lease_id)
        return await self._run("put", self._put, key, bytes(value), expected_version, lease_id)

    async def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        check_delete_arguments(expected_version)
        return await self._run("delete", self._delete, key, expected_version)

    async def list(self, prefix: str) -> dict[str, Versioned]:
        return await self._run("list", self._list, prefix)

    async def grant_lease(self, ttl: float) -> int:
        check_lease_ttl(ttl)
        lease_id = await self._run("grant_lease", self._grant, float(ttl))
        self._reaper_wakeup.set()  # it may now have an earlier deadline to wait for
        return lease_id

    async def keepalive(self, lease_id: int) -> bool:
        return await self._run("keepalive", self._keepalive, lease_id)

    async def revoke_lease(self, lease_id: int) -> None:
        await self._run("revoke_lease", self._revoke, lease_id)

    def watch(self, prefix: str) -> AsyncGenerator[WatchEvent, None]:
        self._check_open()
        return self._hub.watch(prefix)

    # -- plumbing on the event loop -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataError(f"metadata store {self._path} is closed: open a new one")
        if not self._started:
            raise MetadataError(f"metadata store {self._path} is not started: await store.start() first")

    async def _run(self, op: str, fn: Callable[..., T], *args: object) -> T:
        self._check_open()
        assert self._loop is not None
        try:
            return await self._loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except sqlite3.Error as exc:
            raise MetadataError(f"metadata {op} failed on {self._path}: {exc}") from exc

    async def _reap_loop(self) -> None:
        assert self._loop is not None
        while not self._closed:
            try:
                delay = await self._loop.run_in_executor(self._executor, self._reap_expired)
            except sqlite3.Error:
                log.exception("reaping expired leases in %s failed; retrying", self._path)
                delay = self._reap_interval
            # Sleep until the next deadline (or a new lease), capped so a stuck clock cannot stall us.
            self._reaper_wakeup.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel from close().
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(max(delay, 0.005), self._reap_interval)):
                    await self._reaper_wakeup.wait()

    # -- the worker thread's side: every method below runs on it ------------------------------------

    def _open(self) -> None:
        db: sqlite3.Connection | None = None
        try:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            # timeout=0: a file held by another process fails at once instead of waiting for it.
            db = sqlite3.connect(self._path, timeout=0, isolation_level=None, check_same_thread=False)
            # Exclusive before WAL: no shared-memory index, and no second process can open the file.
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(_SCHEMA)  # idempotent, so its own transaction is fine
            self._db = db
            with self._transaction():
                # Leases die with their process: the previous process's sessions are gone.
                db.execute("DELETE FROM kv WHERE lease_id != 0")
                db.execute("DELETE FROM leases")
        except (sqlite3.Error, OSError) as exc:
            if db is not None:
                db.close()
            self._db = None
            if "locked" in str(exc):
                raise MetadataError(
                    f"metadata file {self._path} is in use by another process (a second standalone "
                    "on the same data directory?): stop it, or use another directory"
                ) from exc
            raise MetadataError(
                f"cannot open metadata file {self._path}: {exc}; check that it is a Herald metadata "
                "file and that the directory is writable"
            ) from exc

    def _close_db(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        assert db is not None
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _emit(self, events: _Events) -> None:
        """Hand committed changes to the watchers, in commit order (the loop runs callbacks FIFO)."""
        if events:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._hub.publish, events)

    def _reap_expired(self) -> float:
        """Delete the keys of every lease past its deadline; the seconds until the next deadline."""
        now = time.monotonic()
        expired = [lease for lease, deadline in self._deadlines.items() if deadline <= now]
        if expired:
            events: _Events = []
            with self._transaction():
                for lease in expired:
                    events += self._end_lease(lease)
            for lease in expired:
                self._forget(lease)
            self._emit(events)
        return min(self._deadlines.values(), default=now + self._reap_interval) - now

    def _end_lease(self, lease_id: int) -> _Events:
        assert self._db is not None
        keys = [row[0] for row in self._db.execute(
            "SELECT key FROM kv WHERE lease_id = ? ORDER BY key", (lease_id,)
        )]
        self._db.execute("DELETE FROM kv WHERE lease_id = ?", (lease_id,))
        self._db.execute("DELETE FROM leases WHERE id = ?", (lease_id,))
        return [WatchEvent("delete", key, None, 0) for key in keys]

    def _forget(self, lease_id: int) -> None:
        self._deadlines.pop(lease_id, None)
        self._ttls.pop(lease_id, None)

    def _get(self, key: str) -> Versioned | None:
        self._reap_expired()
        assert self._db is not None
        row = self._db.execute("SELECT value, version, lease_id FROM kv WHERE key = ?", (key,)).fetchone()
        return Versioned(bytes(row[0]), row[1], row[2]) if row else None

    def _put(self, key: str, value: bytes, expected_version: int | None, lease_id: int) -> int:
        self._reap_expired()
        if lease_id and lease_id not in self._deadlines:
            raise LeaseExpiredError(
                f"lease {lease_id} is unknown or expired, so {key!r} was not written: "
                "grant a new lease and create the session's keys again"
            )
        with self._transaction() as db:
            row = db.execute("SELECT version FROM kv WHERE key = ?", (key,)).fetchone()
            current = row[0] if row else 0
            if expected_version is not None and expected_version != current:
                raise BadVersionError(_mismatch(key, expected_version, current))
            version = current + 1
            db.execute(
                "INSERT INTO kv (key, value, version, lease_id) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version, "
                "lease_id = excluded.lease_id",
                (key, value, version, lease_id),
            )
        self._emit([WatchEvent("put", key, value, version)])
        return version

    def _delete(self, key: str, expected_version: int | None) -> bool:
        self._reap_expired()
        with self._transaction() as db:
            row = db.execute("SELECT version FROM kv WHERE key = ?", (key,)).fetchone()
            if row is None:
                return False
            if expected_version is not None and expected_version != row[0]:
                raise BadVersionError(_mismatch(key, expected_version, row[0]))
            db.execute("DELETE FROM kv WHERE key = ?", (key,))
        self._emit([WatchEvent("delete", key, None, 0)])
        return True

    def _list(self, prefix: str) -> dict[str, Versioned]:
        self._reap_expired()
        assert self._db is not None
        end = _prefix_end(prefix)
        # A range on the primary key, not LIKE: SQLite's BINARY order on UTF-8 is code point order.
        if end is None:
            rows = self._db.execute(
                "SELECT key, value, version, lease_id FROM kv WHERE key >= ? ORDER BY key", (prefix,)
            )
        else:
            rows = self._db.execute(
                "SELECT key, value, version, lease_id FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                (prefix, end),
            )
        return {key: Versioned(bytes(value), version, lease) for key, value, version, lease in rows}

    def _grant(self, ttl: float) -> int:
        self._reap_expired()
        with self._transaction() as db:
            cursor = db.execute("INSERT INTO leases (ttl, granted_at) VALUES (?, ?)", (ttl, time.time()))
            lease_id = cursor.lastrowid
        assert lease_id is not None
        self._deadlines[lease_id] = time.monotonic() + ttl
        self._ttls[lease_id] = ttl
        return lease_id

    def _keepalive(self, lease_id: int) -> bool:
        self._reap_expired()
        if lease_id not in self._deadlines:
            return False
        self._deadlines[lease_id] = time.monotonic() + self._ttls[lease_id]
        return True

    def _revoke(self, lease_id: int) -> None:
        self._reap_expired()
        if lease_id not in self._deadlines:
            return
        with self._transaction():
            events = self._end_lease(lease_id)
        self._forget(lease_id)
        self._emit(events)


def _mismatch(key: str, expected: int, current: int) -> str:
    found = f"version {current}" if current else "no key"
    wanted = f"version {expected}" if expected else "no key"
    return f"{key!r} changed under you: expected {wanted}, found {found}; re-read it and retry"


def _prefix_end(prefix: str) -> str | None:
    """The smallest string above every string starting with prefix; None when there is none."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            following = last + 1
            if 0xD800 <= following <= 0xDFFF:  # surrogates are not encodable: skip them
                following = 0xE000
            return "".join(chars) + chr(following)
    return None
