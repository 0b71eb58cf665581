"""`herald local-cluster` watches its children (issue 21, item 7): it prints each one's pid, and one
that dies is reaped (no zombie), reported on stderr with its exit status and log, and restarted;
past max_restarts_per_minute the cluster stops and the command exits non-zero."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import VENV_BIN


class _Lines:
    """A stream's lines, read on a thread of their own so the test can wait for one with a deadline."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def wait_for(self, found: Callable[[str], bool], timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ended = not self._thread.is_alive()  # read before the lines: none can come after
            for line in list(self.lines):
                if found(line):
                    return line
            if ended:
                break
            time.sleep(0.05)
        raise AssertionError(f"no such line (within {timeout}s, before the stream ended): {''.join(self.lines)}")


def _is_zombie(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False  # reaped and gone


def _listening(port: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def test_a_killed_child_is_reaped_reported_and_restarted_until_the_restart_limit(
    tmp_path: Path, herald_env: dict[str, str],
) -> None:
    proc = subprocess.Popen(
        [str(VENV_BIN / "herald"), "local-cluster", "--base-dir", str(tmp_path / "lc"), "--brokers", "1",
         "--storage-nodes", "1", "--ensemble-size", "1", "--write-quorum", "1", "--ack-quorum", "1",
         "--max-restarts-per-minute", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=herald_env, text=True,
    )
    try:
        out, err = _Lines(proc.stdout), _Lines(proc.stderr)
        out.wait_for(lambda line: "press Ctrl-C" in line)
        rows = [line.strip().rsplit(maxsplit=1) for line in out.lines if line.startswith("  ")]
        table = {" ".join(name.split()): where for name, where in rows}
        pid, port = int(table["storage-0 pid"]), int(table["storage-0"].rsplit(":", 1)[1])
        assert {"redis pid", "lookup pid", "broker-0 pid"} <= set(table)

        os.kill(pid, signal.SIGKILL)
        died = err.wait_for(lambda line: f"storage-0 (pid {pid})" in line)
        assert "killed by signal 9" in died and str(tmp_path / "lc" / "logs" / "storage-0.log") in died
        restarted = err.wait_for(lambda line: "storage-0 restarted, pid" in line)
        new_pid = int(restarted.split()[-1])
        assert new_pid != pid and not _is_zombie(pid)
        assert _listening(port)

        os.kill(new_pid, signal.SIGKILL)  # a second death within the minute: past the limit of 1
        assert proc.wait(timeout=120) == 1  # the operation failed (docs/cli.md)
        assert any("max_restarts_per_minute=1" in line and "stopping the cluster" in line for line in err.lines)
        others = [int(table[f"{name} pid"]) for name in ("redis", "lookup", "broker-0")]
        assert not any(Path(f"/proc/{other}").exists() and not _is_zombie(other) for other in others)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)

