"""One Pulsar client connection: the CONNECT handshake, then every command the official clients send,
each answered as Pulsar's broker answers it. Many producers and consumers share the connection
(by the ids the client gives them); each is an endpoint (producers.py, consumers.py) over a core
session. PING / PONG keep it alive both ways: a connection silent for two keepalive intervals is
closed. Bytes that are no frame close the connection (its framing is lost); a command this broker
cannot serve gets Pulsar's error for it and the connection goes on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.pulsar import lookups, schemas
from herald.broker.pulsar.consumers import ConsumerEndpoint
from herald.broker.pulsar.frontend import PROTOCOL_VERSION, SERVER_VERSION, FrontEnd
from herald.broker.pulsar.producers import ProducerEndpoint
from herald.common.errors import AuthenticationError, HeraldError, TooManyRequestsError
from herald.common.pulsar.auth import Identity, peer_certificate
from herald.common.pulsar.errors import server_error
from herald.common.pulsar.frames import FrameDecoder, FrameError, encode_command, encode_with_payload
from herald.common.tasks import cancel_and_wait

log = logging.getLogger(__name__)
Command = pulsar.BaseCommand
_READ_SIZE = 256 * 1024
# A connection must say CONNECT this soon after it opens.
HANDSHAKE_SECONDS = 10.0
# An expired token is asked to be refreshed; the client has this long to answer.
AUTH_REFRESH_SECONDS = 30.0


class ConnectionClosed(Exception):
    """The connection is going away (its client left, or the broker closes it)."""


class PulsarConnection:
    def __init__(self, frontend: FrontEnd, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 keepalive_seconds: float, admit: Callable[[], HeraldError | None] = lambda: None) -> None:
        self.frontend = frontend
        # Asked once the connection authenticated: an error refuses it (a limit on connections).
        self._admit = admit
        self.admitted = False
        self._reader = reader
        self._writer = writer
        self._keepalive = keepalive_seconds
        self.peer = str(writer.get_extra_info("peername"))
        self.identity = Identity(None)
        self.client_version = ""
        self.protocol_version = 0
        self.producers: dict[int, ProducerEndpoint] = {}
        self.consumers: dict[int, ConsumerEndpoint] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_heard = time.monotonic()
        self._pinged = False
        self._closing = False
        self._refreshing: asyncio.TimerHandle | None = None
        self._handlers: dict[int, Callable[[Command], Awaitable[None]]] = {
            Command.PING: self._ping, Command.PONG: self._pong,
            Command.PARTITIONED_METADATA: self._partitioned_metadata, Command.LOOKUP: self._lookup,
            Command.GET_TOPICS_OF_NAMESPACE: self._topics_of_namespace,
            Command.PRODUCER: self._producer, Command.CLOSE_PRODUCER: self._close_producer,
            Command.SUBSCRIBE: self._subscribe, Command.CLOSE_CONSUMER: self._close_consumer,
            Command.FLOW: self._consumer_command, Command.ACK: self._consumer_command,
            Command.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._consumer_command,
            Command.SEEK: self._consumer_command, Command.UNSUBSCRIBE: self._consumer_command,
            Command.GET_LAST_MESSAGE_ID: self._consumer_command, Command.CONSUMER_STATS: self._consumer_command,
            Command.AUTH_RESPONSE: self._auth_response, Command.GET_SCHEMA: self._get_schema,
            Command.GET_OR_CREATE_SCHEMA: self._get_or_create_schema,
        }

    # ---- writing ----

    def write(self, command: Command) -> None:
        if not self._closing:
            self._writer.write(encode_command(command))

    def write_with_payload(self, command: Command, payload: bytes | memoryview) -> None:
        if not self._closing:
            self._writer.writelines(encode_with_payload(command, payload))

    async def drain(self) -> None:
        """Wait while the client reads slower than it is written to (the transport's buffer)."""
        if self._closing:
            raise ConnectionClosed
        await self._writer.drain()

    def spawn(self, work: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        """A task of this connection's (cancelled when it closes)."""
        task = asyncio.ensure_future(work)
        task.set_name(f"{name} {self.peer}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def error(self, request_id: int, error: HeraldError) -> None:
        self.write(Command(type=Command.ERROR, error=pulsar.CommandError(
            request_id=request_id, error=server_error(error), message=str(error))))  # type: ignore[arg-type]

    def success(self, request_id: int) -> None:
        self.write(Command(type=Command.SUCCESS, success=pulsar.CommandSuccess(request_id=request_id)))

    @property
    def stream_count(self) -> int:
        return len(self.producers) + len(self.consumers)

    def check_room_for_stream(self) -> None:
        """The limit on producers and consumers per connection (the gRPC path's streams per connection)."""
        limit = self.frontend.settings.max_streams_per_connection
        if self.stream_count >= limit:
            raise TooManyRequestsError(
                f"this connection has {self.stream_count} producers and consumers, the broker's limit "
                f"(max_streams_per_connection {limit}): open another connection or close some")

    # ---- the connection's life ----

    async def run(self) -> None:
        decoder = FrameDecoder(self.frontend.max_frame_size)
        keepalive = asyncio.ensure_future(self._keep_alive())
        try:
            async with asyncio.timeout(HANDSHAKE_SECONDS):
                first = await self._next_frame(decoder, [])
            if first is None:
                return
            if not await self._handshake(first):
                return
            pending: list[tuple[Command, memoryview | None]] = []
            while True:
                frame = await self._next_frame(decoder, pending)
                if frame is None:
                    return
                await self._dispatch(*frame)
        except TimeoutError:
            log.info("pulsar connection %s: no CONNECT within %.0f s: closing", self.peer, HANDSHAKE_SECONDS)
        except FrameError as error:
            log.warning("pulsar connection %s: %s: closing", self.peer, error)
        except (ConnectionClosed, ConnectionError):
            pass
        finally:
            await cancel_and_wait(keepalive, swallow_errors=True)
            await self.close()

    async def _next_frame(
        self, decoder: FrameDecoder, pending: list[tuple[Command, memoryview | None]],
    ) -> tuple[Command, memoryview | None] | None:
        """The next frame (reading as much as the socket has); None when the client hung up."""
        while not pending:
            data = await self._reader.read(_READ_SIZE)
            if not data:
                return None
            self._last_heard = time.monotonic()
            self._pinged = False
            pending.extend(decoder.feed(data))
            pending.reverse()
        return pending.pop()

    async def _handshake(self, frame: tuple[Command, memoryview | None]) -> bool:
        command = frame[0]
        if command.type != Command.CONNECT:
            log.info("pulsar connection %s: first command %s, not CONNECT: closing", self.peer, command.type)
            return False
        connect = command.connect
        self.client_version = connect.client_version
        self.protocol_version = min(connect.protocol_version, PROTOCOL_VERSION)
        ssl_object = self._writer.get_extra_info("ssl_object")
        try:
            self.identity = self.frontend.authenticator.connect(connect, peer_certificate(ssl_object))
        except HeraldError as error:
            log.info("pulsar connection %s refused: %s", self.peer, error)
            self.error(0, error)
            await self._writer.drain()
            return False
        refused = self._admit()
        if refused is not None:
            log.info("pulsar connection %s refused: %s", self.peer, refused)
            self.error(0, refused)
            await self._writer.drain()
            return False
        self.admitted = True
        connected = pulsar.CommandConnected(server_version=SERVER_VERSION, protocol_version=self.protocol_version,
                                            max_message_size=self.frontend.max_message_size)
        connected.feature_flags.supports_auth_refresh = True
        self.write(Command(type=Command.CONNECTED, connected=connected))
        self._schedule_refresh()
        log.debug("pulsar connection %s: %s (protocol %d) as %s", self.peer, self.client_version,
                  self.protocol_version, self.identity.role)
        return True

    async def _dispatch(self, command: Command, payload: memoryview | None) -> None:
        if command.type == Command.SEND:
            await self._send(command.send, payload)
            return
        handler = self._handlers.get(command.type)
        if handler is None:
            self._unsupported(command)
            return
        await handler(command)

    def _unsupported(self, command: Command) -> None:
        name = Command.Type.Name(command.type)
        request_id = _request_id(command)
        message = (f"{name} is not supported by this broker (Herald): transactions, topic watchers and "
                   "replication are not implemented")
        if request_id is None:
            log.info("pulsar connection %s: %s: closing", self.peer, message)
            raise ConnectionClosed
        self.write(Command(type=Command.ERROR, error=pulsar.CommandError(
            request_id=request_id, error=pulsar.NotAllowedError, message=message)))

    async def close(self) -> None:
        """Close every producer and consumer of the connection, then the connection. Idempotent."""
        if self._closing:
            return
        self._closing = True
        if self._refreshing is not None:
            self._refreshing.cancel()
        for producer in list(self.producers.values()):
            await producer.close(drain=False)
        for consumer in list(self.consumers.values()):
            await consumer.close()
        self.producers.clear()
        self.consumers.clear()
        for task in list(self._tasks):
            await cancel_and_wait(task, swallow_errors=True)
        with contextlib.suppress(Exception):
            self._writer.close()
            await self._writer.wait_closed()

    # ---- keepalive and token refresh ----

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self._keepalive)
            silent = time.monotonic() - self._last_heard
            if silent < self._keepalive:
                continue
            if self._pinged:
                log.info("pulsar connection %s: no answer to a ping for %.0f s: closing", self.peer, silent)
                self._writer.close()
                return
            self._pinged = True
            self.write(Command(type=Command.PING, ping=pulsar.CommandPing()))

    async def _ping(self, command: Command) -> None:
        self.write(Command(type=Command.PONG, pong=pulsar.CommandPong()))

    async def _pong(self, command: Command) -> None:
        self._pinged = False

    def _schedule_refresh(self) -> None:
        """Ask for fresh credentials when the token expires (the client answers AUTH_RESPONSE)."""
        expires = self.identity.expires
        if expires is None or not self.identity.token:
            return
        loop = asyncio.get_running_loop()
        self._refreshing = loop.call_later(max(0.0, expires - time.time()), self._challenge)

    def _challenge(self) -> None:
        challenge = pulsar.CommandAuthChallenge(server_version=SERVER_VERSION, protocol_version=self.protocol_version)
        challenge.challenge.auth_method_name = "token"
        challenge.challenge.auth_data = b"refresh"
        self.write(Command(type=Command.AUTH_CHALLENGE, authChallenge=challenge))
        # Not refreshed in time: the connection goes (its producers and consumers reconnect, with
        # whatever token the client has then).
        self._refreshing = asyncio.get_running_loop().call_later(AUTH_REFRESH_SECONDS, self._writer.close)

    async def _auth_response(self, command: Command) -> None:
        if self._refreshing is not None:
            self._refreshing.cancel()
        try:
            self.identity = self.frontend.authenticator.refresh(command.authResponse, self.identity)
        except AuthenticationError as error:
            log.info("pulsar connection %s: refreshed credentials refused (%s): closing", self.peer, error)
            self.error(0, error)
            self._writer.close()
            return
        self._schedule_refresh()

    # ---- lookups ----

    async def _partitioned_metadata(self, command: Command) -> None:
        self.write(await lookups.partitioned_metadata(self.frontend, self.identity.role, command.partitionMetadata))

    async def _lookup(self, command: Command) -> None:
        self.write(await lookups.lookup(self.frontend, self.identity.role, command.lookupTopic))

    async def _topics_of_namespace(self, command: Command) -> None:
        self.write(await lookups.topics_of_namespace(self.frontend, self.identity.role, command.getTopicsOfNamespace))

    async def _get_schema(self, command: Command) -> None:
        self.write(await schemas.get_schema(self.frontend, self.identity.role, command.getSchema))

    async def _get_or_create_schema(self, command: Command) -> None:
        self.write(await schemas.get_or_create_schema(self.frontend, self.identity.role, command.getOrCreateSchema))

    # ---- producers ----

    def _may_open(self, existing: ProducerEndpoint | ConsumerEndpoint | None, request_id: int) -> bool:
        """Whether a PRODUCER or SUBSCRIBE opens a new endpoint: not when the client asked again for
        one it has (answered again), nor past the connection's limit (refused)."""
        if existing is not None:  # the client asked again while (or after) the first was answered
            existing.answer_again(request_id)
            return False
        try:
            self.check_room_for_stream()
        except HeraldError as error:
            self.error(request_id, error)
            return False
        return True

    async def _producer(self, command: Command) -> None:
        request = command.producer
        if not self._may_open(self.producers.get(request.producer_id), request.request_id):
            return
        endpoint = ProducerEndpoint(self, request.producer_id)
        self.producers[request.producer_id] = endpoint
        if request.producer_access_mode == pulsar.WaitForExclusive:
            # It may wait for the topic as long as others hold it: the connection's other commands go on.
            endpoint.registering = self.spawn(self._register(endpoint, request),
                                              f"producer {request.producer_id} waiting for its topic")
            return
        await self._register(endpoint, request)

    async def _register(self, endpoint: ProducerEndpoint, request: pulsar.CommandProducer) -> None:
        if not await endpoint.register(request) and self.producers.get(request.producer_id) is endpoint:
            del self.producers[request.producer_id]

    async def _send(self, send: pulsar.CommandSend, payload: memoryview | None) -> None:
        endpoint = self.producers.get(send.producer_id)
        if endpoint is None:
            # A producer closed by the broker, whose client has not seen CLOSE_PRODUCER yet: it
            # reconnects and sends again (Pulsar's broker ignores these sends the same way).
            return
        await endpoint.send(send, payload)

    async def _close_producer(self, command: Command) -> None:
        request = command.close_producer
        endpoint = self.producers.pop(request.producer_id, None)
        if endpoint is not None:
            await endpoint.close(drain=True)
        self.success(request.request_id)

    def producer_closed_by_broker(self, endpoint: ProducerEndpoint) -> None:
        if self.producers.get(endpoint.producer_id) is endpoint:
            del self.producers[endpoint.producer_id]
            self.write(Command(type=Command.CLOSE_PRODUCER, close_producer=pulsar.CommandCloseProducer(
                producer_id=endpoint.producer_id, request_id=0)))

    # ---- consumers ----

    async def _subscribe(self, command: Command) -> None:
        request = command.subscribe
        if not self._may_open(self.consumers.get(request.consumer_id), request.request_id):
            return
        endpoint = ConsumerEndpoint(self, request.consumer_id)
        self.consumers[request.consumer_id] = endpoint
        if not await endpoint.subscribe(request):
            self.consumers.pop(request.consumer_id, None)

    async def _consumer_command(self, command: Command) -> None:
        consumer_id = _consumer_id(command)
        endpoint = self.consumers.get(consumer_id)
        if endpoint is None:
            request_id = _request_id(command)
            if request_id is not None:
                self.write(Command(type=Command.ERROR, error=pulsar.CommandError(
                    request_id=request_id, error=pulsar.ConsumerNotFound,
                    message=f"consumer {consumer_id} is not connected on this connection")))
            return
        await endpoint.handle(command)

    async def _close_consumer(self, command: Command) -> None:
        request = command.close_consumer
        endpoint = self.consumers.pop(request.consumer_id, None)
        if endpoint is not None:
            await endpoint.close()
        self.success(request.request_id)

    def consumer_closed_by_broker(self, endpoint: ConsumerEndpoint) -> None:
        if self.consumers.get(endpoint.consumer_id) is endpoint:
            del self.consumers[endpoint.consumer_id]
            self.write(Command(type=Command.CLOSE_CONSUMER, close_consumer=pulsar.CommandCloseConsumer(
                consumer_id=endpoint.consumer_id, request_id=0)))

    def consumer_finished(self, endpoint: ConsumerEndpoint) -> None:
        """Unsubscribed: the endpoint leaves the connection (the client closes its consumer)."""
        if self.consumers.get(endpoint.consumer_id) is endpoint:
            del self.consumers[endpoint.consumer_id]


_CONSUMER_COMMANDS = {
    Command.FLOW: "flow", Command.ACK: "ack",
    Command.REDELIVER_UNACKNOWLEDGED_MESSAGES: "redeliverUnacknowledgedMessages", Command.SEEK: "seek",
    Command.UNSUBSCRIBE: "unsubscribe", Command.GET_LAST_MESSAGE_ID: "getLastMessageId",
    Command.CONSUMER_STATS: "consumerStats",
}


def _consumer_id(command: Command) -> int:
    return int(getattr(command, _CONSUMER_COMMANDS[command.type]).consumer_id)


def _request_id(command: Command) -> int | None:
    """The request id a command carries (None: it has none, so it cannot be answered)."""
    for descriptor, value in command.ListFields():
        if descriptor.name != "type" and hasattr(value, "request_id"):
            return int(value.request_id)
    return None
