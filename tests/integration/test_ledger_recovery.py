"""Ledger recovery and fencing through the real storage client on real storage nodes: a recoverer
closes a ledger whose writer died at an entry no earlier than its last acknowledged one, fences
the writer, tolerates unreachable nodes up to a point, and two recoverers agree.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from herald.api.v1 import storage_pb2
from herald.common import errors
from herald.storage.client.add_frame import AddFrame
from herald.storage.client.ledger_metadata import LedgerMetadata, ledger_key

from tests.integration import storage_cluster
from tests.integration.storage_cluster import (
    DEADLINE,
    Cluster,
    add_all,
    flip_byte_after,
    kill_mid_stream,
    payload,
    read_all,
    until_reachable,
)

cluster = storage_cluster.cluster  # the fixture: storage nodes, a metadata store, storage clients


async def test_recovery_after_a_crashed_writer_closes_at_its_last_entry_and_fences_it(cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    writer_client = cluster.client()
    handle = await writer_client.create_ledger(3, 2, 2)
    datas = [payload(i) for i in range(20)]
    for data in datas:  # one at a time: each add carries the LAC of the one before
        await handle.add_entry(data)
    # The writer died after sending entry 20 to one node of its write set only.
    tail = payload(20)
    first_node = handle.metadata.write_set(20)[0]
    await cluster.add_directly(first_node, handle.ledger_id, 20, tail, lac=19)

    recovered = await cluster.client().open_ledger(handle.ledger_id, recover=True)
    assert recovered.last_add_confirmed == 20  # never earlier than the last acknowledged (19)
    metadata = await cluster.metadata(handle.ledger_id)
    assert (metadata.state, metadata.last_entry_id) == ("CLOSED", 20)
    # Exact: the nodes' last entry 19 came with the writer's length up to it; the tail adds its own.
    assert recovered.length == metadata.length == sum(map(len, datas)) + len(tail)
    # Re-replication filled both copies of the tail entry.
    assert await cluster.holders(handle.ledger_id, 20, tail) == set(metadata.write_set(20))
    assert await read_all(recovered, 20) == [*datas, tail]
    # The old writer is fenced: its next add, and every later one, fail at once.
    with pytest.raises(errors.FencedError):
        await asyncio.wait_for(handle.add_entry(b"stale"), DEADLINE)
    with pytest.raises(errors.FencedError):
        await handle.add_entry(b"stale again")
    assert len((await cluster.metadata(handle.ledger_id)).ensembles) == 1  # no ensemble change for FENCED
    # Opening it again just reads the closed ledger.
    again = await cluster.client().open_ledger(handle.ledger_id, recover=True)
    assert again.closed and again.last_add_confirmed == 20


async def test_recovery_after_an_ensemble_change_reads_the_last_ensemble_and_knows_the_exact_length(
        cluster: Cluster) -> None:
    await cluster.add_nodes(4)
    writer, handle, _, _ = await kill_mid_stream(cluster)
    metadata = await cluster.metadata(handle.ledger_id)
    lacs = [(await cluster.stub(address).ReadLastAddConfirmed(
        storage_pb2.LacRequest(ledger_id=handle.ledger_id), timeout=DEADLINE)).last_add_confirmed
        for address in metadata.ensemble]
    lac = max([*lacs, metadata.ensemble_start - 1])
    last = max(writer.acked)
    recovered = await cluster.client().open_ledger(handle.ledger_id, recover=True)
    assert recovered.last_add_confirmed == last
    sizes = {entry_id: len(data) for entry_id, data in writer.acked.items()}
    assert metadata.length == sum(sizes[e] for e in range(metadata.ensemble_start))  # recorded at the change
    assert lac < last
    # Exact (the writer's length came with each add), not only what is known without reading the
    # ledger (metadata.length and the entries after the LAC).
    assert recovered.length == sum(sizes[e] for e in range(last + 1))
    assert await read_all(recovered, last) == [writer.acked[e] for e in range(last + 1)]


async def test_a_writer_that_dies_after_n_adds_leaves_a_ledger_recovered_to_its_exact_length(
        cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    handle = await cluster.client().create_ledger(3, 2, 2)
    datas = [payload(i, size=100 + 37 * i) for i in range(50)]
    for data in datas:  # one at a time: each add carries the LAC of the one before, so recovery
        await handle.add_entry(data)  # reads only the last one; then the writer is dropped, never closed
    ledger_id = handle.ledger_id
    del handle
    recovered = await cluster.client().open_ledger(ledger_id, recover=True)
    assert recovered.last_add_confirmed == 49
    assert recovered.length == (await cluster.metadata(ledger_id)).length == sum(map(len, datas))
    # Opening it again reads the closed ledger's length.
    again = await cluster.client().open_ledger(ledger_id, recover=True)
    assert again.length == sum(map(len, datas))


async def test_entries_written_without_lengths_recover_to_the_lower_bound_as_before(cluster: Cluster) -> None:
    # A writer from before lengths were piggybacked: its adds carry none (the nodes store -1).
    await cluster.add_nodes(2)
    handle = await cluster.client().create_ledger(2, 2, 2)
    datas = [payload(i) for i in range(5)]
    for i, data in enumerate(datas):
        for address in handle.metadata.write_set(i):
            await cluster.add_directly(address, handle.ledger_id, i, data, lac=i - 1)
    recovered = await cluster.client().open_ledger(handle.ledger_id, recover=True)
    assert recovered.last_add_confirmed == 4
    assert await read_all(recovered, 4) == datas
    # What is known without the lengths: the entries after the LAC the nodes reported (3).
    assert recovered.length == len(datas[4])


async def test_two_racing_recoverers_close_the_ledger_the_same_way(cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    handle = await cluster.client().create_ledger(3, 2, 2)
    datas = [payload(i) for i in range(10)]
    await add_all(handle, datas)
    await cluster.add_directly(handle.metadata.write_set(10)[1], handle.ledger_id, 10, b"tail", lac=9)
    first, second = await asyncio.gather(cluster.client().open_ledger(handle.ledger_id),
                                         cluster.client().open_ledger(handle.ledger_id))
    metadata = await cluster.metadata(handle.ledger_id)
    assert metadata.state == "CLOSED"
    assert first.metadata.to_bytes() == second.metadata.to_bytes() == metadata.to_bytes()
    assert first.last_add_confirmed == second.last_add_confirmed == 10
    assert await read_all(first, 10) == [*datas, b"tail"]


async def test_recovery_resumes_a_ledger_left_in_recovery(cluster: Cluster) -> None:
    await cluster.add_nodes(2)
    handle = await cluster.client().create_ledger(2, 2, 2)
    await add_all(handle, [b"a", b"b", b"c"])
    found = await cluster.store.get(ledger_key(handle.ledger_id))
    assert found is not None
    marked = LedgerMetadata.from_bytes(found.value)
    marked.state = "IN_RECOVERY"  # a recoverer died after marking it
    await cluster.store.put(ledger_key(handle.ledger_id), marked.to_bytes(), expected_version=found.version)
    recovered = await cluster.client().open_ledger(handle.ledger_id)
    assert recovered.closed and recovered.last_add_confirmed == 2 and recovered.length == 3


async def test_recovery_tolerates_an_unreachable_node_but_not_too_many(cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(3)
    handle = await cluster.client().create_ledger(3, 2, 2)
    datas = [payload(i) for i in range(9)]
    await add_all(handle, datas)
    await nodes[0].stop()
    await nodes[1].stop()
    with pytest.raises(errors.ServiceNotReadyError, match=r"fenced on 1 of the 3 storage nodes .* 2 are needed"):
        await cluster.client().open_ledger(handle.ledger_id)
    assert (await cluster.metadata(handle.ledger_id)).state == "IN_RECOVERY"
    await nodes[1].start()
    client = cluster.client()
    await until_reachable(client, nodes[1].address)
    # E - Qa + 1 = 2 fenced nodes are enough: no ack quorum can form without one of them.
    recovered = await client.open_ledger(handle.ledger_id)
    assert recovered.closed and recovered.last_add_confirmed == 8
    assert await read_all(recovered, 8) == datas
    # The recovered entries went to the live nodes, as the writer would have shrunk its ensemble.
    metadata = await cluster.metadata(handle.ledger_id)
    live = {nodes[1].address, nodes[2].address}
    assert set(metadata.ensemble) == live
    for entry_id, data in enumerate(datas):
        assert await cluster.holders(handle.ledger_id, entry_id, data) >= set(metadata.write_set(entry_id))


async def test_recovery_fails_when_it_cannot_tell_whether_the_next_entry_was_acknowledged(
        cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(3)
    handle = await cluster.client().create_ledger(3, 3, 2)
    await add_all(handle, [b"a", b"b"])
    # Entry 2 reached two nodes (an ack quorum: it may have been acknowledged), both now damaged.
    marker = b"<maybe acknowledged>"
    damaged = nodes[:2]
    for node in damaged:
        await cluster.add_directly(node.address, handle.ledger_id, 2, marker + os.urandom(300), lac=1)
        await node.stop()
        await asyncio.to_thread(flip_byte_after, node.data_dir / "entrylog", marker)
        await node.start()
    with pytest.raises(errors.ServiceNotReadyError, match="whether entry 2 was acknowledged is unknown"):
        await cluster.client().open_ledger(handle.ledger_id)


async def test_recovery_fails_when_re_replication_reaches_fewer_than_qa_nodes(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    await cluster.add_nodes(2)
    handle = await cluster.client().create_ledger(2, 2, 2)
    await add_all(handle, [b"a"])
    await cluster.add_directly(handle.metadata.ensemble[0], handle.ledger_id, 1, b"tail", lac=0)
    client = cluster.client()
    refusing = client.node(handle.metadata.ensemble[1])

    def refuse(frame: AddFrame) -> asyncio.Future[storage_pb2.AddResponse]:
        future: asyncio.Future[storage_pb2.AddResponse] = asyncio.get_running_loop().create_future()
        future.set_exception(errors.ServiceNotReadyError("test: the node is stopping"))
        return future

    monkeypatch.setattr(refusing, "add", refuse)
    with pytest.raises(errors.ServiceNotReadyError, match="entry 1 reached only 1 storage nodes"):
        await client.open_ledger(handle.ledger_id)


async def test_a_writer_loses_its_close_to_a_recoverer(cluster: Cluster) -> None:
    await cluster.add_nodes(2)
    handle = await cluster.client().create_ledger(2, 2, 1)
    await add_all(handle, [b"a"])
    await cluster.client().open_ledger(handle.ledger_id)
    with pytest.raises(errors.FencedError, match="another broker took it over"):
        await handle.close()
