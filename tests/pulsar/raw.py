"""Pulsar's protocol spoken by hand over a socket, for what the official clients never send."""

from __future__ import annotations

import socket

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.pulsar.frames import FrameDecoder, encode_command

Command = pulsar.BaseCommand


class RawConnection:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._decoder = FrameDecoder(64 << 20)
        self._frames: list[Command] = []

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sock.close()

    def send(self, command: Command) -> None:
        self.sock.sendall(encode_command(command))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, token: str | None = None) -> Command:
        """CONNECT as the official clients send it; the broker's answer."""
        connect = pulsar.CommandConnect(client_version="raw-test", protocol_version=20)
        if token is not None:
            connect.auth_method_name, connect.auth_data = "token", token.encode()
        self.send(Command(type=Command.CONNECT, connect=connect))
        return self.receive()

    def receive(self) -> Command:
        """The next command (PINGs answered and skipped); AssertionError when the broker closed."""
        while True:
            while not self._frames:
                data = self.sock.recv(65536)
                assert data, "the broker closed the connection"
                self._frames.extend(frame.command for frame in self._decoder.feed(data))
            command = self._frames.pop(0)
            if command.type != Command.PING:
                return command
            self.send(Command(type=Command.PONG, pong=pulsar.CommandPong()))

    def closed_by_broker(self) -> bool:
        """Whether the broker closes the connection (nothing more comes but its end)."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, TimeoutError):
            return False
