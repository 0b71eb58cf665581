"""`herald local-cluster` as a deployment in small: it runs a dlq-worker (a consumer's dead letters reach
their dead-letter topic) and names its cluster (`--cluster-name`, given to every broker and shown by
`herald admin brokers list`)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.client import AsyncClient, ConsumerType, DeadLetterPolicy, InitialPosition
from herald.common.errors import InvalidArgumentError
from herald.local_cluster import ClusterSettings, LocalCluster

from tests.conftest import VENV_BIN, service_env

HERALD = str(VENV_BIN / "herald")
SMALL = ["--brokers", "2", "--storage-nodes", "1", "--ensemble-size", "1", "--write-quorum", "1",
         "--ack-quorum", "1"]


@pytest.fixture(scope="module")
def east(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`herald local-cluster --cluster-name east` running (one for the module's tests); its service URL."""
    base = tmp_path_factory.mktemp("east") / "lc"
    proc = subprocess.Popen([HERALD, "local-cluster", "--base-dir", str(base), "--cluster-name", "east", *SMALL],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=service_env(), text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any("press Ctrl-C" in line for line in lines):
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    try:
        assert any("press Ctrl-C" in line for line in lines), "".join(lines)
        assert any(line.split()[:2] == ["dlq-worker", "metrics"] for line in lines), "".join(lines)
        yield next(line.split()[-1] for line in lines if "service URL" in line)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0


def test_every_broker_of_a_local_cluster_carries_its_cluster_name(east: str, herald_env: dict[str, str]) -> None:
    listed = subprocess.run([HERALD, "admin", "--url", east, "--json", "brokers", "list"], capture_output=True,
                            text=True, env=herald_env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    brokers = json.loads(listed.stdout)["brokers"]
    assert [broker["cluster"] for broker in brokers] == ["east", "east"]
    table = subprocess.run([HERALD, "admin", "--url", east, "brokers", "list"], capture_output=True, text=True,
                           env=herald_env, timeout=60)
    assert "east" in table.stdout and "standalone" not in table.stdout


def test_dead_letters_of_a_local_cluster_reach_the_dead_letter_topic(east: str) -> None:
    async def scenario() -> list[bytes]:
        topic, dlq = "persistent://public/default/lc-orders", "persistent://public/default/lc-orders-dlq"
        async with AsyncClient(east) as client:
            consumer = await client.subscribe(
                topic, "s", ConsumerType.Shared, InitialPosition.Earliest, negative_ack_redelivery_delay=0.05,
                dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dlq))
            reader = await client.subscribe(dlq, "check", initial_position=InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            for i in range(3):
                await producer.send(b"poison-%d" % i)
            landed: list[bytes] = []
            deadline = time.monotonic() + 90
            while len(landed) < 3 and time.monotonic() < deadline:
                # The consumer refuses every delivery; past 2 redeliveries each message is a dead letter
                # that only the cluster's dlq-worker moves to `dlq`.
                if (message := await consumer.receive(timeout=0.2)) is not None:
                    consumer.negative_acknowledge(message)
                if (letter := await reader.receive(timeout=0.05)) is not None:
                    landed.append(letter.value)
                    reader.acknowledge(letter)
            return sorted(landed)

    assert asyncio.run(scenario()) == [b"poison-0", b"poison-1", b"poison-2"]


@pytest.mark.parametrize("name", ["", "a b", "east/1", "x" * 65])
def test_an_invalid_cluster_name_is_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"cluster name .* is invalid: use 1 to 64 of"):
        LocalCluster(ClusterSettings(base_dir=str(tmp_path / "lc"), cluster_name=name))
