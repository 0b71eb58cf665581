"""Replication through the real storage client on several real storage nodes: write quorums, ensemble
changes when a node dies or hangs mid-write (replacement or shrink), reads that fail over (errors,
timeouts, corruption), ledger recovery and fencing, and node health.

Nodes run in-process (StorageServer on a fixed free port, so a stopped one can come back on the same
address) or, to be paused with SIGSTOP, as `herald storage` processes. Every check polls with a
deadline; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio
import pytest
from herald.api.v1 import storage_pb2, storage_pb2_grpc
from herald.common import errors
from herald.common.transport.rpc import channel_options, error_from_rpc
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.storage.client.ledger_handle import LedgerHandle
from herald.storage.client.ledger_metadata import LedgerMetadata, ledger_key, read_ledger_metadata
from herald.storage.client.node_connection import NodeConnection
from herald.storage.client.storage_client import StorageClient
from herald.storage.node.entry_log import SUFFIX as ENTRY_LOG_SUFFIX
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings

from tests.conftest import VENV_BIN

DEADLINE = 60.0  # bounds every wait; never asserted as a duration
# Short node timeouts so that a failure is noticed quickly; never asserted either.
ADD_TIMEOUT = 1.0
READ_TIMEOUT = 1.0


# ---- nodes --------------------------------------------------------------------------------------


class InProcessNode:
    """A StorageServer in this process: stop() and start() again on the same address (the port it got
    first, so that no other test can take it between free_port() and the bind)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.server: StorageServer | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.server = StorageServer(StorageSettings(data_dir=str(self.data_dir), port=self.port, stop_grace=0.0,
                                                    checkpoint_interval=3600.0, metrics_port=-1))
        await self.server.start()
        self.port = self.server.port

    async def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            await server.stop()

    @property
    def running(self) -> bool:
        return self.server is not None


class ProcessNode:
    """`herald storage` as a subprocess, which SIGSTOP can pause with its connections left open."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.env = env
        self.port = 0  # the node picks a free one and says which
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab") as log:
            return subprocess.Popen(
                [str(VENV_BIN / "herald"), "storage", "--data-dir", str(self.data_dir), "--port", str(self.port),
                 "--metrics-port", "-1"],
                stdout=subprocess.PIPE, stderr=log, env=self.env)

    async def start(self) -> None:
        self.proc = await asyncio.to_thread(self._spawn)
        assert self.proc.stdout is not None
        line = (await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), DEADLINE)).decode()
        assert line.startswith("storage listening on 127.0.0.1:"), line
        self.port = int(line.strip().rsplit(":", 1)[1])

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    async def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.paused:
            self.resume()
        self.proc.terminate()
        try:
            await asyncio.to_thread(self.proc.wait, DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, DEADLINE)


@dataclass
class Cluster:
    """Storage nodes, a metadata store, and storage clients over them (all stopped after the test)."""

    tmp_path: Path
    env: dict[str, str]
    store: EmbeddedMetadataStore
    nodes: list[InProcessNode | ProcessNode] = field(default_factory=list)
    clients: list[StorageClient] = field(default_factory=list)
    channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)

    async def add_nodes(self, count: int, *, processes: bool = False) -> list[InProcessNode | ProcessNode]:
        made: list[InProcessNode | ProcessNode] = []
        for _ in range(count):
            data_dir = self.tmp_path / f"node{len(self.nodes)}"
            node: InProcessNode | ProcessNode = (ProcessNode(data_dir, self.env) if processes
                                                 else InProcessNode(data_dir))
            self.nodes.append(node)
            made.append(node)
        await asyncio.gather(*(node.start() for node in made))
        return made

    def client(self, **options: float) -> StorageClient:
        settings = {"add_timeout": ADD_TIMEOUT, "read_timeout": READ_TIMEOUT, **options}
        client = StorageClient(self.store, [n.address for n in self.nodes], operation_timeout=5.0, **settings)
        self.clients.append(client)
        return client

    def node(self, address: str) -> InProcessNode | ProcessNode:
        return next(n for n in self.nodes if n.address == address)

    # ---- looking at the nodes directly, past the client ------------------------------------

    def stub(self, address: str) -> storage_pb2_grpc.StorageServiceAsyncStub:
        if address not in self.channels:
            self.channels[address] = grpc.aio.insecure_channel(address, options=channel_options())
        return storage_pb2_grpc.StorageServiceStub(self.channels[address])  # type: ignore[return-value]

    async def held(self, address: str, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's bytes on that node, or None if the node does not hold it."""
        request = storage_pb2.ReadRequest(ledger_id=ledger_id, first_entry_id=entry_id, last_entry_id=entry_id)
        try:
            async for chunk in self.stub(address).ReadEntries(request, timeout=DEADLINE):
                for entry in chunk.entries:
                    return bytes(entry.data)
        except grpc.aio.AioRpcError as exc:
            if isinstance(error_from_rpc(exc), errors.EntryNotFoundError | errors.LedgerNotFoundError):
                return None
            raise
        return None

    async def holders(self, ledger_id: int, entry_id: int, data: bytes) -> set[str]:
        """The running nodes holding the entry with exactly these bytes."""
        found = set()
        for node in self.nodes:
            if node.running and await self.held(node.address, ledger_id, entry_id) == data:
                found.add(node.address)
        return found

    async def add_directly(self, address: str, ledger_id: int, entry_id: int, data: bytes, lac: int) -> None:
        """An add straight to one node, as a writer that died right after sending it would leave."""
        async def one() -> AsyncIterator[storage_pb2.AddRequest]:
            yield storage_pb2.AddRequest(request_id=1, ledger_id=ledger_id, entry_id=entry_id, data=data,
                                         last_add_confirmed=lac)

        async for response in self.stub(address).AddEntries(one(), timeout=DEADLINE):
            assert not response.HasField("error"), response.error

    async def metadata(self, ledger_id: int) -> LedgerMetadata:
        return (await read_ledger_metadata(self.store, ledger_id))[0]


@pytest.fixture
async def cluster(tmp_path: Path, herald_env: dict[str, str]) -> AsyncIterator[Cluster]:
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    made = Cluster(tmp_path, herald_env, store)
    try:
        yield made
    finally:
        for client in made.clients:
            await client.close()
        for channel in made.channels.values():
            await channel.close(None)
        for node in made.nodes:
            await node.stop()
        await store.close()


# ---- helpers ------------------------------------------------------------------------------------


def payload(i: int, size: int = 1024) -> bytes:
    return f"<entry {i}>".encode() + os.urandom(size - 16) + b"</entry>"


async def until(predicate: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Poll until predicate() holds, failing with `what` after the deadline."""
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


class Writer:
    """Adds entries with `window` in flight until stopped, recording what was acknowledged and in
    which order, the way a Jepsen checker records a history."""

    def __init__(self, handle: LedgerHandle, window: int = 16) -> None:
        self.handle = handle
        self.window = window
        self.acked: dict[int, bytes] = {}
        self.order: list[int] = []
        self.failures: list[BaseException] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        slots = asyncio.Semaphore(self.window)
        adds: set[asyncio.Task[None]] = set()
        i = 0
        while not self._stop.is_set() and not self.failures:
            await slots.acquire()
            task = asyncio.create_task(self._add(payload(i), slots))
            adds.add(task)
            task.add_done_callback(adds.discard)
            i += 1
        await asyncio.gather(*adds)

    async def _add(self, data: bytes, slots: asyncio.Semaphore) -> None:
        try:
            entry_id = await self.handle.add_entry(data)
            self.acked[entry_id] = data
            self.order.append(entry_id)
        except errors.HeraldError as exc:
            self.failures.append(exc)
        finally:
            slots.release()

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await asyncio.wait_for(self._task, DEADLINE)

    async def write_more(self, count: int) -> None:
        """Wait until `count` more adds were acknowledged (or one failed)."""
        target = len(self.acked) + count
        await until(lambda: len(self.acked) >= target or bool(self.failures), f"{count} more adds are acknowledged")


async def add_all(handle: LedgerHandle, datas: list[bytes]) -> list[int]:
    """Add all at once (pipelined: every add leaves before any is acknowledged)."""
    return list(await asyncio.gather(*(handle.add_entry(d) for d in datas)))


async def reachable(client: StorageClient, address: str) -> bool:
    """Whether the client's connection to the node answers (again, after a restart)."""
    try:
        await client.node(address).last_add_confirmed(0)
    except errors.HeraldError:
        return False
    return True


async def until_reachable(client: StorageClient, *addresses: str) -> None:
    for address in addresses:
        await until(lambda address=address: reachable(client, address),  # type: ignore[misc]
                    f"{address} answers the client again")


async def read_all(handle: LedgerHandle, last: int) -> list[bytes]:
    return [data for _, data in await asyncio.wait_for(handle.read_entries(0, last), DEADLINE)]


def flip_byte_after(directory: Path, marker: bytes) -> None:
    """Damage one byte of the entry that starts with marker in an entry log file."""
    for path in sorted(directory.glob(f"*{ENTRY_LOG_SUFFIX}")):
        content = path.read_bytes()
        at = content.find(marker)
        if at >= 0:
            with open(path, "r+b") as f:
                f.seek(at + len(marker) + 5)
                f.write(bytes([content[at + len(marker) + 5] ^ 0x40]))
            return
    raise AssertionError(f"{marker!r} is in no entry log file of {directory}")


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


async def _kill_mid_stream(cluster: Cluster) -> tuple[Writer, LedgerHandle, str, int]:
    """Write a stream of concurrent adds, stop one ensemble node in the middle, write on; return the
    writer, the handle, the stopped node and the first entry acknowledged after the stop."""
    handle = await cluster.client().create_ledger(3, 2, 2)
    writer = Writer(handle)
    writer.start()
    await writer.write_more(100)
    victim = handle.metadata.ensemble[1]
    await cluster.node(victim).stop()
    after = len(writer.acked)
    await writer.write_more(200)
    await writer.stop()
    assert writer.failures == []
    return writer, handle, victim, after


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
    writer, handle, victim, _ = await _kill_mid_stream(cluster)
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
    writer, handle, victim, _ = await _kill_mid_stream(cluster)
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


# ---- recovery and fencing -----------------------------------------------------------------------


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
    # The length known without reading the ledger: entries before its last ensemble (none) plus
    # those recovered after the LAC the nodes reported (19).
    assert recovered.length == metadata.length == len(tail)
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


async def test_recovery_after_an_ensemble_change_reads_the_last_ensemble_and_counts_what_it_knows(
        cluster: Cluster) -> None:
    await cluster.add_nodes(4)
    writer, handle, _, _ = await _kill_mid_stream(cluster)
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
    assert recovered.length == metadata.length + sum(sizes[e] for e in range(lac + 1, last + 1))
    assert await read_all(recovered, last) == [writer.acked[e] for e in range(last + 1)]


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

    def refuse(request: storage_pb2.AddRequest) -> asyncio.Future[storage_pb2.AddResponse]:
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
    _, handle, victim, _ = await _kill_mid_stream(cluster)
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
