"""The transport producers and consumers share (Pulsar's ConnectionHandler): one bidi stream to the
topic's owning broker, served by a writer task and a read loop, and on failure looked up, opened
and introduced again with backoff, until its owner ends it. What the stream carries is a protocol
object's business (producer_protocol.py, consumer_protocol.py): it builds every request, takes
every reply and does no I/O (the port between the two: stream_protocol.py); the stream writes what it
asks for and hands it what comes back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar, cast

import grpc.aio

from herald.api.v1 import broker_pb2_grpc
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool, cancelled_under_us, closed_as_error, remaining, retrying
from herald.client.lookup import LookupService
from herald.client.reconnect import ReconnectPolicy
from herald.client.stream_protocol import Reconnect, StreamProtocol
from herald.common.errors import ConnectionError_, HeraldError, HeraldTimeoutError, NotOwnerError
from herald.common.transport.rpc import EOF, error_from_rpc

if TYPE_CHECKING:
    from herald.api.v1.broker_pb2_grpc import BrokerServiceAsyncStub

RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT")
AcceptedT = TypeVar("AcceptedT")  # what the broker's answer to the handshake carries


class BrokerStream(Generic[RequestT, ReplyT, AcceptedT]):
    """Owns one stream of `RequestT` / `ReplyT` to the topic's broker, and the task serving it.

    `open_call` opens the RPC on a stub. The owner's policy comes in two optional hooks:
    `connect_failed(error, first)` sees each failed connect (True after a failed reconnect stops
    reconnecting), `before_reconnect()` runs before each reconnect attempt (raise a HeraldError to
    fail it). The stream reconnects until `end()`; `stop()` ends its task.
    """

    def __init__(
        self, protocol: StreamProtocol[RequestT, ReplyT, AcceptedT],
        open_call: Callable[[BrokerServiceAsyncStub], grpc.aio.StreamStreamCall[RequestT, ReplyT]],
        client_config: ClientConfig, pool: ConnectionPool, lookup: LookupService, log: logging.Logger, *,
        connect_failed: Callable[[HeraldError, bool], bool] | None = None,
        before_reconnect: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._protocol = protocol
        self._open_call = open_call
        self._client_config = client_config
        self._pool = pool
        self._lookup = lookup
        self._log = log
        self._connect_failed = connect_failed
        self._before_reconnect = before_reconnect
        self._loop = asyncio.get_running_loop()
        self._running = True  # until the owner ends it: reconnect on failure
        self.connected = False
        self.address = ""  # the broker of the latest stream
        self._task: asyncio.Task[None] | None = None
        self._writer_wake: asyncio.Future[None] | None = None
        self._policy = ReconnectPolicy()
        protocol.wake = self.wake

    @property
    def running(self) -> bool:
        """False once the owner ended the stream (closing, or the topic was terminated)."""
        return self._running

    # ---- the owner's calls ------------------------------------------------------------------

    async def start(self, what: str, task_name: Callable[[], str]) -> None:
        """Connect, retrying what may pass within the operation timeout (`what` names it in the
        error when it does not), then serve the stream in the background, in a task named once
        connected (the broker may name a producer)."""
        call, accepted = await retrying(what, self._client_config.operation_timeout, self._first_connect)
        self._connected_with(accepted, first=True)
        self._task = self._loop.create_task(self._run(call), name=task_name())

    def wake(self) -> None:
        """There may be a request to write: wake the writer if it waits."""
        wake = self._writer_wake
        if wake is not None:
            self._writer_wake = None
            if not wake.done():
                wake.set_result(None)

    def end(self) -> None:
        """Stop reconnecting: the owner is closing (or the topic ended). A woken writer then
        writes what is left and the close request, and half-closes."""
        self._running = False

    async def stop(self, graceful: bool) -> None:
        """End the stream's task (call `end()` first). Graceful (and connected): the writer first
        writes what is left and the close request and half-closes, and the broker gets the
        operation timeout to end the stream."""
        self._running = False
        task = self._task
        if task is None:
            return
        if graceful and self.connected and not task.done():
            self.wake()
            await asyncio.wait({task}, timeout=self._client_config.operation_timeout)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # ---- connecting -------------------------------------------------------------------------

    async def _first_connect(self, deadline: float) -> tuple[grpc.aio.StreamStreamCall[RequestT, ReplyT], AcceptedT]:
        try:
            return await self._connect(deadline)
        except HeraldError as exc:
            if self._connect_failed is not None:
                self._connect_failed(exc, True)
            raise

    async def _connect(self, deadline: float, address: str | None = None,
                       ) -> tuple[grpc.aio.StreamStreamCall[RequestT, ReplyT], AcceptedT]:
        protocol = self._protocol
        if address is None:
            address = await self._lookup.broker_for(protocol.topic)
        self.address = address
        channel = await self._pool.get(address)
        call = self._open_call(broker_pb2_grpc.BrokerServiceStub(channel))
        what = protocol.handshake_what(address)
        try:
            return call, await asyncio.wait_for(self._handshake(call, what), remaining(deadline))
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            raise error_from_rpc(exc, what) from None
        except TimeoutError:
            call.cancel()
            raise HeraldTimeoutError(f"{what} timed out") from None
        except BaseException:
            call.cancel()
            raise

    async def _handshake(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT], what: str) -> AcceptedT:
        await call.write(self._protocol.handshake_request())
        reply = await call.read()
        if reply is EOF:
            raise ConnectionError_(f"the broker ended the stream while {what}")
        return self._protocol.handshake_reply(cast(ReplyT, reply))

    def _connected_with(self, accepted: AcceptedT, first: bool) -> None:
        self._protocol.on_connected(accepted, first)
        self.connected = True
        self._policy.connected()

    async def _run(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        """Own the stream: serve it, and on failure reconnect, until the owner ends it."""
        protocol, log = self._protocol, self._log
        while True:
            try:
                await self._serve(call)
                reason = "the broker ended the stream"
            except Reconnect as exc:
                reason = str(exc)
            except asyncio.CancelledError:
                # Unless this task is being cancelled: the call was, its channel closed (its peer went
                # silent, liveness.py) or its writer gave up.
                if not cancelled_under_us():
                    raise
                reason = "its connection was closed"
            except grpc.aio.AioRpcError as exc:
                reason = str(error_from_rpc(exc, protocol.stream_name))
            except HeraldError as exc:
                reason = str(exc)
            except Exception as exc:
                # A bug here must not leave the owner silently dead: start over on a new stream.
                log.exception("%s %s on %s: unexpected error on the stream", protocol.role, protocol.name,
                              protocol.topic)
                reason = repr(exc)
            finally:
                self.connected = False
                call.cancel()
            if not self._running:
                return
            log.info("%s %s on %s disconnected: %s; reconnecting", protocol.role, protocol.name, protocol.topic,
                     reason)
            protocol.on_disconnected()
            next_call = await self._reconnect()
            if next_call is None:
                return
            call = next_call

    async def _reconnect(self) -> grpc.aio.StreamStreamCall[RequestT, ReplyT] | None:
        """Look the topic up and connect to the broker lookup names, as the policy says
        (reconnect.py): at once to a broker other than the one that failed, with backoff to the
        same one, asking lookup again meanwhile."""
        protocol, policy, loop = self._protocol, self._policy, self._loop
        policy.failed(self.address, loop.time())
        while self._running:
            await asyncio.sleep(policy.lookup_delay(loop.time()))
            deadline = loop.time() + self._client_config.operation_timeout
            try:
                attempt = await closed_as_error(self._attempt_reconnect(deadline), f"reconnecting {protocol.role}")
            except HeraldError as exc:
                # Gone, silent or disowning: lookup will soon name another broker. Anything else:
                # the broker answered and refused, so lookup's answer stands for now.
                moving = isinstance(exc, ConnectionError_ | HeraldTimeoutError | NotOwnerError)
                policy.failed(self.address, loop.time(), moving=moving)
                if self._connect_failed is not None and self._connect_failed(exc, False):
                    return None
                self._log.info("%s %s on %s: reconnect failed: %s", protocol.role, protocol.name, protocol.topic,
                               exc)
                continue
            if attempt is None:
                continue
            call, accepted = attempt
            if not self._running:
                call.cancel()
                return None
            self._connected_with(accepted, first=False)
            return call
        return None

    async def _attempt_reconnect(self, deadline: float,
                                 ) -> tuple[grpc.aio.StreamStreamCall[RequestT, ReplyT], AcceptedT] | None:
        """One reconnect: ask lookup, connect and introduce the stream; None when the policy says
        not to connect to the broker named yet. A failed connect leaves its address in self.address."""
        if self._before_reconnect is not None:
            await self._before_reconnect()
        address = await self._lookup.broker_for(self._protocol.topic)
        if not self._policy.should_connect(address, self._loop.time()):
            return None
        return await self._connect(deadline, address)

    # ---- serving ----------------------------------------------------------------------------

    async def _serve(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        writer = self._loop.create_task(self._write_loop(call))
        try:
            await self._read_loop(call)
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _write_loop(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        protocol = self._protocol
        next_request, request_written = protocol.next_request, protocol.request_written
        try:
            while True:
                request = next_request()
                if request is not None:
                    await call.write(request)
                    request_written()
                elif self._running:
                    self._writer_wake = wake = self._loop.create_future()
                    await wake
                else:
                    await call.write(protocol.close_request())
                    await call.done_writing()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The reader notices a failed call by itself; anything else must not leave it waiting.
            self._log.debug("%s %s: write failed: %s", protocol.role, protocol.name, exc)
            call.cancel()

    async def _read_loop(self, call: grpc.aio.StreamStreamCall[RequestT, ReplyT]) -> None:
        on_reply = self._protocol.on_reply
        while True:
            reply = await call.read()
            if reply is EOF:
                return
            on_reply(cast(ReplyT, reply))
