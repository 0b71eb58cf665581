"""One Pulsar client connection through the proxy, as Apache Pulsar's proxy serves it.

The proxy authenticates the client's CONNECT itself (herald.common.pulsar.auth, as a broker does),
then opens a connection to a broker and CONNECTs there as itself (its own token) naming the
client's role as original_principal (brokers take it only from proxy_roles), and answers the client
with the broker's CONNECTED (or its refusal). What comes next depends on the CONNECT:

- without proxy_to_broker_url, a lookup connection: the broker is any live one serving Pulsar's
  protocol; PARTITIONED_METADATA, LOOKUP and GET_TOPICS_OF_NAMESPACE (and PING / PONG) are relayed
  to it, and each LOOKUP_RESPONSE is rewritten to Connect with proxy_through_service_url, keeping
  the owner's brokerServiceUrl: the official clients then connect to the proxy again, naming that
  broker in CONNECT's proxy_to_broker_url (C++ client: BinaryProtoLookupService::findBroker,
  Commands::newConnect). Other commands are refused: producers and consumers go to the owner.
- with proxy_to_broker_url (host:port), the broker named, which must be one that lookup lists as
  live with that pulsar:// address (the proxy never dials an arbitrary address); after the
  handshake bytes are spliced both ways, unparsed, until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from herald import __version__
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.common.errors import HeraldError, NotAllowedError, ServiceNotReadyError
from herald.common.pulsar.auth import ConnectAuthenticator, Identity, peer_certificate
from herald.common.pulsar.errors import server_error
from herald.common.pulsar.frames import FRAME_PADDING, FrameDecoder, FrameError, encode_command
from herald.common.security.credentials import AuthenticationToken
from herald.proxy.lookups import Lookups, host_port

log = logging.getLogger(__name__)
Command = pulsar.BaseCommand
CLIENT_VERSION = f"Herald-proxy-{__version__}"
PROTOCOL_VERSION = 20  # what PulsarApi.proto (vendored) defines
_READ_SIZE = 256 * 1024
# A CONNECT carries credentials, nothing large: bigger is refused before it is read.
MAX_CONNECT_FRAME = 64 * 1024
# What a lookup connection's client may send (answers from the broker are bounded by its own
# frame limit: a namespace's topic list can be long).
MAX_LOOKUP_FRAME = 1024 * 1024
MAX_BROKER_FRAME = 64 * 1024 * 1024 + FRAME_PADDING
LOOKUP_COMMANDS = frozenset({Command.PARTITIONED_METADATA, Command.LOOKUP, Command.GET_TOPICS_OF_NAMESPACE,
                             Command.PING, Command.PONG})


@dataclass(slots=True)
class RelayContext:
    """What every relayed connection shares (made once by the proxy's Pulsar front end)."""

    authenticator: ConnectAuthenticator
    lookups: Lookups
    token: AuthenticationToken | None  # the proxy's own credentials towards brokers
    connect_timeout: float  # for the client's CONNECT
    operation_timeout: float  # for lookup's answers and the broker's handshake


class Refused(Exception):
    """The client's connection ends with this error (sent as Pulsar's ERROR)."""

    def __init__(self, error: HeraldError) -> None:
        super().__init__(str(error))
        self.error = error


async def read_frame(reader: asyncio.StreamReader, max_size: int) -> Command:
    """The one frame a peer sends before waiting for an answer (CONNECT, CONNECTED), read exactly:
    nothing after it is consumed, so the splice that follows starts at the next frame."""
    header = await reader.readexactly(4)
    size = int.from_bytes(header, "big")
    if size > max_size:
        raise FrameError(f"a handshake frame of {size} bytes is over the limit of {max_size}")
    body = await reader.readexactly(size)
    frames = list(FrameDecoder(max_size + 4).feed(header + body))
    return frames[0].command


class Relay:
    """One client connection: run() until either side closes."""

    def __init__(self, context: RelayContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.context = context
        self._reader = reader
        self._writer = writer
        self.peer = str(writer.get_extra_info("peername"))
        self.identity = Identity(None)
        self._broker: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def handshake(self) -> tuple[Command, str | None]:
        """The client's CONNECT (within connect_timeout) and the identity it establishes; the
        broker it names (host:port), None for a lookup connection. Refused: why not."""
        try:
            async with asyncio.timeout(self.context.connect_timeout):
                command = await read_frame(self._reader, MAX_CONNECT_FRAME)
        except TimeoutError:
            raise Refused(ServiceNotReadyError(
                f"no CONNECT within {self.context.connect_timeout:g} s (pulsar_connect_timeout)")) from None
        if command.type != Command.CONNECT:
            raise Refused(NotAllowedError(f"the first command must be CONNECT, got {_name(command)}"))
        connect = command.connect
        try:
            self.identity = self.context.authenticator.connect(
                connect, peer_certificate(self._writer.get_extra_info("ssl_object")))
        except HeraldError as error:
            raise Refused(error) from None
        return command, host_port(connect.proxy_to_broker_url) if connect.proxy_to_broker_url else None

    async def open_broker(self, connect: Command, broker: str | None) -> bool:
        """Connect to the broker (the one named, once checked, else any) and CONNECT there as the
        proxy for the client; the client gets the broker's answer. Whether it was CONNECTED."""
        timeout = self.context.operation_timeout
        try:
            if broker is None:
                broker = await self.context.lookups.any_pulsar_broker(timeout)
            elif broker not in await self.context.lookups.pulsar_brokers(timeout) and \
                    broker not in await self.context.lookups.pulsar_brokers(timeout, fresh=True):
                raise NotAllowedError(
                    f"proxy_to_broker_url {broker!r} is not the pulsar:// address of a live broker of this "
                    "cluster: the proxy connects only to the brokers lookup lists (look topics up through the proxy)")
        except HeraldError as error:
            raise Refused(error) from None
        host, _, port = broker.rpartition(":")
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
                self._broker = (reader, writer)
                writer.write(encode_command(self._broker_connect(connect.connect)))
                answer = await read_frame(reader, MAX_CONNECT_FRAME)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, FrameError) as exc:
            raise Refused(ServiceNotReadyError(
                f"broker {broker} cannot be reached through the proxy ({exc!r}): retry")) from None
        self._writer.write(encode_command(answer))
        if answer.type == Command.CONNECTED:
            log.debug("pulsar connection %s: %s as %s", self.peer, f"to broker {broker}" if connect.connect.
                      proxy_to_broker_url else f"lookups through broker {broker}", self.identity.role)
            return True
        log.info("pulsar connection %s: broker %s refused the proxy's CONNECT: %s", self.peer, broker,
                 answer.error.message if answer.type == Command.ERROR else _name(answer))
        return False

    def _broker_connect(self, client: pulsar.CommandConnect) -> Command:
        connect = pulsar.CommandConnect(
            client_version=f"{client.client_version} via {CLIENT_VERSION}",
            protocol_version=min(client.protocol_version, PROTOCOL_VERSION))
        connect.feature_flags.CopyFrom(client.feature_flags)
        token = self.context.token
        if token is not None:
            connect.auth_method_name, connect.auth_data = "token", token.token().encode()
        if self.identity.role is not None:
            connect.original_principal = self.identity.role
        return Command(type=Command.CONNECT, connect=connect)

    async def serve(self, admit: Callable[[], HeraldError | None]) -> None:
        """The connection's whole life. `admit` is asked once the client authenticated (the
        connection limits): an error refuses it."""
        try:
            connect, broker = await self.handshake()
            refused = admit()
            if refused is not None:
                raise Refused(refused)
            if not await self.open_broker(connect, broker):
                await self._writer.drain()
                return
            if broker is None:
                await self._relay_lookups()
            else:
                await self._splice()
        except Refused as refusal:
            log.info("pulsar connection %s refused: %s", self.peer, refusal.error)
            with contextlib.suppress(ConnectionError):
                self._writer.write(encode_command(error_command(refusal.error)))
                await self._writer.drain()
        except FrameError as error:
            log.warning("pulsar connection %s: %s: closing", self.peer, error)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await self.close()

    async def close(self) -> None:
        if self._broker is not None:
            await close(self._broker[1])
        await close(self._writer)

    async def _splice(self) -> None:
        """Bytes both ways, unparsed, until either side ends."""
        assert self._broker is not None
        broker_reader, broker_writer = self._broker
        await _first_to_end(splice(self._reader, broker_writer), splice(broker_reader, self._writer))

    async def _relay_lookups(self) -> None:
        """Lookups both ways, parsed: the client's may only be lookups; the broker's LOOKUP_RESPONSEs
        are rewritten to send the client through the proxy."""
        assert self._broker is not None
        await _first_to_end(self._lookups_to_broker(self._broker[1]), self._answers_to_client(self._broker[0]))

    async def _lookups_to_broker(self, broker: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(MAX_LOOKUP_FRAME)
        while data := await self._reader.read(_READ_SIZE):
            for command, _ in decoder.feed(data):
                if command.type in LOOKUP_COMMANDS:
                    broker.write(encode_command(command))
                elif command.type != Command.AUTH_RESPONSE:  # the proxy asks for none: dropped
                    self._writer.write(encode_command(error_command(NotAllowedError(
                        f"{_name(command)} on a lookup connection to the proxy: producers and consumers connect to "
                        "the broker a LOOKUP names (through the proxy, with proxy_to_broker_url)"),
                        _request_id(command))))
            await broker.drain()

    async def _answers_to_client(self, broker: asyncio.StreamReader) -> None:
        decoder = FrameDecoder(MAX_BROKER_FRAME)
        while data := await broker.read(_READ_SIZE):
            for command, _ in decoder.feed(data):
                if command.type == Command.LOOKUP_RESPONSE:
                    answer = command.lookupTopicResponse
                    if answer.response in (answer.Redirect, answer.Connect):
                        # The owner's URL stays: the client names it in its next CONNECT, to the proxy.
                        answer.response = answer.Connect
                        answer.proxy_through_service_url = True
                        answer.authoritative = True
                elif command.type == Command.AUTH_CHALLENGE:
                    # The broker renews the proxy's own credentials, not the client's.
                    assert self._broker is not None
                    self._broker[1].write(encode_command(self._auth_response()))
                    continue
                self._writer.write(encode_command(command))
            await self._writer.drain()

    def _auth_response(self) -> Command:
        response = pulsar.CommandAuthResponse(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        token = self.context.token
        response.response.auth_method_name = "token"
        response.response.auth_data = token.token().encode() if token is not None else b""
        return Command(type=Command.AUTH_RESPONSE, authResponse=response)


async def _first_to_end(*work: Awaitable[None]) -> None:
    """Run both directions; when one ends (its side closed, or failed) the other is cancelled."""
    tasks = [asyncio.ensure_future(one) for one in work]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        error = task.exception()
        if error is not None:
            raise error


def _request_id(command: Command) -> int:
    """The request id of a command that carries one (its sub-message's), else 0."""
    for field, value in command.ListFields():
        if field.name != "type" and hasattr(value, "request_id"):
            return int(value.request_id)
    return 0


def _name(command: Command) -> str:
    return str(Command.Type.Name(command.type)) if command.type in Command.Type.values() else str(command.type)


def error_command(error: HeraldError, request_id: int = 0) -> Command:
    return Command(type=Command.ERROR, error=pulsar.CommandError(
        request_id=request_id, error=server_error(error), message=str(error)))  # type: ignore[arg-type]


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy bytes until `reader` ends, waiting while `writer`'s peer reads slower."""
    while data := await reader.read(_READ_SIZE):
        writer.write(data)
        await writer.drain()


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
