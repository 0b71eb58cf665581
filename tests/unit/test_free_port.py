"""free_port: the ports handed to servers a test starts next."""

from __future__ import annotations

import socket

from herald.local_cluster import ephemeral_low, free_port


def test_ports_are_distinct_and_outside_the_range_outgoing_connections_draw_from() -> None:
    low = ephemeral_low()
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(port < low for port in ports)


def test_a_port_in_use_is_not_handed_out() -> None:
    held = []
    try:
        for _ in range(50):
            sock = socket.socket()
            sock.bind(("127.0.0.1", free_port()))
            sock.listen()
            held.append(sock)
        in_use = {sock.getsockname()[1] for sock in held}
        assert not in_use & {free_port() for _ in range(200)}
    finally:
        for sock in held:
            sock.close()
