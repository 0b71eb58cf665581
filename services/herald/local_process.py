"""The processes of a local cluster (`herald local-cluster`, herald.local_etcd's members, the chaos tests):
one child each, started and waited for by a line of its log, killed, paused, resumed and restarted by
name; and loopback ports to give them."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from herald.common.errors import InvalidArgumentError, ServiceNotReadyError

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def ephemeral_low() -> int:
    """Where the kernel's ephemeral port range (outgoing connections, bind(0)) starts."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback port free now, for a server started next. Chosen below the kernel's ephemeral
    range: a port from bind(0) comes from that range, which every outgoing connection also draws
    from, so between choosing it and the server binding it a client socket could take it (seen in
    CI as a broker failing to bind). Never the same port twice in one process."""
    top = min(ephemeral_low(), 65536) - 1
    bottom = 10000 if top > 20000 else 1024
    for _ in range(200):
        port = random.randint(bottom, top)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as sock:  # a crowded range: let the kernel choose
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def herald_command() -> list[str]:
    """The `herald` of this interpreter's environment (works from a venv without activating it)."""
    beside = Path(sys.executable).parent / "herald"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "herald.cli"]



class ClusterProcess:
    """One process of the cluster: started, stopped, killed, paused and resumed by name."""

    def __init__(self, name: str, args: list[str], log_dir: Path, ready_text: str, port: int,
                 env: dict[str, str], metrics_port: int | None = None, pulsar_port: int | None = None,
                 web_port: int | None = None) -> None:
        self.name = name
        self.metrics_port = metrics_port  # where it serves /metrics, when it does
        self.pulsar_port = pulsar_port  # where it serves Pulsar's binary protocol, when it does
        self.web_port = web_port  # where it serves Pulsar's admin REST API, when it does
        self.args = args
        self.log_path = log_dir / f"{name}.log"
        self.ready_text = ready_text
        self.port = port
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pulsar_url(self) -> str:
        if self.pulsar_port is None:
            raise InvalidArgumentError(f"{self.name} serves no Pulsar protocol")
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    @property
    def web_url(self) -> str:
        if self.web_port is None:
            raise InvalidArgumentError(f"{self.name} serves no REST API")
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        marker = f"==== {self.name} start {self.starts} ====\n"
        with open(self.log_path, "ab") as log:
            log.write(marker.encode())
            log.flush()
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if self.ready_text in text[text.rfind(marker):]:
                return
            if self.proc.poll() is not None:
                raise ServiceNotReadyError(
                    f"{self.name} exited with {self.proc.returncode} while starting; see {self.log_path}"
                )
            time.sleep(0.05)
        raise ServiceNotReadyError(f"{self.name} did not start within {timeout}s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to flush or close anything."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.resume()  # a paused process cannot handle SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets open but answers nothing."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()
