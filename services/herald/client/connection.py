"""The client's connection pool: gRPC channels keyed by broker address, handed out only once they
are connected, dropped when they fail; and the retry-within-a-deadline loop the client's requests
share. gRPC statuses become Herald errors in herald.common.transport.rpc, shared with the services."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import grpc.aio

from herald.client.config import ClientConfig
from herald.client.liveness import ChannelWatchdog
from herald.client.tls import CertificateFetchRefused, read_trust_certs, secure_channel_settings
from herald.client.unreachable import definite_failure
from herald.common.backoff import Backoff
from herald.common.errors import AlreadyClosedError, ConnectionError_, HeraldError, HeraldTimeoutError
from herald.common.security.credentials import auth_interceptors
from herald.common.transport.rpc import MAX_GRPC_MESSAGE_BYTES

log = logging.getLogger(__name__)
T = TypeVar("T")



_TLS_HINT = "is the service running, the address right, and its certificate trusted?"
_BAD_STATES = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)


def channel_options(config: ClientConfig) -> list[tuple[str, str | int]]:
    return [
        ("grpc.keepalive_time_ms", int(config.keep_alive * 1000)),
        ("grpc.keepalive_timeout_ms", int(min(config.keep_alive, 20.0) * 1000)),
        # Pings only while a stream is open: producers and consumers always hold one, and an idle
        # pool must not provoke the server's too-many-pings GOAWAY.
        ("grpc.keepalive_permit_without_calls", 0),
        # A 5 MiB message plus its entry header and framing fits with room to spare, and so does a
        # consumer's EntryBatch of several entries.
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
        # Each pooled connection is its own TCP connection, not a shared subchannel.
        ("grpc.use_local_subchannel_pool", 1),
    ]


def cancelled_under_us() -> bool:
    """Whether the CancelledError being handled came from gRPC rather than from cancelling this
    task: a call whose channel was closed under it (the pool closes a silent one, liveness.py)
    raises CancelledError in whoever awaits it. That is a lost connection, never the end of the
    task: a reconnecting stream that took it for its own cancellation stopped for good."""
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


async def closed_as_error(awaitable: Awaitable[T], what: str) -> T:
    """`awaitable`'s result; a call closed under it becomes a retryable ConnectionError_."""
    try:
        return await awaitable
    except asyncio.CancelledError:
        if not cancelled_under_us():
            raise
        raise ConnectionError_(f"{what}: its connection was closed during the call") from None


async def retrying(what: str, time_limit: float, attempt: Callable[[float], Awaitable[T]]) -> T:
    """Run `attempt(deadline)` until it succeeds, retrying retryable Herald errors with backoff;
    past `time_limit` seconds the last error is reported as a timeout naming `what`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + time_limit
    backoff = Backoff()
    while True:
        try:
            return await closed_as_error(attempt(deadline), what)
        except HeraldError as exc:
            if not exc.retryable:
                raise
            delay = backoff.next()
            if loop.time() + delay >= deadline:
                raise HeraldTimeoutError(
                    f"{what} did not complete within the operation timeout of {time_limit:g}s; last error: {exc}"
                ) from exc
            log.debug("%s failed (%s); retrying in %.2fs", what, exc, delay)
            await asyncio.sleep(delay)


def remaining(deadline: float) -> float:
    """Seconds left until a loop-time deadline (a little more than none, so calls still fail
    cleanly by timing out)."""
    return max(0.001, deadline - asyncio.get_running_loop().time())


class _ConnectFailed(Exception):
    """The channel's first connection attempt failed (refused, reset, handshake failed)."""


async def _ready_or_failed(channel: grpc.aio.Channel) -> None:
    """Wait until the channel is connected; raise _ConnectFailed at its first failed attempt.

    gRPC's channel_ready() waits through failures (gRPC retries by itself), so a broker that died
    used to cost a reconnecting stream the whole connection timeout (10 s) before it asked lookup
    again. A refused connection is an answer: report it at once; the caller's backoff decides when
    to try again.
    """
    state = channel.get_state(try_to_connect=True)
    while state is not grpc.ChannelConnectivity.READY:
        if state in _BAD_STATES:
            raise _ConnectFailed()
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)


def _first_connect_failed(address: str, reason: str, hint: str) -> ConnectionError_:
    """The error of a first connection to the service URL that got a definite answer (refused, or
    a host name that does not resolve): not retryable, so creating a producer, consumer or reader
    fails now rather than after the operation timeout."""
    error = ConnectionError_(f"could not connect to {address}: the connection failed at once ({reason}): {hint}")
    error.retryable = False
    return error


async def _nothing_there(address: str, service_url: str, timeout: float) -> str | None:  # noqa: ASYNC109
    """Why nothing can answer at `address` (unreachable.py), probed with a plain TCP connection,
    or None when that is not certain: gRPC reports a refusal, an unknown host and a failed TLS
    handshake alike."""
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        return definite_failure(exc, host, service_url)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


class ConnectionPool:
    """Connected gRPC channels by broker address, `connections_per_broker` of each, used in turn.

    A channel is handed out only after it is connected (the handshake), bounded by the connection
    timeout; concurrent requests for the same address share one handshake.
    """

    def __init__(self, config: ClientConfig) -> None:
        self._config = config
        self._options = channel_options(config)
        # The token goes on every call and stream (none: no interceptor, nothing added per call).
        self._interceptors = auth_interceptors(config.auth) or None
        # Read once, at construction: a bad path fails the AsyncClient(...) call that gave it.
        path = config.tls_trust_certs_file_path
        self._trusted = read_trust_certs(path) if config.url.tls and path else None
        self._channels: dict[tuple[str, int], grpc.aio.Channel] = {}
        self._watchdogs: dict[tuple[str, int], ChannelWatchdog] = {}
        self._connecting: dict[tuple[str, int], asyncio.Future[grpc.aio.Channel]] = {}
        self._turn = itertools.count()
        # Whether the service URL's address ever answered: until it has, a refused connection there
        # means nothing listens (a wrong URL, a service not started) and waiting the operation
        # timeout would only hide that; once it has, a refusal is a restart or a failover, retried.
        # (Refused only: a failed TLS handshake is still retried until the operation timeout.)
        self._service_reached = False
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def get(self, address: str) -> grpc.aio.Channel:
        """A connected channel to `address` (`host:port`); ConnectionError_ if none within the
        connection timeout."""
        if self._closed:
            raise AlreadyClosedError("client already closed")
        key = (address, next(self._turn) % self._config.connections_per_broker)
        channel = self._channels.get(key)
        if channel is not None:
            if channel.get_state() not in _BAD_STATES:
                return channel
            self._drop(key, channel)
        pending = self._connecting.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._connecting[key] = pending
            try:
                channel = await self._connect(address)
            except BaseException as exc:
                if not pending.done():
                    pending.set_exception(exc if isinstance(exc, HeraldError) else
                                          ConnectionError_(f"connecting to {address} failed"))
                    pending.exception()  # retrieved here so an unshared failure is not logged as lost
                raise
            finally:
                self._connecting.pop(key, None)
            if self._closed:
                await channel.close(None)
                raise AlreadyClosedError("client already closed")
            self._channels[key] = channel
            self._watch(key, channel)
            pending.set_result(channel)
            return channel
        return await asyncio.shield(pending)

    async def _connect(self, address: str) -> grpc.aio.Channel:
        if self._config.url.tls:
            try:
                credentials, extra = await secure_channel_settings(self._config, address, self._trusted)
            except CertificateFetchRefused as exc:
                if address == self._config.url.address and not self._service_reached:
                    raise _first_connect_failed(address, exc.reason, f"{exc}; {_TLS_HINT}") from None
                raise
            channel = grpc.aio.secure_channel(address, credentials, options=[*self._options, *extra],
                                              interceptors=self._interceptors)
        else:
            channel = grpc.aio.insecure_channel(address, options=self._options, interceptors=self._interceptors)
        timeout = self._config.connection_timeout
        hint = (_TLS_HINT if self._config.url.tls else
                "is the service running and the address right (a TLS service wants a herald+ssl:// URL)?")
        try:
            await asyncio.wait_for(_ready_or_failed(channel), timeout)
        except BaseException as exc:
            await channel.close(None)
            if isinstance(exc, TimeoutError):
                raise ConnectionError_(
                    f"could not connect to {address} within the connection timeout of {timeout:g}s: {hint}"
                ) from None
            if isinstance(exc, _ConnectFailed):
                if address == self._config.url.address and not self._service_reached:
                    reason = await _nothing_there(address, self._config.service_url, timeout)
                    if reason is not None:
                        raise _first_connect_failed(address, reason, hint) from None
                raise ConnectionError_(f"could not connect to {address}: the connection failed: {hint}") from None
            raise
        if address == self._config.url.address:
            self._service_reached = True
        log.debug("connected to %s", address)
        return channel

    def discard(self, address: str, channel: grpc.aio.Channel | None = None) -> None:
        """Forget a channel that failed (by default every channel to `address`), so the next `get`
        connects afresh."""
        for key, known in list(self._channels.items()):
            if key[0] == address and (channel is None or known is channel):
                self._drop(key, known)

    def _watch(self, key: tuple[str, int], channel: grpc.aio.Channel) -> None:
        """Close the channel if its peer goes silent (liveness.py), so its streams reconnect."""
        def silent() -> None:
            self._watchdogs.pop(key, None)
            if self._channels.get(key) is channel:
                self._drop(key, channel)

        watchdog = ChannelWatchdog(channel, key[0], self._config.keep_alive, silent)
        self._watchdogs[key] = watchdog
        watchdog.start()

    def _drop(self, key: tuple[str, int], channel: grpc.aio.Channel) -> None:
        del self._channels[key]
        watchdog = self._watchdogs.pop(key, None)
        if watchdog is not None:
            watchdog.cancel()
        # Closing waits for nothing here: a failed channel has no call worth a grace period.
        task = asyncio.get_running_loop().create_task(channel.close(None))
        self._closing.add(task)
        task.add_done_callback(self._closed_channel)

    def _closed_channel(self, task: asyncio.Task[None]) -> None:
        self._closing.discard(task)
        if not task.cancelled():
            task.exception()

    async def close(self, grace: float | None = None) -> None:
        """Close every channel; `grace` lets calls in flight finish first (None: cancel them)."""
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        watchdogs = list(self._watchdogs.values())
        self._watchdogs.clear()
        await asyncio.gather(*(watchdog.stop() for watchdog in watchdogs))
        for pending in self._connecting.values():
            if not pending.done():
                pending.cancel()
        await asyncio.gather(*(channel.close(grace) for channel in channels), *self._closing,
                             return_exceptions=True)
