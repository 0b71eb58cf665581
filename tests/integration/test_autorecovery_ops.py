"""Autorecovery's parts against in-process storage nodes: a fragment re-replicated while its ledger
is written (the writer merges that change into its own compare-and-sets), a drain that has no spare
node to go to, and the auditor's report when no node can take a fragment."""

from __future__ import annotations

from herald.autorecovery.auditor import Auditor
from herald.autorecovery.replicate import FragmentReplicationOp
from herald.storage.client.ledger_metadata import read_ledger_metadata
from herald.storage.client.storage_client import StorageClient
from herald.storage.membership import StorageNodeRecord
from herald.storage.node.registration import NodeRegistration

from tests.integration import storage_cluster
from tests.integration.storage_cluster import Cluster, add_all, payload, read_all, until

cluster = storage_cluster.cluster  # the fixture: storage nodes, a metadata store, storage clients


async def test_a_fragment_re_replicated_under_an_open_ledger_is_merged_by_its_writer(cluster: Cluster) -> None:
    a, b, c, d = [node.address for node in await cluster.add_nodes(4)]
    client = cluster.client()
    client.pool.use_registered([a, b, c])
    handle = await client.create_ledger(2, 2, 2)
    first = [payload(i) for i in range(10)]
    await add_all(handle, first)
    old = handle.metadata.ensemble
    handle.leave_nodes({old[0]})  # a drain: the writer moves off it by an ensemble change
    await until(lambda: len(handle.metadata.ensembles) == 2, "the writer changed its ensemble")
    assert old[0] not in handle.metadata.ensemble
    more = [payload(i) for i in range(10, 20)]
    await add_all(handle, more)

    # Autorecovery copies the first fragment off the drained node (to d) and records it by CAS.
    metadata, _ = await read_ledger_metadata(cluster.store, handle.ledger_id)
    spare = next(n for n in (a, b, c, d) if n not in old)
    op = FragmentReplicationOp(client.pool, cluster.store, metadata, 0, 9, old[0], spare)
    await op.run()
    assert op.copied_entries == 10
    for i, data in enumerate(first):
        assert await cluster.held(spare, handle.ledger_id, i) == data

    # The writer's next compare-and-sets (an ensemble change, the close) keep that change.
    await add_all(handle, [payload(i) for i in range(20, 25)])
    await handle.close()
    closed, _ = await read_ledger_metadata(cluster.store, handle.ledger_id)
    assert closed.state == "CLOSED" and closed.last_entry_id == 24
    assert old[0] not in closed.all_nodes() and spare in closed.ensembles[0][1]
    reader = await client.open_ledger(handle.ledger_id)
    assert (await read_all(reader, 19))[:20] == first + more


async def test_a_drain_with_no_spare_node_leaves_the_writer_on_it(cluster: Cluster) -> None:
    a, b = [node.address for node in await cluster.add_nodes(2)]
    client = cluster.client()
    handle = await client.create_ledger(2, 2, 2)
    await add_all(handle, [payload(0)])
    handle.leave_nodes({a})
    assert sorted(handle.metadata.ensemble) == sorted([a, b])
    await add_all(handle, [payload(1)])  # no shrink below Qw, no failed adds
    assert handle.last_add_confirmed == 1


async def test_the_auditor_reports_a_fragment_with_no_node_to_go_to(cluster: Cluster) -> None:
    a, b = [node.address for node in await cluster.add_nodes(2)]
    writer = cluster.client()
    handle = await writer.create_ledger(2, 2, 2)
    await add_all(handle, [payload(0), payload(1)])
    await handle.close()
    storage = StorageClient(cluster.store, [], discover=True)
    cluster.clients.append(storage)
    assert storage.registry is not None
    storage.registry.records = {a: StorageNodeRecord(a, 1, "draining"), b: StorageNodeRecord(b, 1)}
    report = await Auditor(storage, grace_seconds=60).audit()
    assert report.fragments_copied == 0
    assert any(f"entries 0..1 on {a}: no available storage node outside its ensemble" in problem
               for problem in report.problems), report.problems


async def test_a_writer_moves_off_a_node_whose_registration_ends_without_writing(cluster: Cluster) -> None:
    nodes = [node.address for node in await cluster.add_nodes(3)]
    registrations = {address: NodeRegistration(cluster.store, address, str(cluster.tmp_path), ttl=5.0)
                     for address in nodes}
    for registration in registrations.values():
        await registration.start()
    try:
        client = cluster.client()
        await client.start()  # follows the registrations
        await until(lambda: sorted(client.addresses) == sorted(nodes), "the client saw every registration")
        handle = await client.create_ledger(2, 2, 2)
        await add_all(handle, [payload(0), payload(1)])
        gone = handle.metadata.ensemble[0]
        await registrations[gone].stop()  # as when its lease expires: the node is gone
        # The writer is idle: only the registry tells it; it changes its ensemble from LAC + 1.
        await until(lambda: gone not in handle.metadata.ensemble, "the writer left the unregistered node")
        recorded, _ = await read_ledger_metadata(cluster.store, handle.ledger_id)
        assert gone not in recorded.ensemble and len(recorded.ensemble) == 2
    finally:
        for registration in registrations.values():
            await registration.stop()
