"""Adds to a storage node of the writer's own process (what `herald standalone` does): handed to its
ledger store directly (storage/client/local_node.py) rather than through a gRPC stream to itself,
with the answers a node's stream gives: stored and durable, in entry order, refused once fenced,
and failed when the node does not answer within add_timeout.
"""

from __future__ import annotations

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
    serve_locally(node.address, node.server.store)
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
    assert await read_all(handle, 49) == datas  # reads still go through gRPC
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
        with pytest.raises(errors.HeraldError) as raised:
            await handle.add_entry(payload(0))
        # Its node timed out (and, the only one, could not be replaced): the writer learns it.
        print("RAISED", type(raised.value), raised.value)
    finally:
        release.set()
