"""A storage node's readiness is its journal: SERVING while the journal takes writes, NOT_SERVING
(and the reason named) once a write or fsync failed, since no add can be acknowledged after that."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from herald.common.errors import PersistenceError
from herald.storage.node.server import StorageServer
from herald.storage.node.settings import StorageSettings

DEADLINE = 30.0


async def test_a_storage_node_whose_journal_failed_is_not_ready_and_says_why(tmp_path: Path) -> None:
    server = StorageServer(StorageSettings(data_dir=str(tmp_path / "node"), metrics_port=-1))
    await server.start()
    channel = grpc.aio.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel)

    async def status() -> int:
        reply = await health.Check(health_pb2.HealthCheckRequest(service="herald.v1.StorageService"), timeout=10)
        return int(reply.status)

    try:
        assert await status() == health_pb2.HealthCheckResponse.SERVING
        assert await server.health.check() == {"serving": None, "journal": None}

        def broken(fd: int) -> None:
            raise OSError(5, "Input/output error")

        server.store.journal._fsync = broken  # the disk fails under the journal
        started = await server.store.begin_add(1, 0, b"entry", last_add_confirmed=-1, recovery=False)
        with pytest.raises(PersistenceError, match="Input/output error"):
            await asyncio.wait_for(started, DEADLINE)
        results = await server.health.check()
        assert results["serving"] is None
        assert results["journal"] is not None and "Input/output error" in results["journal"]
        assert await status() == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await channel.close()
        await server.stop()
