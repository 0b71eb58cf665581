"""A real storage node process over real gRPC: adds, reads, fencing, LAC, deletes, errors, and what
survives SIGKILL (every acknowledged add, with the right bytes) and disk damage (never bad data)."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from herald.api.v1 import common_pb2, storage_pb2, storage_pb2_grpc
from herald.common import errors
from herald.common.transport.rpc import channel_options, error_from_proto, error_from_rpc
from herald.storage.node.entry_log import SUFFIX as ENTRY_LOG_SUFFIX
from herald.storage.node.journal import SUFFIX as JOURNAL_SUFFIX
from herald.storage.node.journal import JournalRecord, RecordKind, encode_header
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings

from tests.conftest import free_port, wait_for_port
from tests.helpers import eventually

DEADLINE = 30.0

NODE_SCRIPT = """
import asyncio, sys
from herald.storage.node.server import run_forever
from herald.storage.node.settings import StorageSettings
asyncio.run(run_forever(StorageSettings(data_dir=sys.argv[1], port=int(sys.argv[2]), checkpoint_interval=3600.0,
                                        metrics_port=-1)))
"""


class Node:
    """A storage node process on data_dir, and a channel to it."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: grpc.aio.Channel | None = None
        self.port = 0

    @property
    def stub(self) -> storage_pb2_grpc.StorageServiceAsyncStub:
        assert self.channel is not None
        return storage_pb2_grpc.StorageServiceStub(self.channel)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", NODE_SCRIPT, str(self.data_dir), str(self.port)],
                                stdout=subprocess.PIPE, env=self.env)

    async def start(self) -> None:
        self.port = free_port()
        self.proc = self._spawn()
        await asyncio.to_thread(wait_for_port, self.port, DEADLINE, self.proc)
        assert self.proc.stdout is not None
        line = await asyncio.to_thread(self.proc.stdout.readline)
        assert line.decode().strip() == f"storage listening on 127.0.0.1:{self.port}"
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}", options=channel_options())

    def kill_now(self) -> None:
        """SIGKILL, from inside a running stream of adds."""
        assert self.proc is not None
        self.proc.kill()

    async def kill(self) -> None:
        self.kill_now()
        await self._reap()

    async def stop(self) -> int:
        """SIGTERM: a graceful stop; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return await self._reap()

    async def _reap(self) -> int:
        assert self.proc is not None
        code = await asyncio.to_thread(self.proc.wait, DEADLINE)
        if self.channel is not None:
            await self.channel.close(None)
            self.channel = None
        return code


@pytest.fixture
async def nodes() -> AsyncIterator[list[Node]]:
    """Every node a test makes; any still running at the end is killed."""
    made: list[Node] = []
    yield made
    for node in made:
        if node.proc is not None and node.proc.poll() is None:
            await node.kill()


@pytest.fixture
async def node(nodes: list[Node], tmp_path: Path, herald_env: dict[str, str]) -> Node:
    n = Node(tmp_path / "storage", herald_env)
    nodes.append(n)
    await n.start()
    return n


async def add_all(node: Node, adds: list[storage_pb2.AddRequest]) -> list[storage_pb2.AddResponse]:
    async def requests() -> AsyncIterator[storage_pb2.AddRequest]:
        for add in adds:
            yield add

    call = node.stub.AddEntries(requests())
    return await asyncio.wait_for(_collect(call), DEADLINE)


async def _collect(call: AsyncIterable[storage_pb2.AddResponse]) -> list[storage_pb2.AddResponse]:
    return [response async for response in call]


def add_request(ledger: int, entry: int, data: bytes, *, lac: int = -1, recovery: bool = False,
                request_id: int = 0) -> storage_pb2.AddRequest:
    return storage_pb2.AddRequest(request_id=request_id, ledger_id=ledger, entry_id=entry, data=data,
                                  last_add_confirmed=lac, recovery=recovery)


async def read(node: Node, ledger: int, first: int, last: int, max_bytes: int = 0) -> list[tuple[int, bytes]]:
    request = storage_pb2.ReadRequest(ledger_id=ledger, first_entry_id=first, last_entry_id=last,
                                      max_bytes=max_bytes)
    entries: list[tuple[int, bytes]] = []
    async for chunk in node.stub.ReadEntries(request, timeout=DEADLINE):
        assert chunk.ledger_id == ledger
        entries.extend((e.entry_id, e.data) for e in chunk.entries)
    return entries


async def rpc_error(call: object) -> grpc.aio.AioRpcError:
    """The AioRpcError an RPC (awaitable or stream) fails with."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call  # type: ignore[misc]
    return info.value


def payload(ledger: int, entry: int, size: int = 100) -> bytes:
    return f"{ledger}:{entry}:".encode().ljust(size, b"#")


def files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"*{suffix}"))


def flip_byte_in_file_holding(directory: Path, marker: bytes) -> None:
    for path in files(directory, ENTRY_LOG_SUFFIX):
        content = path.read_bytes()
        at = content.find(marker)
        if at >= 0:
            with open(path, "r+b") as f:
                f.seek(at + len(marker) // 2)
                f.write(bytes([content[at + len(marker) // 2] ^ 0x10]))
            return
    raise AssertionError("the marker is in no entry log file")


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# ---- adds and reads ---------------------------------------------------------------------------


async def test_adds_and_reads_round_trip_over_the_stream(node: Node) -> None:
    sizes = [0, 1, 100, 100_000, 3_000_000]
    adds = [add_request(1, i, os.urandom(size), request_id=100 + i) for i, size in enumerate(sizes)]
    responses = await add_all(node, adds)
    assert [(r.request_id, r.ledger_id, r.entry_id, r.HasField("error")) for r in responses] == [
        (100 + i, 1, i, False) for i in range(len(sizes))]
    assert await read(node, 1, 0, 10) == [(a.entry_id, a.data) for a in adds]
    assert await read(node, 1, 3, 3) == [(3, adds[3].data)]


async def test_reads_come_in_chunks_of_at_most_max_bytes(node: Node) -> None:
    await add_all(node, [add_request(1, i, payload(1, i, 1000)) for i in range(20)])
    request = storage_pb2.ReadRequest(ledger_id=1, first_entry_id=0, last_entry_id=19, max_bytes=3000)
    chunks = [chunk async for chunk in node.stub.ReadEntries(request, timeout=DEADLINE)]
    assert [len(c.entries) for c in chunks] == [3, 3, 3, 3, 3, 3, 2]
    assert [e.data for c in chunks for e in c.entries] == [payload(1, i, 1000) for i in range(20)]


async def test_pipelined_adds_are_answered_in_request_order(node: Node) -> None:
    adds = [add_request(i % 4, i // 4, payload(i % 4, i // 4), request_id=i) for i in range(2000)]
    responses = await add_all(node, adds)
    assert [r.request_id for r in responses] == list(range(2000))
    assert not any(r.HasField("error") for r in responses)
    for ledger in range(4):
        assert await read(node, ledger, 0, 499) == [(e, payload(ledger, e)) for e in range(500)]


async def test_batched_adds_are_answered_in_request_order(node: Node) -> None:
    adds = [add_request(7, i, payload(7, i), lac=i - 1, request_id=i) for i in range(3000)]

    async def batches() -> AsyncIterator[storage_pb2.AddBatchRequest]:
        for start in range(0, len(adds), 256):
            yield storage_pb2.AddBatchRequest(adds=adds[start: start + 256])

    async def responses() -> list[storage_pb2.AddResponse]:
        return [r async for batch in node.stub.AddEntryBatches(batches()) for r in batch.responses]

    answered = await asyncio.wait_for(responses(), DEADLINE)
    assert [r.request_id for r in answered] == list(range(3000))
    assert not any(r.HasField("error") for r in answered)
    assert await read(node, 7, 0, 2999) == [(i, payload(7, i)) for i in range(3000)]
    lac = await node.stub.ReadLastAddConfirmed(storage_pb2.LacRequest(ledger_id=7), timeout=DEADLINE)
    assert (lac.last_entry_id, lac.last_add_confirmed) == (2999, 2998)


async def test_invalid_adds_get_an_error_and_the_stream_goes_on(node: Node) -> None:
    responses = await add_all(node, [
        add_request(1, -1, b"bad", request_id=1),
        add_request(-3, 0, b"bad", request_id=2),
        add_request(1, 0, b"good", request_id=3),
    ])
    assert [(r.request_id, r.error.code) for r in responses] == [
        (1, common_pb2.INVALID_ARGUMENT), (2, common_pb2.INVALID_ARGUMENT), (3, common_pb2.ERROR_CODE_UNSPECIFIED)]
    assert "entry id -1 is negative" in responses[0].error.message
    assert await read(node, 1, 0, 0) == [(0, b"good")]


# ---- errors -----------------------------------------------------------------------------------


async def test_reading_a_missing_ledger_or_entry_is_a_clear_error(node: Node) -> None:
    await add_all(node, [add_request(1, 0, b"only entry")])

    def request(ledger: int, first: int, last: int) -> storage_pb2.ReadRequest:
        return storage_pb2.ReadRequest(ledger_id=ledger, first_entry_id=first, last_entry_id=last)

    missing_ledger = await rpc_error(node.stub.ReadEntries(request(2, 0, 0), timeout=DEADLINE))
    assert missing_ledger.code() == grpc.StatusCode.NOT_FOUND
    assert missing_ledger.details() == f"{common_pb2.LEDGER_NOT_FOUND}:ledger 2 is not on this storage node"
    assert isinstance(error_from_rpc(missing_ledger), errors.LedgerNotFoundError)

    missing_entry = await rpc_error(node.stub.ReadEntries(request(1, 1, 5), timeout=DEADLINE))
    assert missing_entry.code() == grpc.StatusCode.NOT_FOUND
    assert (missing_entry.details() or "").startswith(f"{common_pb2.ENTRY_NOT_FOUND}:entry 1 of ledger 1")
    assert isinstance(error_from_rpc(missing_entry), errors.EntryNotFoundError)

    backwards = await rpc_error(node.stub.ReadEntries(request(1, 5, 1), timeout=DEADLINE))
    assert backwards.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert isinstance(error_from_rpc(backwards), errors.InvalidArgumentError)


@pytest.mark.parametrize("rpc", ["Fence", "DeleteLedger", "ReadLastAddConfirmed"])
async def test_a_negative_ledger_id_is_invalid(node: Node, rpc: str) -> None:
    request = {"Fence": storage_pb2.FenceRequest, "DeleteLedger": storage_pb2.DeleteLedgerRequest,
               "ReadLastAddConfirmed": storage_pb2.LacRequest}[rpc](ledger_id=-1)
    error = await rpc_error(getattr(node.stub, rpc)(request, timeout=DEADLINE))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.details() or "").startswith(f"{common_pb2.INVALID_ARGUMENT}:ledger id -1 is negative")


async def test_flipped_bytes_in_an_entry_log_file_give_a_checksum_error(node: Node) -> None:
    marker = b"<" + os.urandom(32) + b">" * 5000
    await add_all(node, [add_request(1, 0, b"intact"), add_request(1, 1, marker), add_request(1, 2, b"also")])
    await asyncio.to_thread(flip_byte_in_file_holding, node.data_dir / "entrylog", marker)

    # An add is answered after the journal's fsync and written to the entry log after that: until
    # the node has the entry log's copy in its index, reads come from the journaled bytes in memory.
    async def damaged_read() -> grpc.aio.AioRpcError:
        return await rpc_error(node.stub.ReadEntries(
            storage_pb2.ReadRequest(ledger_id=1, first_entry_id=1, last_entry_id=1), timeout=DEADLINE))

    error = await eventually(damaged_read, "the read of the damaged entry to fail", retry=(pytest.fail.Exception,))
    assert error.code() == grpc.StatusCode.DATA_LOSS
    assert (error.details() or "").startswith(f"{common_pb2.CHECKSUM_ERROR}:entry 1 of ledger 1")
    assert isinstance(error_from_rpc(error), errors.ChecksumError)
    # A read that reaches the damaged entry fails as a whole stream; its neighbours are fine.
    assert await read(node, 1, 0, 0) == [(0, b"intact")]
    assert await read(node, 1, 2, 2) == [(2, b"also")]


# ---- fencing, LAC, deletes --------------------------------------------------------------------


async def test_a_fenced_ledger_refuses_adds_but_takes_recovery_adds(node: Node) -> None:
    await add_all(node, [add_request(1, i, payload(1, i), lac=i - 1) for i in range(3)])
    fenced = await node.stub.Fence(storage_pb2.FenceRequest(ledger_id=1), timeout=DEADLINE)
    assert (fenced.ledger_id, fenced.last_entry_id) == (1, 2)

    (refused,) = await add_all(node, [add_request(1, 3, b"stale writer", request_id=9)])
    assert (refused.request_id, refused.error.code) == (9, common_pb2.FENCED)
    assert isinstance(error_from_proto(refused.error), errors.FencedError)

    (recovered,) = await add_all(node, [add_request(1, 3, b"recovery", recovery=True)])
    assert not recovered.HasField("error")
    assert (await read(node, 1, 3, 3)) == [(3, b"recovery")]
    lac = await node.stub.ReadLastAddConfirmed(storage_pb2.LacRequest(ledger_id=1), timeout=DEADLINE)
    assert (lac.last_entry_id, lac.last_add_confirmed, lac.fenced) == (3, 1, True)


async def test_fencing_survives_a_kill_and_restart(node: Node) -> None:
    await add_all(node, [add_request(1, 0, b"a")])
    await node.stub.Fence(storage_pb2.FenceRequest(ledger_id=1), timeout=DEADLINE)
    await node.stub.Fence(storage_pb2.FenceRequest(ledger_id=2), timeout=DEADLINE)  # holds nothing here
    await node.kill()
    await node.start()
    for ledger in (1, 2):
        (refused,) = await add_all(node, [add_request(ledger, 1, b"stale writer")])
        assert refused.error.code == common_pb2.FENCED
    lac = await node.stub.ReadLastAddConfirmed(storage_pb2.LacRequest(ledger_id=2), timeout=DEADLINE)
    assert (lac.last_entry_id, lac.fenced) == (-1, True)


async def test_lac_is_reported_and_unknown_ledgers_have_none(node: Node) -> None:
    await add_all(node, [add_request(4, i, b"x", lac=i - 1) for i in range(10)])
    lac = await node.stub.ReadLastAddConfirmed(storage_pb2.LacRequest(ledger_id=4), timeout=DEADLINE)
    assert (lac.ledger_id, lac.last_entry_id, lac.last_add_confirmed, lac.fenced) == (4, 9, 8, False)
    unknown = await node.stub.ReadLastAddConfirmed(storage_pb2.LacRequest(ledger_id=5), timeout=DEADLINE)
    assert (unknown.last_entry_id, unknown.last_add_confirmed, unknown.fenced) == (-1, -1, False)


async def test_a_deleted_ledger_is_gone_even_after_a_restart(node: Node) -> None:
    await add_all(node, [add_request(ledger, i, payload(ledger, i)) for ledger in (1, 2) for i in range(5)])
    await node.stub.DeleteLedger(storage_pb2.DeleteLedgerRequest(ledger_id=1), timeout=DEADLINE)
    await node.stub.DeleteLedger(storage_pb2.DeleteLedgerRequest(ledger_id=1), timeout=DEADLINE)  # idempotent
    error = await rpc_error(node.stub.ReadEntries(
        storage_pb2.ReadRequest(ledger_id=1, first_entry_id=0, last_entry_id=4), timeout=DEADLINE))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    await node.kill()
    await node.start()
    error = await rpc_error(node.stub.ReadEntries(
        storage_pb2.ReadRequest(ledger_id=1, first_entry_id=0, last_entry_id=4), timeout=DEADLINE))
    assert isinstance(error_from_rpc(error), errors.LedgerNotFoundError)
    assert await read(node, 2, 0, 4) == [(i, payload(2, i)) for i in range(5)]


# ---- crashes and restarts ---------------------------------------------------------------------


async def add_until_killed(node: Node, next_entry: dict[int, int], acked: dict[tuple[int, int], bytes],
                           kill_after: int, rng: random.Random) -> None:
    """Stream adds to several ledgers without waiting for answers; SIGKILL the node once kill_after
    of them are acknowledged (while many more are in flight); record exactly what was acknowledged."""
    sent: dict[int, tuple[int, int, bytes]] = {}

    async def requests() -> AsyncIterator[storage_pb2.AddRequest]:
        for request_id in itertools.count():
            ledger = rng.choice(sorted(next_entry))
            entry = next_entry[ledger]
            next_entry[ledger] += 1
            data = rng.randbytes(rng.choice([10, 1000, 30_000]))
            sent[request_id] = (ledger, entry, data)
            yield add_request(ledger, entry, data, request_id=request_id)

    this_round = 0
    last_acked: dict[int, int] = {}
    with pytest.raises(grpc.aio.AioRpcError):
        async for response in node.stub.AddEntries(requests()):
            assert not response.HasField("error"), response.error
            ledger, entry, data = sent[response.request_id]
            assert entry > last_acked.get(ledger, -1), "answers within a ledger must come in order"
            last_acked[ledger] = entry
            acked[(ledger, entry)] = data
            this_round += 1
            if this_round == kill_after:
                node.kill_now()
    await node.kill()


async def check_acknowledged(node: Node, acked: dict[tuple[int, int], bytes]) -> None:
    for ledger in sorted({ledger for ledger, _ in acked}):
        last = max(entry for lid, entry in acked if lid == ledger)
        held = dict(await read(node, ledger, 0, last))
        for (lid, entry), data in acked.items():
            if lid == ledger:
                assert held.get(entry) == data, f"acknowledged entry {entry} of ledger {ledger} is lost or wrong"


async def test_every_acknowledged_add_survives_sigkill(node: Node) -> None:
    rng = random.Random(20240611)
    acked: dict[tuple[int, int], bytes] = {}
    next_entry = {1: 0, 2: 0, 3: 0}
    for _ in range(3):
        await add_until_killed(node, next_entry, acked, kill_after=rng.randrange(200, 600), rng=rng)
        await node.start()
        await check_acknowledged(node, acked)
        # The writer goes on after the last acknowledged entry (overwriting unacknowledged ones).
        for ledger in next_entry:
            next_entry[ledger] = 1 + max((e for lid, e in acked if lid == ledger), default=-1)
    assert len(acked) >= 600


async def test_a_torn_journal_tail_after_a_kill_is_handled(node: Node) -> None:
    acked: dict[tuple[int, int], bytes] = {}
    await add_until_killed(node, {1: 0}, acked, kill_after=100, rng=random.Random(7))
    newest = files(node.data_dir / "journal", JOURNAL_SUFFIX)[-1]
    torn = JournalRecord(RecordKind.ADD, 1, 10**6, -1, b"t" * 5000, data_crc=1)
    await asyncio.to_thread(append_bytes, newest, encode_header(torn) + torn.data[:100])
    await node.start()
    await check_acknowledged(node, acked)
    next_id = max(entry for _, entry in acked) + 1
    (response,) = await add_all(node, [add_request(1, next_id, b"after the tear")])
    assert not response.HasField("error")
    assert await read(node, 1, next_id, next_id) == [(next_id, b"after the tear")]


async def test_sigterm_stops_the_node_cleanly_and_keeps_everything(node: Node) -> None:
    await add_all(node, [add_request(1, i, payload(1, i)) for i in range(100)])
    assert await node.stop() == 0
    # The clean stop checkpointed: nothing is left in the journal but its empty newest file.
    assert all(p.stat().st_size <= 8 for p in files(node.data_dir / "journal", JOURNAL_SUFFIX))
    await node.start()
    assert await read(node, 1, 0, 99) == [(i, payload(1, i)) for i in range(100)]


# ---- the server in-process --------------------------------------------------------------------


async def test_server_picks_a_free_port_and_stops_idempotently(tmp_path: Path) -> None:
    server = StorageServer(StorageSettings(data_dir=str(tmp_path), port=0, checkpoint_interval=3600.0, metrics_port=-1))
    with pytest.raises(errors.ServiceNotReadyError):
        _ = server.address
    await server.start()
    assert server.port > 0 and server.address == f"127.0.0.1:{server.port}"
    with pytest.raises(errors.ServiceNotReadyError):
        await server.start()
    async with grpc.aio.insecure_channel(server.address, options=channel_options()) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        fenced = await stub.Fence(storage_pb2.FenceRequest(ledger_id=3), timeout=DEADLINE)
        assert fenced.last_entry_id == -1
    await server.stop()
    await server.stop()


async def test_server_refuses_a_port_in_use(tmp_path: Path) -> None:
    first = StorageServer(StorageSettings(data_dir=str(tmp_path / "a"), port=0, metrics_port=-1))
    await first.start()
    second = StorageServer(StorageSettings(data_dir=str(tmp_path / "b"), port=first.port, metrics_port=-1))
    in_use = f"cannot serve gRPC on 127.0.0.1:{first.port}: the address is in use"
    with pytest.raises(errors.AddressInUseError, match=in_use):
        await second.start()
    await second.stop()
    await first.stop()


async def test_a_stopping_node_answers_service_not_ready(tmp_path: Path) -> None:
    server = StorageServer(StorageSettings(data_dir=str(tmp_path), port=0, metrics_port=-1))
    await server.start()
    async with grpc.aio.insecure_channel(server.address, options=channel_options()) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        await server.store.close()  # the store goes first, as when a stop is under way

        async def one_add() -> AsyncIterator[storage_pb2.AddRequest]:
            yield add_request(1, 0, b"too late", request_id=5)

        (response,) = [r async for r in stub.AddEntries(one_add())]
        assert (response.request_id, response.error.code) == (5, common_pb2.SERVICE_NOT_READY)
        error = await rpc_error(stub.Fence(storage_pb2.FenceRequest(ledger_id=1), timeout=DEADLINE))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert isinstance(error_from_rpc(error), errors.ServiceNotReadyError)
        error = await rpc_error(stub.ReadEntries(storage_pb2.ReadRequest(ledger_id=1), timeout=DEADLINE))
        assert isinstance(error_from_rpc(error), errors.ServiceNotReadyError)
    await server.stop()
