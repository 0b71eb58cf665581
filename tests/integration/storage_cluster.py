"""Storage nodes and storage clients for the storage tests: nodes in-process (StorageServer on a
fixed free port, so a stopped one can come back on the same address) or, to be paused with SIGSTOP,
as `herald storage` processes; the `cluster` fixture; and helpers that poll with a deadline (nothing
asserts on durations) and record what a writer had acknowledged, as a Jepsen checker does.
"""

from __future__ import annotations

import asyncio
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
from herald.storage.client.ledger_metadata import LedgerMetadata, read_ledger_metadata
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


async def kill_mid_stream(cluster: Cluster) -> tuple[Writer, LedgerHandle, str, int]:
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
