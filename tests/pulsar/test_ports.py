"""Pulsar's ports in `herald standalone`: 6650 and 8080 by default (tests/rest/test_web_port_setting.py
checks the defaults), so one held by another process must stop the start with a message naming the
port and the flag, not a traceback."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, service_env


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(("flag", "what"), [
    ("--pulsar-port", "Pulsar's protocol"),
    ("--web-port", "the web service (Pulsar's admin REST API)"),
    ("--broker-port", "gRPC"),
])
def test_a_port_another_process_holds_stops_the_start_with_a_clear_error(
    tmp_path: Path, held_port: int, flag: str, what: str,
) -> None:
    ports = {"--port": "0", "--broker-port": "0", "--storage-port": "0", "--proxy-port": "-1",
             "--metrics-port": "-1", "--web-port": "-1", "--pulsar-port": "-1", flag: str(held_port)}
    result = subprocess.run([str(VENV_BIN / "herald"), "standalone", "--data-dir", str(tmp_path / "data"),
                             *[part for pair in ports.items() for part in pair]],
                            capture_output=True, text=True, timeout=60, env=service_env())
    assert result.returncode == 1  # an operation failure (the port is taken), not a usage error
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot serve {what} on 127.0.0.1:{held_port}: the address is in use"), last
    assert "Traceback" not in result.stderr
