"""Each service as its own process, configured by flags and HERALD_* variables, on a real Redis:
the shape of a cluster. And `herald standalone` stopping cleanly on Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.client import AsyncClient, InitialPosition

from tests.conftest import VENV_BIN, StandaloneProcess, free_port, wait_for_port


@pytest.fixture
def services(redis_db_url: str, herald_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """storage, lookup and broker processes; yields the service URL."""
    metadata_url = redis_db_url
    storage_port, lookup_port, broker_port = free_port(), free_port(), free_port()
    env = {**herald_env, "HERALD_BROKER_METADATA_URL": metadata_url, "HERALD_LOOKUP_HEARTBEAT_INTERVAL": "0.5",
           # One storage node: ledgers of one copy (the broker's cluster default is 3/2/2).
           "HERALD_BROKER_ENSEMBLE_SIZE": "1", "HERALD_BROKER_WRITE_QUORUM": "1", "HERALD_BROKER_ACK_QUORUM": "1"}
    commands = [
        (["storage", "--data-dir", str(tmp_path / "storage"), "--port", str(storage_port), "--metrics-port", "-1"],
         storage_port),
        (["lookup", "--metadata-url", metadata_url, "--port", str(lookup_port), "--metrics-port", "-1"], lookup_port),
        (["broker", "--lookup-address", f"127.0.0.1:{lookup_port}", "--storage-nodes", f"127.0.0.1:{storage_port}",
          "--port", str(broker_port), "--broker-id", "broker-0", "--metrics-port", "-1"], broker_port),
    ]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for args, port in commands:
            log = open(tmp_path / f"{args[0]}.log", "wb")  # noqa: SIM115 - the child owns it
            procs.append(subprocess.Popen([str(VENV_BIN / "herald"), *args], env=env, stdout=log,
                                          stderr=subprocess.STDOUT))
            log.close()
            wait_for_port(port, proc=procs[-1])
        yield f"herald://127.0.0.1:{lookup_port}"
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        for proc in procs:
            assert proc.returncode == 0, f"a service exited with {proc.returncode}"


def test_separate_services_on_redis_produce_and_consume(services: str) -> None:
    async def run() -> list[bytes]:
        async with AsyncClient(services, operation_timeout=30) as client:
            producer = await client.create_producer("across-processes")
            consumer = await client.subscribe("across-processes", "s", initial_position=InitialPosition.Earliest)
            for future in [await producer.send_async(b"%d" % i) for i in range(1000)]:
                await future
            values = []
            while len(values) < 1000 and (message := await consumer.receive(timeout=10)) is not None:
                values.append(message.value)
                consumer.acknowledge(message)
            return values

    assert asyncio.run(run()) == [b"%d" % i for i in range(1000)]


def test_standalone_stops_cleanly_on_ctrl_c(standalone: StandaloneProcess) -> None:
    assert standalone.proc is not None
    text = standalone.log_path.read_text()
    for endpoint in ("service URL", "lookup", "broker", "storage", "metadata"):
        assert endpoint in text
    standalone.proc.send_signal(signal.SIGINT)
    assert standalone.proc.wait(timeout=30) == 0
    assert "stopping" in standalone.log_path.read_text()
    # The data dir is reusable: it starts again with everything in place.
    standalone.start()
