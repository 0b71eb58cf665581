"""The stream life cycle producers and consumers share (Pulsar's ConnectionHandler): one bidi
stream to the topic's owning broker, served by a writer task and a read loop, reconnected with
backoff until closed. TopicProducer and TopicConsumer fill in the hooks: what the stream carries."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar, cast

import grpc.aio

from herald.api.v1 import broker_pb2_grpc
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool, remaining, retrying
from herald.client.lookup import LookupService
from herald.common.backoff import Backoff
from herald.common.errors import HeraldError, HeraldTimeoutError
from herald.common.transport.rpc import EOF, error_from_rpc

if TYPE_CHECKING:
    from herald.api.v1.broker_pb2_grpc import BrokerServiceAsyncStub

RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT")
HandshakeT = TypeVar("HandshakeT")  # what the broker's answer to the handshake carries

OPEN, CLOSING, CLOSED = "open", "closing", "closed"


class Reconnect(Exception):
    """Raised by a reply handler to drop the stream and start over on a new one."""


class BrokerStream(ABC, Generic[RequestT, ReplyT, HandshakeT]):
    """Owns one stream of `RequestT` / `ReplyT` to the topic's broker, and the task serving it.

    `_state` is OPEN until the owner starts closing; the stream reconnects only while it is. The
    owner's `_start` calls `_connect_first` and runs `_run` in `_task`; its close calls
    `_stop_stream`. The hooks below say what the stream carries.
    """

    _role: ClassVar[str]  # "producer" or "consumer", in log messages
    _stream_name: ClassVar[str]  # in errors: "the produce stream"
    _log: ClassVar[logging.Logger]  # the owner's module logger
    _close_request: RequestT  # written last when closing, before half-closing

    def __init__(
        self, topic: str, name: str, client_config: ClientConfig, pool: ConnectionPool, lookup: LookupService,
    ) -> None:
        self._topic = topic
        self._name = name
        self._client_config = client_config
        self._pool = pool
        self._lookup = lookup
        self._loop = asyncio.get_running_loop()
        self._state = OPEN
        self._connected = False
        self._address = ""  # the broker of the latest stream
        self._task: asyncio.Task[None] | None = None
        self._writer_wake: asyncio.Future[None] | None = None
        self._backoff = Backoff(jitter=0.1)

    # ---- hooks ------------------------------------------------------------------------------

    @abstractmethod
    def _open_call(self, stub: BrokerServiceAsyncStub) -> grpc.aio.StreamStreamCall[RequestT, ReplyT]:
        """Open the stream's call (no request written yet)."""

    @abstractmethod
    def _handshake_what(self, address: str) -> str:
        """The handshake, as named in its errors: "subscribing 's' to <topic> at <address>"."""

    @abstractmethod
    async def _handshake(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> HandshakeT:
        """Introduce the client on a new call; raise a HeraldError if the broker refuses."""

    def _on_connected(self, accepted: HandshakeT, first: bool) -> None:
        """A handshake succeeded (and the owner is still open): adopt what the broker said."""

    def _first_connect_failed(self, error: HeraldError) -> None:
        """The first connect failed with `error` (and may be retried if it stays retryable)."""

    def _reconnect_failed(self, error: HeraldError) -> bool:
        """A reconnect failed with `error`: True stops reconnecting (the hook settles the state)."""
        return False

    def _on_disconnected(self) -> None:
        """The stream failed and the owner is still open: drop what the next stream must not see."""

    @abstractmethod
    def _on_reply(self, reply: ReplyT) -> None:
        """Handle one reply; raise `Reconnect` or a HeraldError to drop the stream."""

    @abstractmethod
    def _next_request(self) -> RequestT | None:
        """The next request to write, or None when there is none for now."""

    def _request_written(self) -> None:
        """The request `_next_request` gave was written."""

    # ---- connecting -------------------------------------------------------------------------

    async def _connect_first(self, what: str) -> grpc.aio.StreamStreamCall[RequestT, ReplyT]:
        """Connect, retrying what may pass within the operation timeout; `what` names it in the
        error when it does not."""
        call, accepted = await retrying(what, self._client_config.operation_timeout, self._first_connect)
        self._connected_with(accepted, first=True)
        return call

    async def _first_connect(self, deadline: float) -> tuple[grpc.aio.StreamStreamCall[RequestT, ReplyT], HandshakeT]:
        try:
            return await self._connect(deadline)
        except HeraldError as exc:
            self._first_connect_failed(exc)
            raise

    async def _connect(self, deadline: float) -> tuple[grpc.aio.StreamStreamCall[RequestT, ReplyT], HandshakeT]:
        self._address = address = await self._lookup.broker_for(self._topic)
        channel = await self._pool.get(address)
        call = self._open_call(broker_pb2_grpc.BrokerServiceStub(channel))
        what = self._handshake_what(address)
        try:
            return call, await asyncio.wait_for(self._handshake(call), remaining(deadline))
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            raise error_from_rpc(exc, what) from None
        except TimeoutError:
            call.cancel()
            raise HeraldTimeoutError(f"{what} timed out") from None
        except BaseException:
            call.cancel()
            raise

    def _connected_with(self, accepted: HandshakeT, first: bool) -> None:
        self._on_connected(accepted, first)
        self._connected = True
        self._backoff.reset()

    async def _run(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        """Own the stream: serve it, and on failure reconnect, until the owner closes."""
        while True:
            try:
                await self._serve(call)
                reason = "the broker ended the stream"
            except Reconnect as exc:
                reason = str(exc)
            except grpc.aio.AioRpcError as exc:
                reason = str(error_from_rpc(exc, self._stream_name))
            except HeraldError as exc:
                reason = str(exc)
            except Exception as exc:
                # A bug here must not leave the owner silently dead: start over on a new stream.
                self._log.exception("%s %s on %s: unexpected error on the stream", self._role, self._name,
                                    self._topic)
                reason = repr(exc)
            finally:
                self._connected = False
                call.cancel()
            if self._state is not OPEN:
                return
            self._log.info("%s %s on %s disconnected: %s; reconnecting", self._role, self._name, self._topic,
                           reason)
            self._on_disconnected()
            next_call = await self._reconnect()
            if next_call is None:
                return
            call = next_call

    async def _reconnect(self) -> grpc.aio.StreamStreamCall[RequestT, ReplyT] | None:
        while self._state is OPEN:
            await asyncio.sleep(self._backoff.next())
            deadline = self._loop.time() + self._client_config.operation_timeout
            try:
                call, accepted = await self._connect(deadline)
            except HeraldError as exc:
                if self._reconnect_failed(exc):
                    return None
                self._log.info("%s %s on %s: reconnect failed: %s", self._role, self._name, self._topic, exc)
                continue
            if self._state is not OPEN:
                call.cancel()
                return None
            self._connected_with(accepted, first=False)
            return call
        return None

    # ---- serving ----------------------------------------------------------------------------

    async def _serve(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        writer = self._loop.create_task(self._write_loop(call))
        try:
            await self._read_loop(call)
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _write_loop(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        next_request, request_written = self._next_request, self._request_written
        try:
            while True:
                request = next_request()
                if request is not None:
                    await call.write(request)
                    request_written()
                elif self._state is OPEN:
                    self._writer_wake = wake = self._loop.create_future()
                    await wake
                else:
                    await call.write(self._close_request)
                    await call.done_writing()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The reader notices a failed call by itself; anything else must not leave it waiting.
            self._log.debug("%s %s: write failed: %s", self._role, self._name, exc)
            call.cancel()

    def _wake_writer(self) -> None:
        wake = self._writer_wake
        if wake is not None:
            self._writer_wake = None
            if not wake.done():
                wake.set_result(None)

    async def _read_loop(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        on_reply = self._on_reply
        while True:
            reply = await call.read()
            if reply is EOF:
                return
            on_reply(cast(ReplyT, reply))

    # ---- closing ----------------------------------------------------------------------------

    async def _stop_stream(self, graceful: bool) -> None:
        """End the stream's task. Graceful (and connected): the writer first writes what is left
        and the close request and half-closes, and the broker gets the operation timeout to end
        the stream."""
        task = self._task
        if task is None:
            return
        if graceful and self._connected and not task.done():
            self._wake_writer()
            await asyncio.wait({task}, timeout=self._client_config.operation_timeout)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
