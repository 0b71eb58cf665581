"""The MetadataStore contract, run against every backend: etcd (a real etcd), Redis (a real
redis-server) and the embedded SQLite file. Backend-specific behaviour (several Redis clients,
reopening a file) follows; etcd's own is in test_metadata_etcd.py.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from herald.common.errors import BadVersionError, InvalidArgumentError, MetadataError
from herald.metadata.backends import open_store
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.metadata.etcd import EtcdMetadataStore
from herald.metadata.redis import RedisMetadataStore
from herald.metadata.store import LeaseExpiredError, MetadataStore, Versioned, WatchEvent

from tests.conftest import free_port, wait_for_port
from tests.helpers import eventually, unique_name

TTL = 0.5  # short leases, so expiry tests finish quickly
DEADLINE = 10.0  # generous: these bound a wait, they do not assert a duration

StoreFactory = Callable[..., MetadataStore]


@pytest.fixture(params=["etcd", "redis", "embedded"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Unstarted stores over the same data: one etcd key prefix, one Redis namespace, or one SQLite
    file, per test."""
    if backend == "etcd":
        url = request.getfixturevalue("etcd_url")
        namespace = f"/{unique_name('test')}/"
        return lambda **kwargs: EtcdMetadataStore(url, namespace=namespace, **kwargs)
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        namespace = request.getfixturevalue("redis_namespace")
        return lambda **kwargs: RedisMetadataStore(url, namespace=namespace, **kwargs)
    path = str(tmp_path / "metadata.db")
    return lambda **kwargs: EmbeddedMetadataStore(path, **kwargs)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[MetadataStore]:
    store = make_store()
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def next_event(watch: AsyncIterator[WatchEvent]) -> WatchEvent:
    return await asyncio.wait_for(anext(watch), DEADLINE)


def put_event(key: str, value: bytes, version: int) -> WatchEvent:
    return WatchEvent("put", key, value, version)


def delete_event(key: str) -> WatchEvent:
    return WatchEvent("delete", key, None, 0)


async def wait_until_absent(store: MetadataStore, key: str) -> None:
    async def absent() -> bool:
        return await store.get(key) is None

    await eventually(absent, f"{key!r} vanishing", timeout=DEADLINE)


async def aclose(watch: AsyncIterator[WatchEvent]) -> None:
    await watch.aclose()  # type: ignore[attr-defined]


# -- versions and compare-and-set ---------------------------------------------------------------------


async def test_get_of_absent_key_returns_none(store: MetadataStore) -> None:
    assert await store.get("absent/key") is None


async def test_each_put_returns_the_next_version_starting_at_one(store: MetadataStore) -> None:
    assert [await store.put("k", value) for value in (b"a", b"b", b"c")] == [1, 2, 3]
    assert await store.get("k") == Versioned(b"c", 3, 0)


async def test_put_stores_arbitrary_bytes_unchanged(store: MetadataStore) -> None:
    value = bytes(range(256)) + b"\n\n\x00"
    await store.put("bin/k\ney", value)
    assert await store.get("bin/k\ney") == Versioned(value, 1, 0)


async def test_put_with_the_current_version_replaces_the_value(store: MetadataStore) -> None:
    await store.put("k", b"a")
    assert await store.put("k", b"b", expected_version=1) == 2
    assert await store.get("k") == Versioned(b"b", 2, 0)


async def test_put_with_a_stale_version_raises_bad_version_and_changes_nothing(
    store: MetadataStore,
) -> None:
    await store.put("k", b"a")
    await store.put("k", b"b")
    with pytest.raises(BadVersionError, match="expected version 1, found version 2"):
        await store.put("k", b"lost", expected_version=1)
    assert await store.get("k") == Versioned(b"b", 2, 0)


async def test_put_with_a_version_on_an_absent_key_raises_bad_version(store: MetadataStore) -> None:
    with pytest.raises(BadVersionError, match="found no key"):
        await store.put("k", b"a", expected_version=3)
    assert await store.get("k") is None


async def test_create_if_absent_fails_when_the_key_exists(store: MetadataStore) -> None:
    assert await store.put("k", b"first", expected_version=0) == 1
    with pytest.raises(BadVersionError):
        await store.put("k", b"second", expected_version=0)
    assert await store.get("k") == Versioned(b"first", 1, 0)


async def test_exactly_one_of_twenty_concurrent_creators_wins(store: MetadataStore) -> None:
    results = await asyncio.gather(
        *(store.put("owner", str(i).encode(), expected_version=0) for i in range(20)),
        return_exceptions=True,
    )
    winners = [i for i, result in enumerate(results) if result == 1]
    assert len(winners) == 1
    assert all(isinstance(r, BadVersionError) for i, r in enumerate(results) if i != winners[0])
    assert await store.get("owner") == Versioned(str(winners[0]).encode(), 1, 0)


async def test_compare_and_set_loses_to_a_concurrent_writer(store: MetadataStore) -> None:
    await store.put("k", b"a")
    seen = await store.get("k")
    await store.put("k", b"other writer")
    with pytest.raises(BadVersionError):
        await store.compare_and_set("k", seen, b"mine")
    assert await store.get("k") == Versioned(b"other writer", 2, 0)


async def test_concurrent_allocate_id_gives_unique_consecutive_ids(store: MetadataStore) -> None:
    ids = await asyncio.gather(*(store.allocate_id("counters/ledger") for _ in range(30)))
    assert sorted(ids) == list(range(1, 31))


async def test_put_with_a_negative_expected_version_is_invalid(store: MetadataStore) -> None:
    with pytest.raises(InvalidArgumentError, match="expected_version -1"):
        await store.put("k", b"a", expected_version=-1)


# -- delete -------------------------------------------------------------------------------------------


async def test_delete_removes_the_key_and_returns_true(store: MetadataStore) -> None:
    await store.put("k", b"a")
    assert await store.delete("k") is True
    assert await store.get("k") is None


async def test_delete_of_an_absent_key_returns_false(store: MetadataStore) -> None:
    assert await store.delete("absent") is False
    assert await store.delete("absent", expected_version=4) is False


async def test_delete_with_the_current_version_removes_the_key(store: MetadataStore) -> None:
    await store.put("k", b"a")
    await store.put("k", b"b")
    assert await store.delete("k", expected_version=2) is True
    assert await store.get("k") is None


async def test_delete_with_a_stale_version_raises_bad_version_and_keeps_the_key(
    store: MetadataStore,
) -> None:
    await store.put("k", b"a")
    await store.put("k", b"b")
    with pytest.raises(BadVersionError, match="expected version 1, found version 2"):
        await store.delete("k", expected_version=1)
    assert await store.get("k") == Versioned(b"b", 2, 0)


async def test_delete_with_a_negative_expected_version_is_invalid(store: MetadataStore) -> None:
    with pytest.raises(InvalidArgumentError):
        await store.delete("k", expected_version=-2)


async def test_a_deleted_key_starts_again_at_version_one(store: MetadataStore) -> None:
    await store.put("k", b"a")
    await store.put("k", b"b")
    await store.delete("k")
    assert await store.put("k", b"c", expected_version=0) == 1


# -- list ---------------------------------------------------------------------------------------------


async def test_list_returns_the_keys_under_a_prefix_in_key_order(store: MetadataStore) -> None:
    keys = ["t/z", "t/a", "t/é", "t/B", "t/a/nested", "t/~", "t/ä"]
    for key in keys:
        await store.put(key, key.encode())
    for other in ("s/a", "u/a", "t", "T/a"):
        await store.put(other, b"other")
    listed = await store.list("t/")
    assert list(listed) == sorted(keys)
    assert listed["t/é"] == Versioned("t/é".encode(), 1, 0)


async def test_list_excludes_deleted_keys(store: MetadataStore) -> None:
    for key in ("p/a", "p/b", "p/c"):
        await store.put(key, b"v")
    await store.delete("p/b")
    assert list(await store.list("p/")) == ["p/a", "p/c"]


async def test_list_of_an_empty_prefix_returns_every_key(store: MetadataStore) -> None:
    await store.put("b", b"2")
    await store.put("a", b"1")
    assert list(await store.list("")) == ["a", "b"]


async def test_list_of_an_unused_prefix_is_empty(store: MetadataStore) -> None:
    await store.put("a/b", b"v")
    assert await store.list("nothing/") == {}


# -- leases -------------------------------------------------------------------------------------------


async def test_an_ephemeral_key_vanishes_when_its_lease_expires_without_keepalive(
    store: MetadataStore,
) -> None:
    lease = await store.grant_lease(TTL)
    assert lease > 0
    await store.put("brokers/b1", b"up", lease_id=lease)
    assert await store.get("brokers/b1") == Versioned(b"up", 1, lease)
    await wait_until_absent(store, "brokers/b1")
    assert await store.list("brokers/") == {}


async def test_an_ephemeral_key_survives_while_its_lease_is_kept_alive(store: MetadataStore) -> None:
    lease = await store.grant_lease(TTL)
    await store.put("brokers/b1", b"up", lease_id=lease)

    async def kept_alive() -> bool:
        assert await store.keepalive(lease) is True
        assert await store.get("brokers/b1") == Versioned(b"up", 1, lease)
        return True

    # Three leases' lifetimes, each measured by the store itself: a key on a lease granted beside
    # the kept one and never kept alive vanishes, and only then is the next one granted.
    for period in range(3):
        unkept = await store.grant_lease(TTL)
        await store.put(f"brokers/silent-{period}", b"up", lease_id=unkept)

        async def silent_gone(key: str = f"brokers/silent-{period}") -> bool:
            return await kept_alive() and await store.get(key) is None

        await eventually(silent_gone, f"the key of lease {unkept}, never kept alive, vanishing",
                         timeout=DEADLINE, interval=TTL / 5)
    assert await store.list("brokers/") == {"brokers/b1": Versioned(b"up", 1, lease)}


async def test_keepalive_of_an_expired_lease_returns_false(store: MetadataStore) -> None:
    lease = await store.grant_lease(TTL)
    await store.put("probe", b"v", lease_id=lease)
    await wait_until_absent(store, "probe")
    assert await store.keepalive(lease) is False


async def test_keepalive_of_an_unknown_lease_returns_false(store: MetadataStore) -> None:
    assert await store.keepalive(987654) is False


async def test_lease_ids_are_unique(store: MetadataStore) -> None:
    leases = await asyncio.gather(*(store.grant_lease(30) for _ in range(10)))
    assert len(set(leases)) == 10


async def test_grant_lease_with_a_non_positive_ttl_is_invalid(store: MetadataStore) -> None:
    for ttl in (0, -1.0):
        with pytest.raises(InvalidArgumentError, match="ttl"):
            await store.grant_lease(ttl)


async def test_revoke_deletes_the_leases_keys_and_nothing_else(store: MetadataStore) -> None:
    lease = await store.grant_lease(30)
    other = await store.grant_lease(30)
    await store.put("s/mine1", b"v", lease_id=lease)
    await store.put("s/mine2", b"v", lease_id=lease)
    await store.put("s/other", b"v", lease_id=other)
    await store.put("s/persistent", b"v")
    await store.revoke_lease(lease)
    assert list(await store.list("s/")) == ["s/other", "s/persistent"]
    assert await store.keepalive(lease) is False


async def test_revoke_of_an_unknown_lease_does_nothing(store: MetadataStore) -> None:
    await store.put("k", b"v")
    await store.revoke_lease(424242)
    assert await store.get("k") == Versioned(b"v", 1, 0)


async def test_put_with_an_expired_lease_raises_lease_expired(store: MetadataStore) -> None:
    lease = await store.grant_lease(TTL)
    await store.put("probe", b"v", lease_id=lease)
    await wait_until_absent(store, "probe")
    with pytest.raises(LeaseExpiredError, match=f"lease {lease} is unknown or expired"):
        await store.put("k", b"v", lease_id=lease)
    assert await store.get("k") is None


async def test_put_with_an_unknown_lease_raises_lease_expired(store: MetadataStore) -> None:
    with pytest.raises(LeaseExpiredError):
        await store.put("k", b"v", lease_id=555555)
    assert await store.get("k") is None


async def test_put_with_a_revoked_lease_raises_lease_expired(store: MetadataStore) -> None:
    lease = await store.grant_lease(30)
    await store.revoke_lease(lease)
    with pytest.raises(LeaseExpiredError):
        await store.put("k", b"v", lease_id=lease)


async def test_put_with_a_negative_lease_id_is_invalid(store: MetadataStore) -> None:
    with pytest.raises(InvalidArgumentError, match="lease id -1"):
        await store.put("k", b"v", lease_id=-1)


async def test_persistent_keys_are_unaffected_by_lease_expiry(store: MetadataStore) -> None:
    lease = await store.grant_lease(TTL)
    await store.put("n/persistent", b"stays")
    await store.put("n/ephemeral", b"goes", lease_id=lease)
    await wait_until_absent(store, "n/ephemeral")
    assert await store.list("n/") == {"n/persistent": Versioned(b"stays", 1, 0)}


async def test_an_expired_ephemeral_key_can_be_created_again(store: MetadataStore) -> None:
    first = await store.grant_lease(TTL)
    await store.put("owner", b"first", lease_id=first)
    await wait_until_absent(store, "owner")
    second = await store.grant_lease(30)
    assert await store.put("owner", b"second", expected_version=0, lease_id=second) == 1
    assert await store.get("owner") == Versioned(b"second", 1, second)


async def test_put_without_a_lease_makes_an_ephemeral_key_persistent(store: MetadataStore) -> None:
    lease = await store.grant_lease(30)
    await store.put("k", b"a", lease_id=lease)
    await store.put("k", b"b")
    await store.revoke_lease(lease)
    assert await store.get("k") == Versioned(b"b", 2, 0)


async def test_put_with_another_lease_moves_the_key_to_that_lease(store: MetadataStore) -> None:
    old = await store.grant_lease(30)
    new = await store.grant_lease(30)
    await store.put("k", b"a", lease_id=old)
    await store.put("k", b"b", lease_id=new)
    await store.revoke_lease(old)
    assert await store.get("k") == Versioned(b"b", 2, new)
    await store.revoke_lease(new)
    assert await store.get("k") is None


# -- watches ------------------------------------------------------------------------------------------


async def test_watch_sees_puts_and_deletes_under_its_prefix_only(store: MetadataStore) -> None:
    watch = store.watch("w/")
    try:
        await store.put("other/x", b"no")
        await store.put("w/a", b"1")
        await store.put("w/a", b"2", expected_version=1)
        await store.delete("other/x")
        await store.delete("w/a")
        await store.put("w/b", b"last")
        assert [await next_event(watch) for _ in range(4)] == [
            put_event("w/a", b"1", 1),
            put_event("w/a", b"2", 2),
            delete_event("w/a"),
            put_event("w/b", b"last", 1),
        ]
    finally:
        await aclose(watch)


async def test_watch_sees_no_event_for_failed_writes(store: MetadataStore) -> None:
    watch = store.watch("w/")
    try:
        await store.put("w/a", b"1")
        with pytest.raises(BadVersionError):
            await store.put("w/a", b"x", expected_version=0)
        with pytest.raises(BadVersionError):
            await store.delete("w/a", expected_version=7)
        await store.put("w/end", b"e")
        assert [await next_event(watch) for _ in range(2)] == [
            put_event("w/a", b"1", 1), put_event("w/end", b"e", 1),
        ]
    finally:
        await aclose(watch)


async def test_watch_sees_lease_expiry_as_deletes(store: MetadataStore) -> None:
    watch = store.watch("brokers/")
    try:
        lease = await store.grant_lease(TTL)
        await store.put("brokers/b2", b"up", lease_id=lease)
        await store.put("brokers/b1", b"up", lease_id=lease)
        assert [await next_event(watch) for _ in range(2)] == [
            put_event("brokers/b2", b"up", 1), put_event("brokers/b1", b"up", 1),
        ]
        assert {await next_event(watch), await next_event(watch)} == {
            delete_event("brokers/b1"), delete_event("brokers/b2"),
        }
    finally:
        await aclose(watch)


async def test_watch_sees_revoke_as_deletes(store: MetadataStore) -> None:
    lease = await store.grant_lease(30)
    await store.put("s/a", b"v", lease_id=lease)
    watch = store.watch("s/")
    try:
        await store.revoke_lease(lease)
        assert await next_event(watch) == delete_event("s/a")
    finally:
        await aclose(watch)


async def test_several_watches_each_see_every_event(store: MetadataStore) -> None:
    broad, narrow = store.watch(""), store.watch("a/")
    try:
        await store.put("a/1", b"v")
        assert await next_event(broad) == put_event("a/1", b"v", 1)
        assert await next_event(narrow) == put_event("a/1", b"v", 1)
    finally:
        await aclose(broad)
        await aclose(narrow)


async def test_a_closed_watch_ends_its_iteration(store: MetadataStore) -> None:
    watch = store.watch("w/")
    await store.put("w/a", b"1")
    assert await next_event(watch) == put_event("w/a", b"1", 1)
    await aclose(watch)
    await store.put("w/b", b"2")
    with pytest.raises(StopAsyncIteration):
        await anext(watch)


async def test_closing_the_store_ends_its_watches(make_store: StoreFactory) -> None:
    store = make_store()
    await store.start()
    watch = store.watch("w/")
    await store.put("w/a", b"1")
    assert await next_event(watch) == put_event("w/a", b"1", 1)
    await store.close()
    assert [event async for event in watch] == []


async def test_a_watch_that_falls_behind_ends_with_an_error(make_store: StoreFactory) -> None:
    store = make_store(watch_capacity=3)
    await store.start()
    try:
        watch = store.watch("w/")
        sentinel = store.watch("w/end")
        for i in range(5):
            await store.put("w/k", str(i).encode())
        await store.put("w/end", b"")
        await next_event(sentinel)  # every event before it has reached the watches
        assert [(await next_event(watch)).value for _ in range(3)] == [b"0", b"1", b"2"]
        with pytest.raises(MetadataError, match="fell 3 events behind"):
            await next_event(watch)
        await aclose(sentinel)
    finally:
        await store.close()


# -- life cycle ---------------------------------------------------------------------------------------


async def test_operations_before_start_raise_metadata_error(make_store: StoreFactory) -> None:
    store = make_store()
    with pytest.raises(MetadataError, match="not started"):
        await store.get("k")
    with pytest.raises(MetadataError, match="not started"):
        store.watch("")
    await store.close()


async def test_start_and_close_are_idempotent(make_store: StoreFactory) -> None:
    store = make_store()
    await store.start()
    await store.start()
    await store.put("k", b"v")
    await store.close()
    await store.close()


async def test_operations_after_close_raise_metadata_error(make_store: StoreFactory) -> None:
    store = make_store()
    await store.start()
    await store.close()
    with pytest.raises(MetadataError, match="closed"):
        await store.put("k", b"v")
    with pytest.raises(MetadataError, match="closed"):
        store.watch("")
    with pytest.raises(MetadataError, match="closed"):
        await store.start()


async def test_close_leaves_no_background_task_running(make_store: StoreFactory) -> None:
    before = asyncio.all_tasks()
    store = make_store()
    await store.start()
    await store.grant_lease(TTL)
    await store.close()
    assert asyncio.all_tasks() == before


# -- Redis only ---------------------------------------------------------------------------------------


@pytest.fixture
async def redis_pair(redis_url: str, redis_namespace: str) -> AsyncIterator[list[RedisMetadataStore]]:
    """Two stores, as two processes would have, on one Redis and namespace."""
    stores = [RedisMetadataStore(redis_url, namespace=redis_namespace) for _ in range(2)]
    for store in stores:
        await store.start()
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


async def test_redis_watch_in_one_instance_sees_writes_of_another(
    redis_pair: list[RedisMetadataStore],
) -> None:
    writer, watcher = redis_pair
    watch = watcher.watch("w/")
    try:
        await writer.put("w/a", b"1")
        await writer.delete("w/a")
        assert [await next_event(watch) for _ in range(2)] == [put_event("w/a", b"1", 1), delete_event("w/a")]
        assert await watcher.get("w/a") is None
    finally:
        await aclose(watch)


async def test_redis_lease_of_a_dead_instance_is_reaped_by_another(
    redis_pair: list[RedisMetadataStore],
) -> None:
    doomed, survivor = redis_pair
    watch = survivor.watch("brokers/")
    try:
        lease = await doomed.grant_lease(TTL)
        await doomed.put("brokers/b1", b"up", lease_id=lease)
        await doomed.close()  # its owner dies without revoking
        assert await next_event(watch) == put_event("brokers/b1", b"up", 1)
        assert await next_event(watch) == delete_event("brokers/b1")
        assert await survivor.keepalive(lease) is False
    finally:
        await aclose(watch)


async def test_redis_creators_in_several_instances_race_with_one_winner(
    redis_pair: list[RedisMetadataStore],
) -> None:
    results = await asyncio.gather(
        *(redis_pair[i % 2].put("owner", b"x", expected_version=0) for i in range(20)),
        return_exceptions=True,
    )
    assert results.count(1) == 1
    assert sum(isinstance(r, BadVersionError) for r in results) == 19


async def test_redis_allocate_id_across_instances_gives_unique_ids(
    redis_pair: list[RedisMetadataStore],
) -> None:
    ids = await asyncio.gather(*(redis_pair[i % 2].allocate_id("counter") for i in range(30)))
    assert sorted(ids) == list(range(1, 31))


async def test_redis_watch_fails_when_its_connection_is_lost_and_new_watches_work_after(
    redis_url: str, redis_namespace: str,
) -> None:
    store = RedisMetadataStore(redis_url, namespace=redis_namespace)
    await store.start()
    admin = aioredis.Redis.from_url(redis_url)
    try:
        watch = store.watch("w/")
        await store.put("w/a", b"1")
        assert await next_event(watch) == put_event("w/a", b"1", 1)
        await admin.client_kill_filter(_type="pubsub")
        with pytest.raises(MetadataError, match="events may have been missed"):
            await next_event(watch)

        async def new_watch_sees_puts() -> bool:
            fresh = store.watch("w/")
            try:
                await store.put("w/b", b"2")
                try:
                    event = await asyncio.wait_for(anext(fresh), 0.5)
                except (TimeoutError, MetadataError):
                    return False  # not resubscribed yet, or failed by the resubscription
                return event.key == "w/b"
            finally:
                await aclose(fresh)

        await eventually(new_watch_sees_puts, "a new watch working after reconnection", timeout=DEADLINE)
    finally:
        await admin.aclose()
        await store.close()


async def test_redis_start_against_an_unreachable_server_raises_metadata_error() -> None:
    store = RedisMetadataStore(f"redis://127.0.0.1:{free_port()}/0", timeout=2.0)
    with pytest.raises(MetadataError, match="cannot connect to the metadata store"):
        await store.start()
    await store.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test's own, which the test may stop."""
    binary = shutil.which("redis-server")
    assert binary is not None
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"redis://127.0.0.1:{port}/0", proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_redis_operation_after_the_server_went_away_raises_metadata_error(
    private_redis: tuple[str, subprocess.Popen[bytes]], redis_namespace: str,
) -> None:
    url, proc = private_redis
    store = RedisMetadataStore(url, namespace=redis_namespace, timeout=2.0)
    await store.start()
    try:
        await store.put("k", b"v")
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
        with pytest.raises(MetadataError, match=r"put failed on redis at 127\.0\.0\.1"):
            await store.put("k", b"v2")
    finally:
        await store.close()


async def test_redis_namespaces_keep_stores_apart(redis_url: str) -> None:
    first = RedisMetadataStore(redis_url, namespace=f"{unique_name('test')}:")
    second = RedisMetadataStore(redis_url, namespace=f"{unique_name('test')}:")
    await first.start()
    await second.start()
    try:
        await first.put("k", b"first")
        assert await second.get("k") is None
        assert await second.list("") == {}
    finally:
        await first.close()
        await second.close()


# -- embedded only ------------------------------------------------------------------------------------


async def test_embedded_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "meta" / "store.db")
    store = EmbeddedMetadataStore(path)
    await store.start()
    await store.put("a", b"1")
    await store.put("a", b"2")
    await store.put("b", b"3")
    await store.close()

    reopened = EmbeddedMetadataStore(path)
    await reopened.start()
    try:
        assert await reopened.list("") == {"a": Versioned(b"2", 2, 0), "b": Versioned(b"3", 1, 0)}
        assert await reopened.put("a", b"4", expected_version=2) == 3
    finally:
        await reopened.close()


_WRITER = """
import asyncio, sys
from herald.metadata.embedded import EmbeddedMetadataStore

async def main():
    store = EmbeddedMetadataStore(sys.argv[1])
    await store.start()
    for i in range(1, 1_000_000):
        await store.put(f"acked/{i:07d}", b"x")
        print(i, flush=True)  # only after put returned: i is acknowledged

asyncio.run(main())
"""


async def test_embedded_acknowledged_puts_survive_sigkill(tmp_path: Path, herald_env: dict[str, str]) -> None:
    path = str(tmp_path / "store.db")
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, path, stdout=asyncio.subprocess.PIPE, env=herald_env,
    )
    assert writer.stdout is not None
    last_acked = 0
    try:
        while last_acked < 50:
            line = await asyncio.wait_for(writer.stdout.readline(), DEADLINE)
            assert line, "the writer exited before 50 puts were acknowledged"
            last_acked = int(line)
    finally:
        writer.kill()  # SIGKILL: no close, no checkpoint
        await writer.wait()
    last_acked = max([last_acked, *(int(line) for line in (await writer.stdout.read()).split())])

    reopened = EmbeddedMetadataStore(path)
    await reopened.start()
    try:
        stored = await reopened.list("acked/")
        assert [f"acked/{i:07d}" for i in range(1, last_acked + 1)] == list(stored)[:last_acked]
    finally:
        await reopened.close()


async def test_embedded_ephemeral_keys_of_the_previous_process_are_gone_at_open(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    store = EmbeddedMetadataStore(path)
    await store.start()
    lease = await store.grant_lease(3600)
    await store.put("brokers/b1", b"up", lease_id=lease)
    await store.put("config", b"kept")
    await store.close()  # as if the process died: the lease was never revoked

    reopened = EmbeddedMetadataStore(path)
    await reopened.start()
    try:
        assert await reopened.list("") == {"config": Versioned(b"kept", 1, 0)}
        assert await reopened.keepalive(lease) is False
        assert await reopened.grant_lease(30) > lease  # lease ids are never reused
    finally:
        await reopened.close()


async def test_embedded_second_store_on_the_same_file_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    first = EmbeddedMetadataStore(path)
    await first.start()
    try:
        second = EmbeddedMetadataStore(path)
        with pytest.raises(MetadataError, match="in use by another process"):
            await second.start()
        await second.close()
        assert await first.put("k", b"v") == 1  # the first is unharmed
    finally:
        await first.close()


async def test_embedded_file_that_is_not_a_database_raises_metadata_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite" * 100)
    store = EmbeddedMetadataStore(str(path))
    with pytest.raises(MetadataError, match="cannot open metadata file"):
        await store.start()
    await store.close()


async def test_embedded_in_memory_store_works() -> None:
    store = EmbeddedMetadataStore(":memory:")
    await store.start()
    try:
        assert await store.put("k", b"v") == 1
        assert await store.get("k") == Versioned(b"v", 1, 0)
    finally:
        await store.close()


# -- open_store ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "kind"),
    [("redis://127.0.0.1:6379/0", RedisMetadataStore), ("sqlite:///tmp/x/metadata.db", EmbeddedMetadataStore),
     ("etcd://127.0.0.1:2379,127.0.0.1:2381", EtcdMetadataStore)],
)
def test_open_store_picks_the_backend_from_the_url(url: str, kind: type[Any]) -> None:
    assert isinstance(open_store(url), kind)


def test_open_store_rejects_an_unknown_scheme() -> None:
    with pytest.raises(InvalidArgumentError, match="not supported"):
        open_store("zk://localhost:2181")
