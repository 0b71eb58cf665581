"""Adds to (and reads from) a storage node of the writer's own process (what `herald standalone` does): handed to its
ledger store directly (storage/client/local_node.py) rather than through a gRPC stream to itself,
with the answers a node's stream gives: stored and durable, in entry order, refused once fenced,
and failed when the node does not answer within add_timeout.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

import pytest
from herald.common import errors
from herald.storage.client.local_node import LocalAddStream, serve_locally, stop_serving_locally
from herald.storage.node.server import StorageServer

from tests.integration import storage_cluster
from tests.integration.storage_cluster import Cluster, InProcessNode, add_all, payload, read_all

cluster = storage_cluster.cluster  # the fixture: storage nodes, a metadata store, storage clients


@pytest.fixture
async def local_node(cluster: Cluster) -> AsyncIterator[InProcessNode]:
    """One in-process node whose adds this process's storage clients hand over directly."""
    (node,) = await cluster.add_nodes(1)
    assert isinstance(node, InProcessNode) and node.server is not None
    serve_locally(node.address, node.server.local_access())
    try:
        yield node
    finally:
        stop_serving_locally(node.address)


def server(node: InProcessNode) -> StorageServer:
    assert node.server is not None
    return node.server


async def test_local_adds_are_stored_in_order_and_read_back_over_grpc(cluster: Cluster,
                                                                      local_node: InProcessNode) -> None:
    client = cluster.client()
    handle = await client.create_ledger(1, 1, 1)
    datas = [payload(i) for i in range(50)]
    assert await add_all(handle, datas) == list(range(50))
    # The node's stream for this client is the local one: no gRPC add stream to itself.
    assert isinstance(client.node(local_node.address)._stream, LocalAddStream)
    assert await read_all(handle, 49) == datas
    for entry_id in (0, 49):
        assert await cluster.held(local_node.address, handle.ledger_id, entry_id) == datas[entry_id]


async def test_a_fenced_ledger_refuses_local_adds(cluster: Cluster, local_node: InProcessNode) -> None:
    handle = await cluster.client().create_ledger(1, 1, 1)
    await add_all(handle, [payload(0)])
    await server(local_node).store.fence(handle.ledger_id)  # another writer took the ledger over
    with pytest.raises(errors.FencedError, match="fenced"):
        await handle.add_entry(payload(1))


async def test_a_local_add_not_durable_within_add_timeout_fails(cluster: Cluster, local_node: InProcessNode,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    journal = server(local_node).store.journal
    release = threading.Event()
    fsync: Callable[[int], None] = journal._fsync

    def held(fd: int) -> None:  # the disk stops answering
        release.wait()
        fsync(fd)

    journal._fsync = held
    handle = await cluster.client().create_ledger(1, 1, 1)
    try:
        # Its node timed out (and, the only one, could not be replaced): the writer learns it.
        with pytest.raises(errors.HeraldError, match="only 0 live storage nodes are left"):
            await handle.add_entry(payload(0))
        assert f"storage node {local_node.address} did not answer an add within" in caplog.text
    finally:
        release.set()


class _NoGrpcReads:
    """A node connection's stub whose ReadEntries must not be called: reads are local."""

    def ReadEntries(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a read of a node of this process went through gRPC")


async def test_reads_of_a_node_of_this_process_come_from_its_store(cluster: Cluster, local_node: InProcessNode,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    client = cluster.client()
    handle = await client.create_ledger(1, 1, 1)
    datas = [payload(i) for i in range(30)]
    await add_all(handle, datas)
    connection = client.node(local_node.address)
    monkeypatch.setattr(connection, "stub", _NoGrpcReads())
    assert await read_all(handle, 29) == datas
    assert await connection.read(handle.ledger_id, 10, 12) == [(i, datas[i]) for i in (10, 11, 12)]
    # The node's own errors, as its gRPC answer would have carried them.
    with pytest.raises(errors.EntryNotFoundError, match="entry 30 of ledger"):
        await connection.read(handle.ledger_id, 30, 40)
    with pytest.raises(errors.LedgerNotFoundError):
        await connection.read(handle.ledger_id + 1000, 0, 0)


async def test_a_local_read_slower_than_read_timeout_fails_as_a_remote_one_does(
        cluster: Cluster, local_node: InProcessNode, monkeypatch: pytest.MonkeyPatch) -> None:
    client = cluster.client()
    handle = await client.create_ledger(1, 1, 1)
    await add_all(handle, [payload(0)])
    connection = client.node(local_node.address)
    monkeypatch.setattr(connection, "read_timeout", 0.2)
    store = server(local_node).store
    release = asyncio.Event()

    async def stalled(*args: object, **kwargs: object) -> AsyncIterator[list[tuple[int, bytes]]]:
        await release.wait()  # the disk stops answering
        yield []

    monkeypatch.setattr(store, "read_entries", stalled)
    try:
        with pytest.raises(errors.HeraldTimeoutError, match=r"no answer within 0\.2 s"):
            await connection.read(handle.ledger_id, 0, 0)
    finally:
        release.set()


async def test_a_disk_failure_on_a_local_read_is_a_persistence_error(
        cluster: Cluster, local_node: InProcessNode, monkeypatch: pytest.MonkeyPatch) -> None:
    client = cluster.client()
    handle = await client.create_ledger(1, 1, 1)
    await add_all(handle, [payload(0)])
    store = server(local_node).store

    async def failing(*args: object, **kwargs: object) -> AsyncIterator[list[tuple[int, bytes]]]:
        raise OSError(5, "Input/output error")
        yield []

    monkeypatch.setattr(store, "read_entries", failing)
    with pytest.raises(errors.PersistenceError, match="Input/output error"):
        await client.node(local_node.address).read(handle.ledger_id, 0, 0)
