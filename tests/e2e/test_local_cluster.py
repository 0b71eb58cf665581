"""`herald local-cluster`: every process starts, serves, and stops; the command runs as documented."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from herald.client import AsyncClient, InitialPosition
from herald.local_cluster import LocalCluster

from tests.conftest import VENV_BIN


async def produce_and_consume(url: str, topic: str, count: int) -> list[bytes]:
    async with AsyncClient(url) as client:
        producer = await client.create_producer(topic)
        for future in [await producer.send_async(b"%d" % i) for i in range(count)]:
            await future
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        values = []
        while len(values) < count and (message := await consumer.receive(timeout=10)) is not None:
            values.append(message.value)
            consumer.acknowledge(message)
        return values


def test_cluster_of_processes_serves_topics_on_both_brokers(local_cluster: LocalCluster) -> None:
    assert [p.running for p in local_cluster.processes] == [True] * 8  # with the dlq-worker
    for i in range(4):  # several topics, spread by lookup over both brokers
        assert asyncio.run(produce_and_consume(local_cluster.service_url, f"t{i}", 200)) == [
            b"%d" % n for n in range(200)
        ]
    logs = [b.log_path.read_text() for b in local_cluster.brokers]
    assert all("listening on" in text for text in logs)


def test_local_cluster_command_starts_and_stops(tmp_path: Path, herald_env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        [str(VENV_BIN / "herald"), "local-cluster", "--base-dir", str(tmp_path / "lc"), "--brokers", "1",
         "--storage-nodes", "1", "--ensemble-size", "1", "--write-quorum", "1", "--ack-quorum", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=herald_env, text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any("press Ctrl-C" in line for line in lines):
        lines.append(proc.stdout.readline())
    url = next(line.split()[-1] for line in lines if "service URL" in line)
    assert asyncio.run(produce_and_consume(url, "via-command", 10)) == [b"%d" % n for n in range(10)]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert sorted(p.name for p in (tmp_path / "lc" / "logs").iterdir()) == [
        "broker-0.log", "dlq-worker.log", "lookup.log", "redis.log", "storage-0.log",
    ]


def test_too_few_storage_nodes_for_the_write_quorum_is_refused(
    make_local_cluster: Callable[..., LocalCluster],
) -> None:
    try:
        make_local_cluster(storage_nodes=1, write_quorum=2)
    except ValueError as error:
        assert "cannot hold ledgers with write quorum 2" in str(error)
    else:
        raise AssertionError("a cluster that cannot store a ledger was started")


def test_local_cluster_command_with_etcd_metadata_runs_etcd_members_instead_of_redis(
    tmp_path: Path, herald_env: dict[str, str],
) -> None:
    proc = subprocess.Popen(
        [str(VENV_BIN / "herald"), "local-cluster", "--base-dir", str(tmp_path / "lc"), "--brokers", "1",
         "--storage-nodes", "1", "--ensemble-size", "1", "--write-quorum", "1", "--ack-quorum", "1",
         "--metadata", "etcd", "--etcd-members", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=herald_env, text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any("press Ctrl-C" in line for line in lines):
        lines.append(proc.stdout.readline())
    metadata = next(line.split()[-1] for line in lines if line.split()[:1] == ["metadata"])
    assert metadata.startswith("etcd://") and len(metadata.removeprefix("etcd://").split(",")) == 3
    url = next(line.split()[-1] for line in lines if "service URL" in line)
    assert asyncio.run(produce_and_consume(url, "via-etcd", 10)) == [b"%d" % n for n in range(10)]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert sorted(p.name for p in (tmp_path / "lc" / "logs").iterdir()) == [
        "broker-0.log", "dlq-worker.log", "etcd-0.log", "etcd-1.log", "etcd-2.log", "lookup.log", "storage-0.log",
    ]
