"""Replication through the real storage client on several real storage nodes: write quorums, an add
serialized once for its write set and completed in entry order, ensemble changes when a node dies or
hangs mid-write (replacement or shrink), reads that fail over (errors, timeouts, corruption), and
node health. Ledger recovery and fencing: test_ledger_recovery.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import pytest
from herald.api.v1 import storage_pb2
from herald.common import errors
from herald.storage.client.ledger_handle import LedgerHandle
from herald.storage.client.ledger_metadata import LedgerMetadata, ledger_key
from herald.storage.client.node_connection import NodeConnection

from tests.integration import storage_cluster
from tests.integration.storage_cluster import (
    DEADLINE,
    Cluster,
    ProcessNode,
    Writer,
    add_all,
    flip_byte_after,
    kill_mid_stream,
    payload,
    read_all,
    until,
    until_reachable,
)

cluster = storage_cluster.cluster  # the fixture: storage nodes, a metadata store, storage clients


# ---- adds ---------------------------------------------------------------------------------------


async def test_an_add_is_serialized_once_for_its_whole_write_set(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    await cluster.add_nodes(3)
    client = cluster.client(add_timeout=DEADLINE)  # no ensemble change on a slow machine: every node gets every add
    handle = await client.create_ledger(3, 3, 2)
    given: dict[str, list[object]] = {}  # what each node's connection was given to send, in order
    for address in handle.metadata.ensemble:
        connection = client.node(address)

        def recording(frame: object, address: str = address, send: Callable[..., Any] = connection.add) -> Any:
            given.setdefault(address, []).append(frame)
            return send(frame)

        monkeypatch.setattr(connection, "add", recording)
    datas = [payload(i, size=100_000) for i in range(4)]
    await add_all(handle, datas)
    # Every node was given the very same serialized add (BookKeeper's one buffer for every bookie)...
    assert sorted(given) == sorted(handle.metadata.ensemble)
    for entry_id in range(len(datas)):
        assert len({id(frames[entry_id]) for frames in given.values()}) == 1, f"entry {entry_id}"
    # ... and each node stores exactly the entry's bytes.
    for entry_id, data in enumerate(datas):
        assert await cluster.holders(handle.ledger_id, entry_id, data) == set(handle.metadata.ensemble)


async def test_adds_complete_in_entry_order_through_their_callbacks_with_no_task_per_add(cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    handle = await cluster.client(add_timeout=DEADLINE).create_ledger(3, 2, 2)
    completed: list[tuple[int, errors.HeraldError | None]] = []
    tasks_before = len(asyncio.all_tasks())
    for i in range(500):
        handle.add_entry_nowait(payload(i, size=200), lambda entry_id, error: completed.append((entry_id, error)))
    # 500 adds in flight: never completed from within the call, and no task of their own (only
    # each node's add stream and its response reader).
    assert completed == []
    assert len(asyncio.all_tasks()) <= tasks_before + 2 * 3
    await until(lambda: len(completed) == 500, "every add completed")
    assert completed == [(i, None) for i in range(500)]
    assert handle.last_add_confirmed == 499


async def test_an_add_refused_at_once_raises_and_queues_nothing(cluster: Cluster) -> None:
    await cluster.add_nodes(2)
    handle = await cluster.client().create_ledger(2, 2, 2)
    await add_all(handle, [b"a"])
    await handle.close()
    with pytest.raises(errors.PersistenceError, match="is not open for writing"):
        handle.add_entry_nowait(b"late", lambda entry_id, error: None)
    assert handle.last_add_confirmed == 0


# ---- quorums ------------------------------------------------------------------------------------


async def test_3_2_2_stores_each_entry_on_exactly_its_two_nodes_and_reads_survive_any_node_down(
        cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    client = cluster.client()
    handle = await client.create_ledger(3, 2, 2)
    datas = [payload(i) for i in range(30)]
    assert await add_all(handle, datas[:29]) == list(range(29))
    assert await handle.add_entry(datas[29]) == 29
    metadata = await cluster.metadata(handle.ledger_id)
    assert len(metadata.ensemble) == 3 and metadata.ensembles == [(0, metadata.ensemble)]
    for entry_id, data in enumerate(datas):
        assert await cluster.holders(handle.ledger_id, entry_id, data) == set(metadata.write_set(entry_id))
    for node in cluster.nodes:
        lac = await cluster.stub(node.address).ReadLastAddConfirmed(
            storage_pb2.LacRequest(ledger_id=handle.ledger_id), timeout=DEADLINE)
        # The writer piggybacks its LAC on every add: entry 29 left once 0..28 were acknowledged.
        assert lac.last_add_confirmed == (28 if node.address in metadata.write_set(29) else -1)

    for node in cluster.nodes:
        await node.stop()
        assert await read_all(handle, 29) == datas
        reader = await cluster.client().open_ledger(handle.ledger_id, recover=False)
        assert reader.last_add_confirmed == 28
        assert await read_all(reader, 28) == datas[:29]
        await node.start()
        await until_reachable(client, node.address)


async def test_adds_queued_together_leave_in_messages_a_node_takes(cluster: Cluster) -> None:
    """Adds queued while the stream is busy leave together, but in messages of at most 8 MiB: a
    node takes requests of 16 MiB (grpc_max_receive_message_bytes), and 40 MiB of adds at once
    all succeed."""
    await cluster.add_nodes(1)
    client = cluster.client(add_timeout=DEADLINE)
    handle = await client.create_ledger(1, 1, 1)
    datas = [payload(i, 1024 * 1024) for i in range(40)]
    assert await add_all(handle, datas) == list(range(40))
    assert await read_all(handle, 39) == datas


async def test_reads_of_a_striped_ledger_take_runs_of_entries_per_node(cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    client = cluster.client()
    handle = await client.create_ledger(3, 2, 2)
    datas = [payload(i, 64) for i in range(12)]
    await add_all(handle, datas)
    reads: list[tuple[int, int]] = []
    for node in cluster.nodes:
        count_reads(client.node(node.address), reads)
    assert await read_all(handle, 11) == datas
    # Each node of a 3/2 ledger holds runs of two consecutive entries: one read per run, not per entry.
    assert sorted(reads) == [(i, i + 1) for i in range(0, 12, 2)]


def count_reads(connection: NodeConnection, reads: list[tuple[int, int]]) -> None:
    original = connection.read

    async def read(ledger_id: int, first: int, last: int) -> list[tuple[int, bytes]]:
        reads.append((first, last))
        return await original(ledger_id, first, last)

    connection.read = read  # type: ignore[method-assign]


# ---- ensemble changes ---------------------------------------------------------------------------


async def _check_every_acked_entry(cluster: Cluster, handle: LedgerHandle, writer: Writer) -> None:
    assert writer.order == sorted(writer.order)  # completions came in entry order
    assert sorted(writer.acked) == list(range(len(writer.acked)))  # no gap
    last = max(writer.acked)
    expected = [writer.acked[i] for i in range(last + 1)]
    assert await read_all(handle, last) == expected
    reader = await cluster.client().open_ledger(handle.ledger_id, recover=True)
    assert reader.last_add_confirmed >= last
    assert (await read_all(reader, last)) == expected


async def test_a_node_stopped_mid_stream_is_replaced_and_every_acknowledged_entry_survives(
        cluster: Cluster) -> None:
    await cluster.add_nodes(4)
    writer, handle, victim, _ = await kill_mid_stream(cluster)
    metadata = await cluster.metadata(handle.ledger_id)
    assert len(metadata.ensembles) == 2, metadata.ensembles
    (_, old), (start, new) = metadata.ensembles
    assert victim in old and victim not in new and len(new) == 3
    (replacement,) = set(new) - set(old)
    assert new.index(replacement) == old.index(victim)  # the replacement takes the failed node's place
    assert 0 < start <= max(writer.acked)
    on_replacement = 0
    for entry_id in range(start, max(writer.acked) + 1):
        holders = await cluster.holders(handle.ledger_id, entry_id, writer.acked[entry_id])
        assert set(metadata.write_set(entry_id)) <= holders
        on_replacement += replacement in holders
    assert on_replacement > 0
    await _check_every_acked_entry(cluster, handle, writer)


async def test_with_no_spare_node_the_ensemble_shrinks_to_its_live_nodes(cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    writer, handle, victim, _ = await kill_mid_stream(cluster)
    metadata = await cluster.metadata(handle.ledger_id)
    (_, old), (start, new) = metadata.ensembles
    assert sorted(new) == sorted(set(old) - {victim})
    for entry_id in range(start, max(writer.acked) + 1):
        assert await cluster.holders(handle.ledger_id, entry_id, writer.acked[entry_id]) == set(new)
    # Writing continues on the shrunk ensemble, and a normal close records it.
    (more,) = await add_all(handle, [b"after"])
    await handle.close()
    closed = await cluster.metadata(handle.ledger_id)
    assert (closed.state, closed.last_entry_id) == ("CLOSED", more)
    assert closed.length == sum(map(len, writer.acked.values())) + len(b"after")
    await _check_every_acked_entry(cluster, handle, writer)


async def test_a_rolling_restart_keeps_a_ledger_writing_on_nodes_back_from_quarantine(cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(3)
    client = cluster.client()
    handle = await client.create_ledger(3, 2, 2)
    writer = Writer(handle)
    writer.start()
    await writer.write_more(100)
    for node in nodes[:2]:  # one at a time: stop, let the ensemble change, come back
        await node.stop()
        await until(lambda node=node: node.address not in handle.metadata.ensemble,  # type: ignore[misc]
                    f"{node.address} leaves the ensemble")
        await writer.write_more(50)
        await node.start()
        await until_reachable(client, node.address)
    # The second stop left one live node of the ensemble: the first node, still quarantined but
    # answering a probe, replaced it instead of the adds failing.
    await writer.write_more(100)
    await writer.stop()
    assert writer.failures == []
    metadata = await cluster.metadata(handle.ledger_id)
    assert nodes[0].address in metadata.ensemble and len(metadata.ensemble) == 2
    await _check_every_acked_entry(cluster, handle, writer)


async def test_fewer_than_qw_live_nodes_fail_the_adds_with_persistence_error(cluster: Cluster) -> None:
    await cluster.add_nodes(3)
    handle = await cluster.client().create_ledger(3, 3, 2)
    await add_all(handle, [b"a", b"b"])
    await cluster.nodes[0].stop()
    acknowledged = 1
    with pytest.raises(errors.PersistenceError, match="it needs Qw=3"):
        while True:  # Qa=2 may acknowledge an add before the failure of the third node shows
            acknowledged = await asyncio.wait_for(handle.add_entry(b"more"), DEADLINE)
    with pytest.raises(errors.PersistenceError):  # every later add fails too: no gaps
        await handle.add_entry(b"later")
    await handle.close()  # the managed ledger closes it at its last acknowledged entry and rolls over
    assert (await cluster.metadata(handle.ledger_id)).last_entry_id == acknowledged


async def test_a_paused_node_is_replaced_after_the_add_timeout_and_resuming_it_breaks_nothing(
        cluster: Cluster) -> None:
    await cluster.add_nodes(4, processes=True)
    handle = await cluster.client().create_ledger(3, 2, 2)
    writer = Writer(handle)
    writer.start()
    await writer.write_more(100)
    victim = cluster.node(handle.metadata.ensemble[0])
    assert isinstance(victim, ProcessNode)
    victim.pause()  # its TCP connections stay open: only the add timeout notices
    await writer.write_more(200)
    metadata = await cluster.metadata(handle.ledger_id)
    assert len(metadata.ensembles) >= 2 and victim.address not in metadata.ensemble
    assert len(metadata.ensemble) == 3  # replaced by the spare, not shrunk
    victim.resume()
    await writer.write_more(100)
    await writer.stop()
    assert writer.failures == []
    assert victim.address not in (await cluster.metadata(handle.ledger_id)).ensemble
    await _check_every_acked_entry(cluster, handle, writer)


async def test_a_read_from_a_paused_node_times_out_and_fails_over(cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(2, processes=True)
    handle = await cluster.client().create_ledger(2, 2, 2)
    datas = [payload(i) for i in range(5)]
    await add_all(handle, datas)
    paused, other = nodes
    assert isinstance(paused, ProcessNode)
    paused.pause()
    client = cluster.clients[0]
    client.pool.quarantine(other.address, RuntimeError("test: make the paused node the first choice"))
    assert await read_all(handle, 4) == datas
    assert client.pool.is_quarantined(paused.address)


async def test_recovery_with_a_paused_node_fences_the_others_and_leaves_it_out(cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(3, processes=True)
    handle = await cluster.client().create_ledger(3, 2, 2)
    datas = [payload(i) for i in range(12)]
    for data in datas:
        await handle.add_entry(data)
    paused = nodes[0]
    assert isinstance(paused, ProcessNode)
    paused.pause()
    recovered = await cluster.client().open_ledger(handle.ledger_id)  # its fence times out
    assert recovered.closed and recovered.last_add_confirmed == 11
    assert await read_all(recovered, 11) == datas
    metadata = await cluster.metadata(handle.ledger_id)
    assert paused.address not in metadata.ensemble  # recovered entries went to the live nodes only
    paused.resume()
    with pytest.raises(errors.FencedError):
        await asyncio.wait_for(add_all(handle, [b"stale"] * 3), DEADLINE)


async def test_an_ensemble_change_that_loses_its_cas_to_a_recoverer_fails_with_fenced(cluster: Cluster) -> None:
    await cluster.add_nodes(4)
    handle = await cluster.client().create_ledger(3, 2, 2)
    await add_all(handle, [b"a", b"b"])
    # A recoverer on another broker has marked the ledger but not yet fenced its nodes.
    found = await cluster.store.get(ledger_key(handle.ledger_id))
    assert found is not None
    marked = LedgerMetadata.from_bytes(found.value)
    marked.state = "IN_RECOVERY"
    await cluster.store.put(ledger_key(handle.ledger_id), marked.to_bytes(), expected_version=found.version)
    await cluster.node(handle.metadata.write_set(2)[0]).stop()
    with pytest.raises(errors.FencedError, match="IN_RECOVERY"):
        await asyncio.wait_for(handle.add_entry(b"c"), DEADLINE)
    with pytest.raises(errors.FencedError):
        await handle.add_entry(b"d")
    with pytest.raises(errors.FencedError):
        await handle.close()


async def test_an_ensemble_change_the_metadata_store_refuses_fails_the_adds(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    await cluster.add_nodes(4)
    handle = await cluster.client().create_ledger(3, 2, 2)
    await add_all(handle, [b"a"])

    async def broken_put(*args: object, **kwargs: object) -> int:
        raise errors.MetadataError("test: the metadata store is down")

    monkeypatch.setattr(cluster.store, "put", broken_put)
    await cluster.node(handle.metadata.write_set(1)[0]).stop()
    with pytest.raises(errors.PersistenceError, match="could not record its new ensemble"):
        await asyncio.wait_for(handle.add_entry(b"b"), DEADLINE)


async def test_an_ensemble_change_that_breaks_fails_the_adds_instead_of_hanging(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    await cluster.add_nodes(4)
    client = cluster.client()
    handle = await client.create_ledger(3, 2, 2)
    await add_all(handle, [b"a"])

    def broken(exclude: set[str]) -> str | None:
        raise RuntimeError("test: placement bug")

    monkeypatch.setattr(client.pool, "replacement", broken)
    await cluster.node(handle.metadata.write_set(1)[0]).stop()
    with pytest.raises(errors.PersistenceError, match="ensemble change failed"):
        await asyncio.wait_for(handle.add_entry(b"b"), DEADLINE)


async def test_closing_the_client_fails_the_adds_under_way(cluster: Cluster) -> None:
    await cluster.add_nodes(2)
    client = cluster.client()
    handle = await client.create_ledger(2, 2, 2)
    adds = [asyncio.create_task(handle.add_entry(payload(i))) for i in range(10)]
    await asyncio.sleep(0)  # the adds are on their way
    await client.close()
    results = await asyncio.gather(*adds, return_exceptions=True)
    assert all(isinstance(r, errors.PersistenceError) and "storage client is closed" in str(r) for r in results)
    with pytest.raises(errors.PersistenceError):
        await handle.add_entry(b"after")


# ---- reads --------------------------------------------------------------------------------------


async def test_a_corrupt_replica_is_logged_and_the_read_comes_from_the_other(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    damaged, healthy = await cluster.add_nodes(2)
    handle = await cluster.client().create_ledger(2, 2, 2)
    marker = b"<corrupt me>"
    datas = [payload(0), marker + os.urandom(2000), payload(2)]
    await add_all(handle, datas)
    await handle.close()
    await damaged.stop()  # its final checkpoint writes the entry log out
    await asyncio.to_thread(flip_byte_after, damaged.data_dir / "entrylog", marker)
    await damaged.start()

    client = cluster.client()
    client.pool.quarantine(healthy.address, RuntimeError("test: make the damaged node the first choice"))
    reader = await client.open_ledger(handle.ledger_id, recover=False)
    with caplog.at_level(logging.ERROR, logger="herald.storage"):
        assert await read_all(reader, 2) == datas
    corrupt = [r for r in caplog.records if r.levelno == logging.ERROR and "corrupt" in r.getMessage()]
    assert corrupt, caplog.text
    message = corrupt[0].getMessage()
    assert damaged.address in message and f"entry 1 of ledger {handle.ledger_id}" in message


async def test_a_read_fails_only_when_every_replica_fails(cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(2)
    handle = await cluster.client().create_ledger(2, 2, 2)
    marker = b"<corrupt everywhere>"
    await add_all(handle, [b"zero", marker + os.urandom(500)])
    await handle.close()
    for node in nodes:
        await node.stop()
        await asyncio.to_thread(flip_byte_after, node.data_dir / "entrylog", marker)
        await node.start()
    reader = await cluster.client().open_ledger(handle.ledger_id)
    with pytest.raises(errors.ChecksumError, match=f"entry 1 of ledger {handle.ledger_id} could not be read"):
        await reader.read_entries(0, 1)

    for node in nodes:
        await node.stop()
    with pytest.raises(errors.ServiceNotReadyError, match="retry once its storage nodes answer"):
        await reader.read_entries(0, 0)
    for node in nodes:
        await node.start()
    await until_reachable(cluster.clients[-1], *(node.address for node in nodes))
    for node in nodes:
        await cluster.stub(node.address).DeleteLedger(
            storage_pb2.DeleteLedgerRequest(ledger_id=handle.ledger_id), timeout=DEADLINE)
    with pytest.raises(errors.EntryNotFoundError, match="could not be read from any of its replicas"):
        await reader.read_entries(0, 0)


# ---- node health --------------------------------------------------------------------------------


async def test_create_ledger_shrinks_the_ensemble_to_the_healthy_nodes_but_not_below_qw(cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(3)
    client = cluster.client()
    client.pool.quarantine(nodes[0].address, RuntimeError("test"))
    handle = await client.create_ledger(3, 2, 2)
    assert sorted(handle.metadata.ensemble) == sorted(n.address for n in nodes[1:])
    await add_all(handle, [b"x"])
    await nodes[1].stop()
    client.pool.quarantine(nodes[1].address, RuntimeError("test"))
    # Too few healthy nodes: the quarantined ones are probed; the live one is released, which is enough.
    released = await client.create_ledger(3, 2, 2)
    assert sorted(released.metadata.ensemble) == sorted([nodes[0].address, nodes[2].address])
    assert not client.pool.is_quarantined(nodes[0].address)
    await nodes[0].stop()
    client.pool.quarantine(nodes[0].address, RuntimeError("test"))
    with pytest.raises(errors.ServiceNotReadyError,
                       match=r"E=3 Qw=2 Qa=2: it needs at least 2 healthy storage nodes and 1 of 3 storage nodes"):
        await client.create_ledger(3, 2, 2)


async def test_a_node_that_failed_is_quarantined_and_left_out_of_new_ledgers(cluster: Cluster) -> None:
    nodes = await cluster.add_nodes(3)
    client = cluster.client()
    handle = await client.create_ledger(3, 2, 1)
    await nodes[2].stop()
    # Each node is in some write set of three entries; Qa=1 may acknowledge them before the failure shows.
    await asyncio.wait_for(add_all(handle, [b"x", b"y", b"z"]), DEADLINE)
    await until(lambda: client.pool.is_quarantined(nodes[2].address), "the stopped node is quarantined")
    await until(lambda: nodes[2].address not in handle.metadata.ensemble, "the ensemble shrinks (no spare)")
    fresh = await client.create_ledger(3, 2, 2)
    assert nodes[2].address not in fresh.metadata.ensemble
    await nodes[2].start()
    assert nodes[2].address not in (await client.create_ledger(3, 2, 2)).metadata.ensemble


async def test_delete_ledger_drops_it_from_every_node_of_its_history(cluster: Cluster) -> None:
    await cluster.add_nodes(4)
    _, handle, victim, _ = await kill_mid_stream(cluster)
    await cluster.node(victim).start()
    await until_reachable(cluster.clients[0], victim)
    await handle.close()
    metadata = await cluster.metadata(handle.ledger_id)
    await cluster.clients[0].delete_ledger(handle.ledger_id)
    assert await cluster.store.get(ledger_key(handle.ledger_id)) is None
    for address in metadata.all_nodes():
        assert await cluster.held(address, handle.ledger_id, 0) is None
    with contextlib.suppress(errors.LedgerNotFoundError):
        await cluster.clients[0].delete_ledger(handle.ledger_id)
