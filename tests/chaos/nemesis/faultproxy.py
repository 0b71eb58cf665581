"""A fault-injecting TCP proxy the nemesis controls: it listens on a loopback port, forwards to one
target, and can drop, black-hole, delay or make one-way the traffic of each source separately.

Why per source in one listener rather than one listener per (source, target) pair: Herald records a
storage node by its address in every ledger's ensemble, and a broker learns another broker's
address from lookup, so every source must dial a target by one and the same address. The proxy
tells its sources apart by the process that owns the connecting socket (see `peer_process`), which
gives each (source, target) pair its own link and fault state while addresses stay canonical. It
needs no root and no network namespace, so CI machines run it too."""

from __future__ import annotations

import asyncio
import enum
import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from herald.common.errors import InvalidArgumentError, ServiceNotReadyError

_CHUNK = 65536
ANY = "*"  # the link of every source without a link of its own


class Mode(enum.Enum):
    PASS = "pass"
    DROP = "drop"  # close every connection now and refuse new ones
    BLACKHOLE = "blackhole"  # accept, forward nothing either way: peers hang until their own timeouts
    DELAY = "delay"  # add delay_ms to every chunk, each way
    CLIENT_TO_SERVER = "client-to-server"  # one-way: only what the source sends gets through
    SERVER_TO_CLIENT = "server-to-client"  # one-way: only what the target sends gets through


@dataclass
class Link:
    """The fault state of one source's traffic to the target."""

    mode: Mode = Mode.PASS
    delay_ms: int = 0

    def flows(self, to_server: bool) -> bool:
        if self.mode in (Mode.PASS, Mode.DELAY):
            return True
        if self.mode is Mode.CLIENT_TO_SERVER:
            return to_server
        if self.mode is Mode.SERVER_TO_CLIENT:
            return not to_server
        return False


def _socket_inode(local_port: int, remote_port: int) -> str | None:
    """The inode of the loopback socket local_port -> remote_port, from /proc/net/tcp{,6}."""
    want_local, want_remote = f":{local_port:04X}", f":{remote_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[1].endswith(want_local) and fields[2].endswith(want_remote):
                return fields[9]
    return None


def peer_process(peer_port: int, listen_port: int, pids: dict[int, str]) -> str:
    """Which of `pids` (pid -> name) owns the socket that connected from peer_port to listen_port;
    ANY when none does (a process the nemesis does not know, or one that already closed it)."""
    inode = _socket_inode(peer_port, listen_port)
    if inode is None:
        return ANY
    target = f"socket:[{inode}]"
    for pid, name in pids.items():
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(fd.path) == target:
                        return name
                except OSError:
                    continue
        except OSError:
            continue
    return ANY


class FaultProxy:
    """Forwards 127.0.0.1:port to target_host:target_port from a background thread with its own
    event loop. `classify(peer_port, listen_port)` names a connection's source (ANY by default)."""

    def __init__(self, name: str, target_host: str, target_port: int, port: int = 0,
                 classify: Callable[[int, int], str] | None = None) -> None:
        self.name = name
        self.target = (target_host, target_port)
        self.port = port
        self.classify = classify or (lambda _peer, _listen: ANY)
        self.links: dict[str, Link] = {ANY: Link()}
        self.connections: dict[str, set[asyncio.StreamWriter]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"faultproxy-{name}", daemon=True)
        self._server: asyncio.Server | None = None
        self._changed: asyncio.Event | None = None  # set (and replaced) whenever a link changes

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def set_mode(self, mode: Mode, source: str = ANY, delay_ms: int = 0) -> None:
        """Change the link of `source` (every source without its own link when ANY)."""
        if mode is Mode.DELAY and delay_ms <= 0:
            raise InvalidArgumentError("a delay link needs delay_ms > 0")
        self._call(self._set_mode(mode, source, delay_ms))

    def heal(self) -> None:
        """Every link back to pass."""
        for source in list(self.links):
            self.set_mode(Mode.PASS, source)

    def connection_count(self, source: str) -> int:
        """Open connections from `source` (each counted once, not with its upstream half)."""
        return len(self.connections.get(source, set())) // 2

    # ---- inside the proxy's loop ----

    def _call(self, coroutine: object) -> None:
        future: Future[None] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)  # type: ignore[arg-type]
        future.result(timeout=30)

    async def _listen(self) -> None:
        self._changed = asyncio.Event()
        try:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        except OSError as exc:
            raise ServiceNotReadyError(f"fault proxy {self.name} cannot listen on {self.port}: {exc}") from exc
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writers in self.connections.values():
            for writer in list(writers):
                writer.close()

    async def _set_mode(self, mode: Mode, source: str, delay_ms: int) -> None:
        self.links[source] = Link(mode, delay_ms)
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()
        if mode is Mode.DROP:
            for name, writers in self.connections.items():
                if self._effective(name).mode is Mode.DROP:
                    for writer in list(writers):
                        writer.close()

    def _effective(self, source: str) -> Link:
        """A source's own link, or the ANY link when the source has none."""
        return self.links.get(source) or self.links[ANY]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_port = int(writer.get_extra_info("peername")[1])
        source = await asyncio.to_thread(self.classify, peer_port, self.port)
        link = self._effective(source)
        if link.mode is Mode.DROP:
            writer.close()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()  # the target is down: the source sees a closed connection, as it would
            return
        writers = self.connections.setdefault(source, set())
        writers.update((writer, upstream_writer))
        with_sock = writer.get_extra_info("socket")
        if with_sock is not None:
            with_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(self._pump(source, reader, upstream_writer, to_server=True),
                                 self._pump(source, upstream_reader, writer, to_server=False))
        finally:
            writers.discard(writer)
            writers.discard(upstream_writer)
            writer.close()
            upstream_writer.close()

    async def _wait_change(self) -> None:
        assert self._changed is not None
        await self._changed.wait()

    async def _pump(self, source: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    to_server: bool) -> None:
        try:
            while True:
                link = self._effective(source)
                if link.mode is Mode.DROP:
                    return
                if not link.flows(to_server):
                    await self._wait_change()  # hold, not discard: a healed link resumes the stream
                    continue
                data = await reader.read(_CHUNK)
                if not data:
                    return
                link = self._effective(source)
                while not link.flows(to_server) and link.mode is not Mode.DROP:
                    await self._wait_change()  # the fault began while this chunk was in flight
                    link = self._effective(source)
                if link.mode is Mode.DROP:
                    return
                if link.mode is Mode.DELAY:
                    await asyncio.sleep(link.delay_ms / 1000)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()
