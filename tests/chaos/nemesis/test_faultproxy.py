"""The fault proxy against a tiny echo server: each mode does what the nemesis relies on."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.chaos.nemesis.faultproxy import ANY, FaultProxy, Mode, peer_process
from tests.helpers import eventually_sync

RECEIVED: list[bytes] = []  # what the echo server got, in order: proof that data crossed the proxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            RECEIVED.append(data)
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[int]:
    RECEIVED.clear()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo: int) -> Iterator[FaultProxy]:
    me = {os.getpid(): "tester"}
    fault_proxy = FaultProxy("echo", "127.0.0.1", echo,
                             classify=lambda peer, listen: peer_process(peer, listen, me)).start()
    yield fault_proxy
    fault_proxy.stop()


def _connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def _nothing_waiting(sock: socket.socket) -> bool:
    """True when no byte is readable right now and the connection is open (no waiting)."""
    sock.setblocking(False)
    try:
        sock.recv(4096)  # data, or b"" for a closed connection: either way not "nothing, open"
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)
    return False


def _received_within(sock: socket.socket, seconds: float) -> bytes:
    """What arrives within `seconds` (b"" when nothing does: the socket timed out or closed)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(4096)
    except TimeoutError:
        return b""
    except ConnectionError:
        return b""


def test_pass_forwards_both_ways(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        sock.sendall(b"hello")
        assert _received_within(sock, 5) == b"hello"


def test_the_source_is_the_process_that_connected(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        sock.sendall(b"x")
        assert _received_within(sock, 5) == b"x"
        assert proxy.connection_count("tester") == 1


def test_drop_closes_open_connections_and_refuses_new_ones(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        sock.sendall(b"a")
        assert _received_within(sock, 5) == b"a"
        proxy.set_mode(Mode.DROP, "tester")
        sock.settimeout(5)
        assert sock.recv(10) == b""  # closed by the proxy: EOF, not a timeout
    with _connect(proxy) as sock:
        sock.settimeout(5)
        assert sock.recv(10) == b""
    proxy.heal()
    with _connect(proxy) as sock:
        sock.sendall(b"b")
        assert _received_within(sock, 5) == b"b"


def test_blackhole_holds_traffic_and_a_heal_resumes_it(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        proxy.set_mode(Mode.BLACKHOLE, "tester")
        sock.sendall(b"held")
        assert _nothing_waiting(sock)  # the connection stays open
        proxy.heal()
        assert _received_within(sock, 5) == b"held"


def test_a_link_of_another_source_leaves_this_one_alone(proxy: FaultProxy) -> None:
    proxy.set_mode(Mode.DROP, "somebody-else")
    with _connect(proxy) as sock:
        sock.sendall(b"mine")
        assert _received_within(sock, 5) == b"mine"


def test_the_default_link_covers_unnamed_sources(echo: int) -> None:
    fault_proxy = FaultProxy("anon", "127.0.0.1", echo).start()
    try:
        fault_proxy.set_mode(Mode.DROP, ANY)
        with socket.create_connection(("127.0.0.1", fault_proxy.port), timeout=5) as sock:
            sock.settimeout(5)
            assert sock.recv(10) == b""
    finally:
        fault_proxy.stop()


def test_one_way_client_to_server_delivers_nothing_back(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        proxy.set_mode(Mode.CLIENT_TO_SERVER, "tester")
        sock.sendall(b"up")
        eventually_sync(lambda: b"".join(RECEIVED), "the server received what went up", until=lambda got: got == b"up")
        assert _nothing_waiting(sock)  # its echo reached the proxy, which holds it
        proxy.set_mode(Mode.SERVER_TO_CLIENT, "tester")
        assert _received_within(sock, 5) == b"up"  # now the way back is open
        sock.sendall(b"held-up")
        proxy.heal()
        assert _received_within(sock, 5) == b"held-up"  # held while one-way, not discarded


def test_delay_still_delivers_in_order(proxy: FaultProxy) -> None:
    proxy.set_mode(Mode.DELAY, "tester", delay_ms=50)
    with _connect(proxy) as sock:
        for part in (b"1", b"2", b"3"):
            sock.sendall(part)
        received = b""
        while len(received) < 3:
            chunk = _received_within(sock, 5)
            assert chunk, "the delayed data never arrived"
            received += chunk
        assert received == b"123"
