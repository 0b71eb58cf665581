"""Lookup while its metadata store is down: every call that needs the store is answered UNAVAILABLE
with the store's one-line reason, and the lookup's log holds no traceback (issue 21, item 7)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.local_cluster import ClusterProcess, free_port

from tests.conftest import VENV_BIN


@pytest.fixture
def redis_and_lookup(tmp_path: Path, herald_env: dict[str, str]) -> Iterator[tuple[ClusterProcess, ClusterProcess]]:
    redis_port, lookup_port = free_port(), free_port()
    redis = ClusterProcess(
        "redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                  "--save", "", "--appendonly", "no", "--protected-mode", "no"],
        tmp_path, "Ready to accept connections", redis_port, herald_env)
    lookup = ClusterProcess(
        "lookup", [str(VENV_BIN / "herald"), "lookup", "--metadata-url", f"redis://127.0.0.1:{redis_port}/0",
                   "--port", str(lookup_port), "--metrics-port", "-1"],
        tmp_path, "lookup listening on", lookup_port, herald_env)
    redis.start()
    try:
        lookup.start()
        yield redis, lookup
    finally:
        lookup.stop()
        redis.stop()


async def _calls_while_the_store_is_down(redis: ClusterProcess, address: str, fault: str,
                                         ) -> list[grpc.aio.AioRpcError]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = lookup_pb2_grpc.LookupServiceStub(channel)
        registered = await stub.RegisterBroker(lookup_pb2.RegisterBrokerRequest(
            broker_id="b1", address="127.0.0.1:1", cluster="standalone"), timeout=30)
        if fault == "stopped":
            redis.kill()
        else:
            redis.pause()  # its connections stay open: every store call waits out its timeout (5 s)
        failures = []
        lease = registered.lease_id
        topic = "persistent://public/default/t"
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: stub.Heartbeat(lookup_pb2.HeartbeatRequest(broker_id="b1", lease_id=lease), timeout=30),
            lambda: stub.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic), timeout=30),
            lambda: stub.GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=30),
            lambda: stub.GetPartitionedTopicMetadata(lookup_pb2.PartitionedTopicMetadataRequest(topic=topic),
                                                     timeout=30),
            lambda: stub.UnregisterBroker(lookup_pb2.UnregisterBrokerRequest(broker_id="b1", lease_id=lease),
                                          timeout=30),
        ]
        # Paused, each call waits out the store's timeout: the two calls of the report are enough.
        for call in calls if fault == "stopped" else calls[:2]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call()
            failures.append(caught.value)
        return failures


@pytest.mark.parametrize("fault", ["stopped", "paused"])
def test_calls_needing_a_dead_metadata_store_are_unavailable_without_tracebacks(
    redis_and_lookup: tuple[ClusterProcess, ClusterProcess], fault: str,
) -> None:
    redis, lookup = redis_and_lookup
    failures = asyncio.run(_calls_while_the_store_is_down(redis, lookup.address, fault))
    assert [failure.code() for failure in failures] == [grpc.StatusCode.UNAVAILABLE] * len(failures)
    for failure in failures:
        assert "redis at 127.0.0.1" in (failure.details() or ""), failure.details()
    log = lookup.log_path.read_text()
    assert "the metadata store did not answer" in log
    assert "Traceback" not in log
