"""LocalEtcd: N etcd members on loopback, for `herald local-cluster --metadata etcd` and for tests.

Each member is a ClusterProcess (etcd-0 .. etcd-{n-1}) that the chaos tests can kill, pause and
restart by name. Timings favour fast failover (100 ms heartbeats, 1 s election timeout); fsync stays
on, as etcd's default, so an acknowledged write survives a SIGKILL of every member.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from herald.common.errors import InvalidArgumentError, ServiceNotReadyError
from herald.local_process import ClusterProcess, free_port

READY_TEXT = "serving client traffic"  # etcd 3.4 logs this once it serves clients


class LocalEtcd:
    """An etcd cluster of `members` local processes; data under base_dir/etcd-<i>, logs in log_dir.

    advertise_client[i] / advertise_peer[i] (host:port) replace member i's own address where it is
    announced, so a test can put a fault-injecting proxy in front of it."""

    def __init__(self, base_dir: Path, log_dir: Path, members: int = 3, env: dict[str, str] | None = None,
                 *, advertise_client: Sequence[str] | None = None,
                 advertise_peer: Sequence[str] | None = None) -> None:
        if members < 1:
            raise InvalidArgumentError(f"an etcd cluster needs at least 1 member, not {members}")
        for name, given in (("advertise_client", advertise_client), ("advertise_peer", advertise_peer)):
            if given is not None and len(given) != members:
                raise InvalidArgumentError(f"{name} names {len(given)} addresses for {members} etcd members")
        binary = shutil.which("etcd")
        if binary is None:
            raise ServiceNotReadyError("etcd is not installed (apt-get install etcd-server)")
        log_dir.mkdir(parents=True, exist_ok=True)
        ports = [(free_port(), free_port()) for _ in range(members)]
        self.client_addresses = [f"127.0.0.1:{client}" for client, _ in ports]
        self.peer_addresses = [f"127.0.0.1:{peer}" for _, peer in ports]
        self.advertised_clients = list(advertise_client or self.client_addresses)
        advertised_peers = list(advertise_peer or self.peer_addresses)
        self.url = "etcd://" + ",".join(self.advertised_clients)
        initial = ",".join(f"etcd-{i}=http://{peer}" for i, peer in enumerate(advertised_peers))
        token = f"herald-{uuid.uuid4().hex[:12]}"  # members of two local clusters never join each other
        env = dict(os.environ if env is None else env)
        self.processes: list[ClusterProcess] = []
        for i in range(members):
            client_port, _ = ports[i]
            self.processes.append(ClusterProcess(
                f"etcd-{i}",
                [binary, "--name", f"etcd-{i}", "--data-dir", str(base_dir / f"etcd-{i}"),
                 "--listen-client-urls", f"http://{self.client_addresses[i]}",
                 "--advertise-client-urls", f"http://{self.advertised_clients[i]}",
                 "--listen-peer-urls", f"http://{self.peer_addresses[i]}",
                 "--initial-advertise-peer-urls", f"http://{advertised_peers[i]}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--initial-cluster-token", token,
                 "--heartbeat-interval", "100", "--election-timeout", "1000", "--logger", "zap"],
                log_dir, READY_TEXT, client_port, env,
            ))

    def start(self) -> None:
        """Start every member and wait until each serves clients (they need each other for that)."""
        try:
            with ThreadPoolExecutor(len(self.processes)) as pool:
                for future in [pool.submit(process.start) for process in self.processes]:
                    future.result()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
