"""The etcd backend beyond the shared contract (tests/integration/test_metadata_store.py runs that on
etcd too): failover between members of a real 3-member cluster when the leader is SIGKILLed, watches
that resume across a member restart, compacted history, and unreachable or misnamed clusters."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import grpc.aio
import pytest
from herald.api.etcd.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from herald.common.errors import HeraldTimeoutError, InvalidArgumentError, MetadataError
from herald.local_cluster import ClusterProcess, free_port
from herald.local_etcd import LocalEtcd
from herald.metadata.etcd import EtcdMetadataStore
from herald.metadata.store import Versioned, WatchEvent

from tests.helpers import unique_name

DEADLINE = 20.0  # bounds a wait; asserts no duration


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[LocalEtcd]:
    """Three etcd members of this test's own, which the test may kill and restart."""
    etcd = LocalEtcd(tmp_path / "etcd", tmp_path / "logs", members=3)
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.stop()


@pytest.fixture
async def cluster_store(etcd_cluster: LocalEtcd) -> AsyncIterator[EtcdMetadataStore]:
    store = EtcdMetadataStore(etcd_cluster.url, namespace=f"/{unique_name('test')}/", timeout=10.0)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def leader(etcd: LocalEtcd) -> ClusterProcess:
    """The member that is the raft leader now, asked of the members themselves."""
    for process, address in zip(etcd.processes, etcd.client_addresses, strict=True):
        async with grpc.aio.insecure_channel(address) as channel:
            maintenance = rpc_pb2_grpc.MaintenanceStub(channel)
            status = await maintenance.Status(rpc_pb2.StatusRequest(), timeout=5)
            if status.leader == status.header.member_id:
                return process
    raise AssertionError("no etcd member says it is the leader")


async def test_cas_after_the_leader_is_sigkilled_succeeds_and_nothing_acknowledged_is_lost(
    etcd_cluster: LocalEtcd, cluster_store: EtcdMetadataStore,
) -> None:
    acknowledged = {f"acked/{i}": await cluster_store.put(f"acked/{i}", str(i).encode()) for i in range(20)}
    await cluster_store.put("owner", b"before")
    session = await cluster_store.grant_lease(5)
    await cluster_store.put("brokers/b1", b"up", lease_id=session)
    doomed = await leader(etcd_cluster)
    doomed.kill()

    # Issued after the kill: it reaches a survivor and commits once they have elected a new leader.
    assert await cluster_store.put("owner", b"after", expected_version=1) == 2
    assert await cluster_store.get("owner") == Versioned(b"after", 2, 0)
    # The session outlives the failover: the new leader has its lease and renews it.
    assert await cluster_store.keepalive(session) is True
    assert await cluster_store.get("brokers/b1") == Versioned(b"up", 1, session)
    assert await cluster_store.list("acked/") == {
        key: Versioned(key.removeprefix("acked/").encode(), version, 0) for key, version in acknowledged.items()
    }


async def test_a_watch_resumes_across_a_restart_of_its_member_without_losing_events(
    etcd_cluster: LocalEtcd, cluster_store: EtcdMetadataStore, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    watch = cluster_store.watch("w/")
    try:
        await cluster_store.put("w/0", b"0")
        assert await asyncio.wait_for(anext(watch), DEADLINE) == WatchEvent("put", "w/0", b"0", 1)
        watched = etcd_cluster.processes[0]  # the store's first endpoint: where its watch streams
        watched.kill()
        for i in range(1, 6):  # while the watch's member is down, on the survivors
            # Create-if-absent: a write caught on the dead member's connection is retried elsewhere
            # only when it cannot apply twice (an unconditional put would report "outcome unknown").
            await cluster_store.put(f"w/{i}", str(i).encode(), expected_version=0)
        watched.start()
        await cluster_store.delete("w/0", expected_version=1)
        seen = [await asyncio.wait_for(anext(watch), DEADLINE) for _ in range(6)]
        assert seen == [*(WatchEvent("put", f"w/{i}", str(i).encode(), 1) for i in range(1, 6)),
                        WatchEvent("delete", "w/0", None, 0)]
    finally:
        await watch.aclose()
    gc.collect()
    # The lost stream left nothing behind: no pending task destroyed, no generator failing to close
    # (each logged at ERROR by asyncio in every broker and node, at every etcd member restart).
    assert not [record.getMessage() for record in caplog.records if record.name == "asyncio"]


async def test_a_watch_whose_history_was_compacted_ends_with_an_error_saying_to_reread(
    etcd_url: str,
) -> None:
    namespace = f"/{unique_name('test')}/"
    watcher = EtcdMetadataStore(etcd_url, namespace=namespace)
    writer = EtcdMetadataStore(etcd_url, namespace=namespace)
    await watcher.start()  # it has seen the store's revision as of now, where its watches start
    await writer.start()
    try:
        for i in range(3):
            await writer.put("c/k", str(i).encode())
        async with grpc.aio.insecure_channel(etcd_url.removeprefix("etcd://")) as channel:
            kv = rpc_pb2_grpc.KVStub(channel)
            latest = (await kv.Range(rpc_pb2.RangeRequest(key=b"/"), timeout=5)).header.revision
            await kv.Compact(rpc_pb2.CompactionRequest(revision=latest, physical=True), timeout=5)
        watch = watcher.watch("c/")
        with pytest.raises(MetadataError, match=r"compacted its history .* re-read the keys and watch again"):
            await asyncio.wait_for(anext(watch), DEADLINE)
    finally:
        await watcher.close()
        await writer.close()


async def test_start_against_an_unreachable_cluster_raises_metadata_error() -> None:
    store = EtcdMetadataStore(f"etcd://127.0.0.1:{free_port()},127.0.0.1:{free_port()}", timeout=1.0)
    with pytest.raises(MetadataError, match=r"cannot connect to the metadata store at etcd at 127\.0\.0\.1.*"
                                            r"is etcd running there\?"):
        await store.start()
    await store.close()


async def test_an_operation_when_every_member_is_down_times_out_naming_the_members(
    etcd_cluster: LocalEtcd, cluster_store: EtcdMetadataStore,
) -> None:
    await cluster_store.put("k", b"v")
    for process in etcd_cluster.processes:
        process.kill()
    with pytest.raises(HeraldTimeoutError, match=r"metadata get timed out after 10\.0s: no member of etcd at "):
        await cluster_store.get("k")


@pytest.mark.parametrize("url", ["etcd://", "etcd://host", "etcd://h1:2379,h2", "etcd://h1:99999"])
def test_a_malformed_etcd_url_is_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"use etcd://host:port\[,host:port...\]"):
        EtcdMetadataStore(url)


class ReplyCutter:
    """A TCP proxy in front of one etcd member that, once armed, forwards the next request but closes
    the connection instead of forwarding the reply: the write is applied, its caller never hears so."""

    def __init__(self, upstream: str) -> None:
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.armed = False
        self.cuts = 0
        # Armed, the cutter holds back replies that follow a forwarded request until `applied` says
        # etcd has applied the write, then cuts: else the first reply frame after arming could be an
        # HTTP/2 SETTINGS or PING acknowledgement, cut before the write ever reached etcd.
        self.applied: Callable[[], Awaitable[bool]] | None = None
        self._request_forwarded = False
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()

    async def _until_applied(self) -> None:
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while self.applied is not None and not await self.applied():
            assert asyncio.get_running_loop().time() < deadline, "etcd never applied the write"
            await asyncio.sleep(0.02)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        self._writers += [client_writer, upstream_writer]

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: bool) -> None:
            while data := await reader.read(65536):
                if not replies and self.armed:
                    self._request_forwarded = True
                if replies and self.armed and self._request_forwarded:
                    await self._until_applied()
                    self.armed = False
                    self.cuts += 1
                    client_writer.close()
                    upstream_writer.close()
                    return
                writer.write(data)
                await writer.drain()

        with contextlib.suppress(OSError):
            await asyncio.gather(pump(client_reader, upstream_writer, False),
                                 pump(upstream_reader, client_writer, True))


@pytest.fixture
async def cut_store(etcd_url: str) -> AsyncIterator[tuple[EtcdMetadataStore, ReplyCutter, EtcdMetadataStore]]:
    cutter = ReplyCutter(etcd_url.removeprefix("etcd://"))
    address = await cutter.start()
    namespace = f"/{unique_name('test')}/"
    store = EtcdMetadataStore(f"etcd://{address}", namespace=namespace, timeout=5.0)
    direct = EtcdMetadataStore(etcd_url, namespace=namespace)  # sees what etcd applied
    await store.start()
    await direct.start()
    try:
        yield store, cutter, direct
    finally:
        await store.close()
        await direct.close()
        await cutter.stop()


async def test_an_unconditional_put_whose_reply_is_lost_says_its_outcome_is_unknown(
    cut_store: tuple[EtcdMetadataStore, ReplyCutter, EtcdMetadataStore],
) -> None:
    store, cutter, direct = cut_store

    async def applied() -> bool:
        return await direct.get("k") is not None

    cutter.applied = applied
    cutter.armed = True
    with pytest.raises(MetadataError, match="may or may not have happened, so re-read before retrying"):
        await store.put("k", b"v")
    assert cutter.cuts == 1
    assert await store.get("k") == Versioned(b"v", 1, 0)  # it did happen, once: never retried


async def test_a_cas_whose_reply_is_lost_is_retried_and_reports_its_own_write_as_unknown_not_lost(
    cut_store: tuple[EtcdMetadataStore, ReplyCutter, EtcdMetadataStore],
) -> None:
    store, cutter, direct = cut_store
    await store.put("k", b"old")

    async def applied() -> bool:
        current = await direct.get("k")
        return current is not None and current.value == b"new"

    cutter.applied = applied
    cutter.armed = True
    # The first attempt applies; the retry's compare then fails on that very write, which the store
    # cannot tell from another writer's: it says so instead of claiming a lost race (BadVersionError).
    with pytest.raises(MetadataError, match=r"outcome is unknown .* perhaps by that attempt; re-read it"):
        await store.put("k", b"new", expected_version=1)
    assert cutter.cuts == 1
    assert await store.get("k") == Versioned(b"new", 2, 0)  # applied exactly once


async def test_a_store_whose_first_member_is_down_is_served_by_the_next(etcd_url: str) -> None:
    store = EtcdMetadataStore(f"etcd://127.0.0.1:{free_port()},{etcd_url.removeprefix('etcd://')}",
                              namespace=f"/{unique_name('test')}/")
    await store.start()
    try:
        assert await store.put("k", b"v") == 1
        assert await store.get("k") == Versioned(b"v", 1, 0)
    finally:
        await store.close()


async def test_local_etcd_advertises_the_given_client_address_so_a_proxy_can_stand_in_front(
    tmp_path: Path,
) -> None:
    proxy = ReplyCutter("127.0.0.1:1")  # its upstream is known once LocalEtcd has chosen ports
    address = await proxy.start()
    etcd = LocalEtcd(tmp_path / "etcd", tmp_path / "logs", members=1, advertise_client=[address])
    proxy.upstream_host, proxy.upstream_port = "127.0.0.1", int(etcd.client_addresses[0].rsplit(":", 1)[1])
    assert etcd.url == f"etcd://{address}"
    await asyncio.to_thread(etcd.start)
    store = EtcdMetadataStore(etcd.url)
    try:
        await store.start()
        assert await store.put("k", b"through the proxy") == 1
        proxy.armed = True  # every call goes through it: cutting one reply is seen by the store
        with pytest.raises(MetadataError, match="may or may not have happened"):
            await store.put("k", b"cut")
    finally:
        await store.close()
        await proxy.stop()
        etcd.stop()


def test_local_etcd_refuses_advertised_addresses_that_do_not_match_its_members(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="advertise_peer names 1 addresses for 3 etcd members"):
        LocalEtcd(tmp_path, tmp_path / "logs", members=3, advertise_peer=["127.0.0.1:1"])
