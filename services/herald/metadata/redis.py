"""The Redis metadata store: the cluster backend, shared by every broker and lookup process.

Every write is one Lua script (atomic compare-and-set, lease checks, watch events together); lease
expiry uses the Redis server's clock, so processes with skewed clocks still agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from herald.common.errors import BadVersionError, HeraldTimeoutError, InvalidArgumentError, MetadataError
from herald.common.failure_streak import FailureStreak
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

# Spelled out because inside the class `list` names the list() method.
_Reply = list[Any]

# Key layout under the namespace NS (default "herald:"):
#   NS k:<key>      hash {v: value, ver: version, lease: lease id or 0}
#   NS keys         zset of every key, all scores 0, so ZRANGEBYLEX lists a prefix in key order
#   NS leases       zset lease id -> expiry, in ms of the Redis server's clock
#   NS lease-ttl    hash lease id -> ttl in ms
#   NS lease:<id>   set of keys put with the lease (may hold keys since rebound: checked on use)
#   NS lease-seq    counter behind lease ids
#   NS clock        the Redis server's time (ms) at the latest script: a gap over _OUTAGE_MS is an outage
#   NS event-seq    counter numbering change events
#   NS events       pub/sub channel of changes: "<seq>\n<kind>\n<version>\n<len(key)>\n<key><value>"
# Scripts build key names from the namespace, so this needs one Redis, not a Redis Cluster.
# Every script replies {event-seq, ...}: the newest change its caller may have seen, so a watch
# opened afterwards can skip older events still in flight on the pub/sub connection.
# A store silent this long (no script ran, while every instance's reaper runs one each reap interval)
# was away: leases get the time back (see now_ms below).
_OUTAGE_MS = 1000
# Reads run again on a dead connection, up to this many times in all (each try takes a pooled
# connection; one that failed reconnects on its next use). Writes never: one could apply twice.
_READ_ONLY = frozenset({"get", "list"})
_READ_ATTEMPTS = 3

_PRELUDE = """
local ns = ARGV[1]
local INDEX = ns .. 'keys'
local LEASES = ns .. 'leases'
local TTLS = ns .. 'lease-ttl'
local SEQ = ns .. 'event-seq'
local CHANNEL = ns .. 'events'

local CLOCK = ns .. 'clock'

-- The Redis server's time, in ms; every script that checks a lease calls it once, first. Each store instance's reaper
-- stamps NS clock at least every reap interval (as do writes; reads only look, to keep them out of
-- the AOF), so while the store serves the stamp is never older than that. An older one means the
-- store itself was away (paused, restarting, unreachable): no lease holder could renew then, so
-- every lease gets that time back rather than expiring for it (ZooKeeper's and etcd's new leaders
-- likewise renew every session and lease).
local function now_ms(stamp)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local last = tonumber(redis.call('GET', CLOCK) or '-1')
  local away = last >= 0 and now - last > {outage_ms}
  if away then
    local leases = redis.call('ZRANGE', LEASES, 0, -1, 'WITHSCORES')
    for i = 1, #leases, 2 do redis.call('ZADD', LEASES, tonumber(leases[i + 1]) + now - last, leases[i]) end
  end
  if now > last and (stamp or away or last < 0) then redis.call('SET', CLOCK, now) end
  return now
end
local function seq() return tonumber(redis.call('GET', SEQ) or '0') end
local function data_key(key) return ns .. 'k:' .. key end
local function lease_set(id) return ns .. 'lease:' .. id end
local function publish(kind, key, version, value)
  local n = redis.call('INCR', SEQ)
  redis.call('PUBLISH', CHANNEL,
    n .. '\\n' .. kind .. '\\n' .. version .. '\\n' .. string.len(key) .. '\\n' .. key .. (value or ''))
end
local function alive(id, now)
  local expiry = redis.call('ZSCORE', LEASES, id)
  return expiry ~= false and tonumber(expiry) > now
end
local function end_lease(id)
  local keys = redis.call('SMEMBERS', lease_set(id))
  table.sort(keys)
  for _, key in ipairs(keys) do
    if redis.call('HGET', data_key(key), 'lease') == id then
      redis.call('DEL', data_key(key))
      redis.call('ZREM', INDEX, key)
      publish('delete', key, 0)
    end
  end
  redis.call('DEL', lease_set(id))
  redis.call('ZREM', LEASES, id)
  redis.call('HDEL', TTLS, id)
end
local function reap(now, limit)
  local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(expired) do end_lease(id) end
  return #expired
end
-- The key's version and lease; a key of an expired (not yet reaped) lease is reaped and absent.
local function current(key, now)
  local cur = redis.call('HMGET', data_key(key), 'ver', 'lease')
  if not cur[1] then return 0, '0' end
  if cur[2] ~= '0' and not alive(cur[2], now) then
    end_lease(cur[2])
    return 0, '0'
  end
  return tonumber(cur[1]), cur[2]
end
""".replace("{outage_ms}", str(_OUTAGE_MS))

# Writes first reap a few expired leases, so their delete events precede the write's own.
# Replies {seq, new version or -1 (bad version) or -2 (lease expired), current version}.
_PUT = _PRELUDE + """
local key, value, expected, lease = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now = now_ms(true)
reap(now, 16)
if lease ~= '0' and not alive(lease, now) then return {seq(), -2, 0} end
local version, old_lease = current(key, now)
if expected ~= '' and tonumber(expected) ~= version then return {seq(), -1, version} end
if old_lease ~= '0' and old_lease ~= lease then redis.call('SREM', lease_set(old_lease), key) end
if lease ~= '0' then redis.call('SADD', lease_set(lease), key) end
version = version + 1
redis.call('HSET', data_key(key), 'v', value, 'ver', version, 'lease', lease)
redis.call('ZADD', INDEX, 0, key)
publish('put', key, version, value)
return {seq(), version, version}
"""

# Replies {seq, 1 (deleted) or 0 (absent) or -1 (bad version), current version}.
_DELETE = _PRELUDE + """
local key, expected = ARGV[2], ARGV[3]
local now = now_ms(true)
reap(now, 16)
local version, lease = current(key, now)
if version == 0 then return {seq(), 0, 0} end
if expected ~= '' and tonumber(expected) ~= version then return {seq(), -1, version} end
if lease ~= '0' then redis.call('SREM', lease_set(lease), key) end
redis.call('DEL', data_key(key))
redis.call('ZREM', INDEX, key)
publish('delete', key, 0)
return {seq(), 1, version}
"""

# Reads only filter out keys of expired leases; the reaper deletes them.
# Replies {seq} when absent, else {seq, value, version, lease}.
_GET = _PRELUDE + """
local now = now_ms(false)
local r = redis.call('HMGET', data_key(ARGV[2]), 'v', 'ver', 'lease')
if not r[2] or (r[3] ~= '0' and not alive(r[3], now)) then return {seq()} end
return {seq(), r[1], r[2], r[3]}
"""

# Replies {seq, key, value, version, lease, key, ...}.
_LIST = _PRELUDE + """
local now = now_ms(false)
local out, live = {seq()}, {}
for _, key in ipairs(redis.call('ZRANGEBYLEX', INDEX, ARGV[2], ARGV[3])) do
  local r = redis.call('HMGET', data_key(key), 'v', 'ver', 'lease')
  if r[2] then
    local lease = r[3]
    if lease ~= '0' and live[lease] == nil then live[lease] = alive(lease, now) end
    if lease == '0' or live[lease] then
      out[#out + 1] = key
      out[#out + 1] = r[1]
      out[#out + 1] = r[2]
      out[#out + 1] = lease
    end
  end
end
return out
"""

_GRANT = _PRELUDE + """
local ttl = tonumber(ARGV[2])
local now = now_ms(true)
reap(now, 16)
local id = redis.call('INCR', ns .. 'lease-seq')
redis.call('ZADD', LEASES, now + ttl, id)
redis.call('HSET', TTLS, id, ttl)
return {seq(), id}
"""

_KEEPALIVE = _PRELUDE + """
local id = ARGV[2]
local now = now_ms(true)
local expiry = redis.call('ZSCORE', LEASES, id)
if not expiry then return {seq(), 0} end
if tonumber(expiry) <= now then
  end_lease(id)
  return {seq(), 0}
end
redis.call('ZADD', LEASES, now + tonumber(redis.call('HGET', TTLS, id)), id)
return {seq(), 1}
"""

_REVOKE = _PRELUDE + """
if redis.call('ZSCORE', LEASES, ARGV[2]) then end_lease(ARGV[2]) end
return {seq()}
"""

# Replies {seq, leases reaped, ms until the next lease expires or -1}.
_REAP = _PRELUDE + """
local now = now_ms(true)
local reaped = reap(now, tonumber(ARGV[2]))
local first = redis.call('ZRANGE', LEASES, 0, 0, 'WITHSCORES')
if first[2] then return {seq(), reaped, tonumber(first[2]) - now} end
return {seq(), reaped, -1}
"""

_REAP_BATCH = 100
_RECONNECT_BACKOFF_MAX = 5.0


class RedisMetadataStore(MetadataStore):
    """MetadataStore on one Redis server, shared by many processes; call `await start()` first.

    Every instance runs a reaper that deletes the keys of expired leases (whoever granted them)
    and a listener that feeds its watches from the namespace's pub/sub channel. A put with
    lease_id 0 stores a persistent key, even over an ephemeral one. Writes are not retried: a
    lost reply leaves the caller to re-read, since a retried put could apply twice (reads that
    meet a dead connection are, see `_call`). Durability is the Redis server's: run it with
    appendonly yes. While Redis itself is away (paused, restarting) leases do not run out: the
    time it was away is given back to every lease (see now_ms).
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "herald:",
        timeout: float = 5.0,
        reap_interval: float = 0.5,
        watch_capacity: int = 10_000,
    ) -> None:
        self._url = url
        self._namespace = namespace
        self._channel = f"{namespace}events".encode()
        self._timeout = timeout
        if not 0 < reap_interval <= _OUTAGE_MS / 2000:
            # The reapers' scripts are what tells a quiet store from one that was away.
            raise InvalidArgumentError(
                f"reap_interval must be in (0, {_OUTAGE_MS / 2000:g}] seconds, got {reap_interval}: a store "
                f"without a script for {_OUTAGE_MS / 1000:g}s counts as an outage that leases survive"
            )
        self._reap_interval = reap_interval
        parts = urlsplit(url)
        # Named in errors without the URL's password.
        self._where = parts.path if parts.scheme == "unix" else f"{parts.hostname}:{parts.port or 6379}"
        self._hub = WatchHub(watch_capacity)
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        self._client: aioredis.Redis | None = None
        self._pubsub: PubSub | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reaper_wakeup = asyncio.Event()
        self._scripts: dict[str, AsyncScript] = {}
        self._seen_seq = 0  # the newest event sequence number in any reply so far

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._start_lock:
            if self._closed:
                raise MetadataError(f"metadata store on redis at {self._where} is closed: open a new one")
            if self._started:
                return
            client = aioredis.Redis.from_url(
                self._url,
                socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout,
                socket_keepalive=True,
                retry=Retry(NoBackoff(), 0),
            )
            self._client = client
            self._scripts = {
                name: client.register_script(source)
                for name, source in (
                    ("put", _PUT), ("delete", _DELETE), ("get", _GET), ("list", _LIST),
                    ("grant_lease", _GRANT), ("keepalive", _KEEPALIVE), ("revoke_lease", _REVOKE),
                    ("reap", _REAP),
                )
            }
            try:
                self._pubsub = await self._subscribe()
            except (RedisError, OSError, TimeoutError) as exc:
                self._client = None
                await client.aclose()
                raise MetadataError(
                    f"cannot connect to the metadata store at redis {self._where}: {exc}; "
                    "is redis-server running there?"
                ) from exc
            self._tasks = [
                asyncio.create_task(self._listen(), name=f"metadata-watch {self._namespace}"),
                asyncio.create_task(self._reap_loop(), name=f"metadata-reaper {self._namespace}"),
            ]
            self._started = True

    async def close(self) -> None:
        async with self._start_lock:
            if self._closed:
                return
            self._closed = True
            if not self._started:
                return
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._tasks = []
            if self._pubsub is not None:
                await _close_quietly(self._pubsub)
                self._pubsub = None
            if self._client is not None:
                with contextlib.suppress(RedisError, OSError):
                    await self._client.aclose()
                self._client = None
            self._hub.close_all()

    # -- operations ---------------------------------------------------------------------------------

    async def get(self, key: str) -> Versioned | None:
        reply = await self._call("get", key)
        if not reply:
            return None
        value, version, lease = reply
        return Versioned(value, int(version), int(lease))

    async def put(
        self, key: str, value: bytes, *, expected_version: int | None = None, lease_id: int = 0
    ) -> int:
        check_put_arguments(expected_version, lease_id)
        expected = "" if expected_version is None else expected_version
        version, current = await self._call("put", key, bytes(value), expected, lease_id)
        if version == -1:
            raise BadVersionError(_mismatch(key, expected_version or 0, current))
        if version == -2:
            raise LeaseExpiredError(
                f"lease {lease_id} is unknown or expired, so {key!r} was not written: "
                "grant a new lease and create the session's keys again"
            )
        return int(version)

    async def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        check_delete_arguments(expected_version)
        expected = "" if expected_version is None else expected_version
        outcome, current = await self._call("delete", key, expected)
        if outcome == -1:
            raise BadVersionError(_mismatch(key, expected_version or 0, current))
        return bool(outcome)

    async def list(self, prefix: str) -> dict[str, Versioned]:
        if prefix:
            # No UTF-8 byte is 0xff, so every key starting with prefix sorts below prefix + 0xff.
            low, high = b"[" + prefix.encode(), b"(" + prefix.encode() + b"\xff"
        else:
            low, high = b"-", b"+"
        flat = await self._call("list", low, high)
        return {
            flat[i].decode(): Versioned(flat[i + 1], int(flat[i + 2]), int(flat[i + 3]))
            for i in range(0, len(flat), 4)
        }

    async def grant_lease(self, ttl: float) -> int:
        check_lease_ttl(ttl)
        (lease_id,) = await self._call("grant_lease", max(1, round(ttl * 1000)))
        self._reaper_wakeup.set()  # it may now have an earlier expiry to wait for
        return int(lease_id)

    async def keepalive(self, lease_id: int) -> bool:
        (renewed,) = await self._call("keepalive", lease_id)
        return bool(renewed)

    async def revoke_lease(self, lease_id: int) -> None:
        await self._call("revoke_lease", lease_id)

    def watch(self, prefix: str) -> AsyncGenerator[WatchEvent, None]:
        self._check_open()
        # Events up to the newest this process has seen in a reply happened before this call.
        return self._hub.watch(prefix, after=self._seen_seq)

    # -- plumbing -----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataError(f"metadata store on redis at {self._where} is closed: open a new one")
        if not self._started:
            raise MetadataError(
                f"metadata store on redis at {self._where} is not started: await store.start() first"
            )

    async def _call(self, op: str, *args: str | bytes | int) -> _Reply:
        """Run op's script; its reply after the leading event sequence number. A read that meets a
        dead pooled connection (Redis restarted since it was last used) runs again on a fresh one:
        reads cannot apply twice, and otherwise every stale connection fails one caller."""
        self._check_open()
        attempts = _READ_ATTEMPTS if op in _READ_ONLY else 1
        try:
            for attempt in range(1, attempts + 1):
                try:
                    reply: _Reply = await self._scripts[op](args=[self._namespace, *args])
                    break
                except RedisConnectionError:
                    if attempt == attempts:
                        raise
            self._seen_seq = max(self._seen_seq, int(reply[0]))
            return reply[1:]
        except RedisTimeoutError as exc:
            raise HeraldTimeoutError(
                f"metadata {op} timed out after {self._timeout}s: redis at {self._where} did not answer; "
                "the operation may or may not have happened, so re-read before retrying"
            ) from exc
        except RedisError as exc:
            raise MetadataError(
                f"metadata {op} failed on redis at {self._where}: {exc}; "
                "the operation may or may not have happened, so re-read before retrying"
            ) from exc

    async def _subscribe(self) -> PubSub:
        """A pub/sub connection whose subscription the server has confirmed.

        After the confirmation every later publish reaches it, so a watch registered from then
        on misses nothing.
        """
        assert self._client is not None
        pubsub = self._client.pubsub()
        try:
            async with asyncio.timeout(self._timeout):
                await pubsub.subscribe(self._channel)
                while True:
                    message = await pubsub.get_message(timeout=self._timeout)
                    if message is not None and message["type"] == "subscribe":
                        return pubsub
        except BaseException:
            await _close_quietly(pubsub)
            raise

    async def _listen(self) -> None:
        backoff = 0.05
        while True:
            assert self._pubsub is not None
            try:
                async for message in self._pubsub.listen():
                    if message["type"] == "message":
                        seq, event = _decode_event(message["data"])
                        self._hub.publish([event], seq=seq)
                    elif message["type"] == "subscribe":
                        # The client reconnected by itself: events in between are lost.
                        self._hub.fail_all(self._lost_reason())
                    backoff = 0.05
            except (RedisError, OSError) as exc:
                log.warning("metadata watch connection to redis at %s lost: %s", self._where, exc)
            self._hub.fail_all(self._lost_reason())
            await _close_quietly(self._pubsub)
            streak = FailureStreak(f"metadata watch reconnecting to redis at {self._where}")
            while True:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RECONNECT_BACKOFF_MAX)
                try:
                    self._pubsub = await self._subscribe()
                    break
                except (RedisError, OSError, TimeoutError) as exc:
                    if (line := streak.failed(str(exc))) is not None:
                        log.warning("%s", line)
            if (line := streak.succeeded()) is not None:
                log.info("%s", line)
            # Watches opened during the outage may have missed events too.
            self._hub.fail_all(self._lost_reason())

    def _lost_reason(self) -> str:
        return (
            f"the connection to redis at {self._where} was lost and events may have been missed: "
            "re-read the keys and watch again"
        )

    async def _reap_loop(self) -> None:
        streak = FailureStreak("reaping expired leases")
        while not self._closed:
            delay = self._reap_interval
            try:
                reaped, next_expiry_ms = await self._call("reap", _REAP_BATCH)
                if reaped == _REAP_BATCH:
                    delay = 0.0  # more are waiting
                elif next_expiry_ms >= 0:
                    delay = min(max(next_expiry_ms / 1000, 0.005), self._reap_interval)
            except (MetadataError, HeraldTimeoutError) as exc:
                if (line := streak.failed(f"{exc}; retrying")) is not None:
                    log.warning("%s", line)
            else:
                if (line := streak.succeeded()) is not None:
                    log.info("%s", line)
            self._reaper_wakeup.clear()
            if delay:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel from close().
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._reaper_wakeup.wait()


async def _close_quietly(pubsub: PubSub) -> None:
    with contextlib.suppress(RedisError, OSError):
        await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated


def _decode_event(data: bytes) -> tuple[int, WatchEvent]:
    seq, kind, version, length, rest = data.split(b"\n", 4)
    size = int(length)
    key = rest[:size].decode()
    if kind == b"put":
        return int(seq), WatchEvent("put", key, rest[size:], int(version))
    return int(seq), WatchEvent("delete", key, None, 0)


def _mismatch(key: str, expected: int, current: int) -> str:
    found = f"version {current}" if current else "no key"
    wanted = f"version {expected}" if expected else "no key"
    return f"{key!r} changed under you: expected {wanted}, found {found}; re-read it and retry"
