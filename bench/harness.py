"""What every benchmark here shares: the machine's limits measured in the same run, a `herald
standalone` (or any Herald service) started on free ports and stopped, its peak resident memory, and
one JSON line appended per result.

    from harness import Standalone, machine_limits, append_result

    with tempfile.TemporaryDirectory() as tmp, Standalone(Path(tmp)) as server:
        limits = machine_limits(Path(tmp))
        ...                                    # server.service_url, server.pulsar_url, server.metric()
        append_result("mine.jsonl", {"limits": limits, "peak_rss_mib": server.peak_rss_mib(), ...})
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from herald.local_cluster import free_port

RESULTS = Path(__file__).resolve().parent / "results"
HERALD = Path(sys.executable).parent / "herald"


# ---- the machine ----

def fdatasync_rate(directory: Path, seconds: float = 2.0) -> float:
    """4 KiB writes each followed by fdatasync, per second."""
    path = Path(directory) / "fsync-probe"
    block = b"\0" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()


def sequential_write_mb_s(directory: Path, megabytes: int = 256) -> float:
    """1 MiB writes, then one fdatasync: MB/s."""
    path = Path(directory) / "write-probe"
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(megabytes):
            os.write(fd, chunk)
        os.fdatasync(fd)
        return megabytes * (1 << 20) / (time.perf_counter() - started) / 1e6
    finally:
        os.close(fd)
        path.unlink()


def synced_write_mb_s(directory: Path, write_kib: int = 256, megabytes: int = 256) -> float:
    """Writes of `write_kib` each followed by fdatasync, MB/s: the bound of a journal that syncs
    every group commit of that size (what "fdatasync'd sequential write" means for a log)."""
    path = Path(directory) / "synced-probe"
    chunk = os.urandom(write_kib << 10)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for _ in range((megabytes << 10) // write_kib):
            os.write(fd, chunk)
            os.fdatasync(fd)
        return megabytes * (1 << 20) / (time.perf_counter() - started) / 1e6
    finally:
        os.close(fd)
        path.unlink()


def machine_limits(directory: Path) -> dict[str, float]:
    """The limits a durable log is bounded by, measured now, on the disk under `directory`."""
    return {
        "fdatasync_per_s": round(fdatasync_rate(directory)),
        "sequential_write_mb_s": round(sequential_write_mb_s(directory), 1),
        "synced_256k_write_mb_s": round(synced_write_mb_s(directory), 1),
        "cpus": os.cpu_count() or 0,
    }


# ---- processes ----

def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mib(pid: int) -> float:
    """The process's resident set now (VmRSS) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Service:
    """One Herald service process (`herald <args>`) with its log in `directory`; ready once `ready`
    appears in the log."""

    def __init__(self, directory: Path, name: str, args: Sequence[str], ready: str,
                 env: dict[str, str] | None = None) -> None:
        self.directory = Path(directory)
        self.name = name
        self.args = list(args)
        self.ready = ready
        self.env = env
        self.log = self.directory / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([str(HERALD), *self.args], stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env)
        deadline = time.monotonic() + timeout
        while self.ready not in self.log.read_bytes()[offset:].decode(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def peak_rss_mib(self) -> float:
        return peak_rss_mib(self.pid)

    def rss_mib(self) -> float:
        return rss_mib(self.pid)

    def __enter__(self) -> Service:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


class Standalone(Service):
    """`herald standalone` on free ports, data under `directory/data`; the Pulsar front end and the
    metrics endpoint on, the web (REST) port on only if asked, no dlq-worker."""

    def __init__(self, directory: Path, *, web: bool = False, proxy: bool = False,
                 extra: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.port, self.broker_port, self.storage_port = free_port(), free_port(), free_port()
        self.pulsar_port, self.metrics_port = free_port(), free_port()
        self.web_port = free_port() if web else -1
        self.proxy_port = free_port() if proxy else -1
        args = ["standalone", "--data-dir", str(Path(directory) / "data"), "--port", str(self.port),
                "--broker-port", str(self.broker_port), "--storage-port", str(self.storage_port),
                "--proxy-port", str(self.proxy_port), "--pulsar-port", str(self.pulsar_port),
                "--metrics-port", str(self.metrics_port), "--web-port", str(self.web_port), "--no-dlq-worker",
                *extra]
        super().__init__(directory, "standalone", args, "press Ctrl-C to stop", env)

    @property
    def service_url(self) -> str:
        return f"herald://127.0.0.1:{self.port}"

    @property
    def proxy_url(self) -> str:
        assert self.proxy_port > 0, "started without a proxy"
        return f"herald://127.0.0.1:{self.proxy_port}"

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    @property
    def web_url(self) -> str:
        assert self.web_port > 0, "started without the web port"
        return f"http://127.0.0.1:{self.web_port}"

    def metric(self, name: str) -> float:
        """The sum of every sample of one Prometheus metric (0 if absent)."""
        total = 0.0
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith((name + " ", name + "{")):
                    total += float(line.rsplit(" ", 1)[1])
        return total


# ---- results ----

def append_result(file: str, record: dict[str, Any]) -> dict[str, Any]:
    """Appends one JSON line (stamped with the time) to bench/results/<file>; returns the record."""
    stamped = {"at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"), **record}
    with (RESULTS / file).open("a") as out:
        out.write(json.dumps(stamped) + "\n")
    return stamped
