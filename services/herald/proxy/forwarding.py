"""Relaying Produce and Consume streams: the first request (RegisterProducer / Subscribe) names the
topic; the proxy looks its owner up, opens the same stream there (looking up again while the
broker says NOT_OWNER or cannot be reached, within the operation timeout) and then moves the
messages both ways as the bytes they arrived as. Nothing is buffered here: when the broker fails,
ends the stream or gives the topic up, the client's stream is ended with a retryable error and
the client reconnects (to the proxy) and resends what it had in flight.

Only three things are ever parsed: the first request, the broker's answer to it, and error
replies (told apart from receipts and deliveries by their first byte, the oneof's field tag)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, cast

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from herald.api.v1 import broker_pb2, common_pb2
from herald.common import errors
from herald.common.backoff import Backoff
from herald.common.tasks import cancel_and_wait, wait_event
from herald.common.transport.rpc import EOF, abort, error_from_proto, error_from_rpc, error_to_proto
from herald.proxy.broker_pool import BrokerPool
from herald.proxy.drain import DRAINING_MESSAGE, Drain
from herald.proxy.lookups import Lookups
from herald.proxy.metrics import TO_BROKER, TO_CLIENT, ProxyMetrics
from herald.proxy.settings import ProxySettings

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]

# How long a client told to reconnect (an `error` reply) gets to hang up before its stream is ended.
_HANG_UP_SECONDS = 2.0
# Errors from a broker that mean "this topic is not (or no longer) served here: look it up again".
LOOK_AGAIN = frozenset({common_pb2.NOT_OWNER, common_pb2.SERVICE_NOT_READY})


def _tag(field_number: int) -> bytes:
    """The first byte of a serialized message whose only field is this length-delimited one."""
    return bytes([field_number << 3 | 2])


@dataclass(frozen=True)
class StreamKind:
    """What differs between the two streams: names, the first request, and replies."""

    name: str  # "produce" / "consume", in metrics and messages
    method: str  # the gRPC method path, on the broker as here
    first_field: str  # the oneof field the first request must set
    first_message: str  # the contract's name for it, in errors
    request_type: Any
    reply_type: Any
    error_tag: bytes  # first byte of an `error` reply

    def topic_of(self, raw: bytes) -> str:
        """The topic the first request names; InvalidArgumentError for anything but the expected
        first request."""
        try:
            request = self.request_type.FromString(raw)
        except DecodeError as exc:
            raise errors.InvalidArgumentError(
                f"malformed {self.request_type.DESCRIPTOR.name}: {exc}") from None
        if request.WhichOneof("command") != self.first_field:
            raise errors.InvalidArgumentError(
                f"a {self.name.capitalize()} stream must start with {self.first_message}")
        return str(getattr(request, self.first_field).topic)

    def refusal(self, raw: bytes) -> errors.HeraldError | None:
        """The error an `error` reply carries (None for any other reply)."""
        if raw[:1] != self.error_tag:
            return None
        try:
            reply = self.reply_type.FromString(raw)
        except DecodeError:
            return None
        return error_from_proto(reply.error) if reply.WhichOneof("reply") == "error" else None

    def error_reply(self, error: errors.HeraldError) -> bytes:
        return bytes(self.reply_type(error=error_to_proto(error)).SerializeToString())


PRODUCE = StreamKind("produce", "/herald.v1.BrokerService/Produce", "register", "RegisterProducer",
                     broker_pb2.ProduceRequest, broker_pb2.ProduceResponse, _tag(4))
CONSUME = StreamKind("consume", "/herald.v1.BrokerService/Consume", "subscribe", "Subscribe",
                     broker_pb2.ConsumeRequest, broker_pb2.ConsumeResponse, _tag(3))


class _Upstream:
    """The broker's side of one relayed stream."""

    def __init__(self, call: grpc.aio.StreamStreamCall[bytes, bytes], address: str) -> None:
        self.call = call
        self.address = address
        self.cancelled = False  # by the proxy: its end says nothing about the broker

    def cancel(self) -> None:
        self.cancelled = True
        self.call.cancel()


class StreamRelay:
    """One client stream relayed to the topic's owner: `run` is the whole life of the client's call."""

    def __init__(self, kind: StreamKind, context: Context, settings: ProxySettings, lookups: Lookups,
                 pool: BrokerPool, metrics: ProxyMetrics, drain: Drain) -> None:
        self.kind = kind
        self.context = context
        self.settings = settings
        self.lookups = lookups
        self.pool = pool
        self.metrics = metrics
        self._drain = drain
        self._loop = asyncio.get_running_loop()
        self._draining = asyncio.Event()
        self._reading = False  # the client-to-broker task waits on the client (so is not writing)
        self._half_closed = False
        self._told = False  # the client got the broker's own "look again" error
        self._to_broker_bytes = metrics.forwarded_bytes.labels(TO_BROKER)
        self._to_client_bytes = metrics.forwarded_bytes.labels(TO_CLIENT)
        self.topic = ""

    def drain(self) -> None:
        self._draining.set()

    async def run(self) -> None:
        self._drain.add(self)
        try:
            first = await self._first_request()
            if first is EOF:
                return
            self._to_broker_bytes.inc(len(first))
            try:
                self.topic = self.kind.topic_of(first)
            except errors.HeraldError as error:
                await self._reply_error(error)
                return
            upstream = await self._open(first)
            if upstream is None:
                return
            try:
                await self._relay(upstream)
            finally:
                upstream.cancel()
        finally:
            self._drain.remove(self)

    async def _first_request(self) -> Any:
        """The client's first request (or EOF); a drain that begins before it comes ends the stream."""
        read = asyncio.ensure_future(self.context.read())
        draining = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait({read, draining}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            draining.cancel()
            unread = not read.done()
            if unread:
                read.cancel()
        if unread:
            await abort(self.context, errors.ServiceNotReadyError(DRAINING_MESSAGE))
        return read.result()

    async def _reply_error(self, error: errors.HeraldError) -> None:
        """Refuse the stream as the broker would: an `error` reply, then the end of the stream."""
        await self.context.write(self.kind.error_reply(error))

    # ---- opening the stream on the owner ----

    async def _open(self, first: bytes) -> _Upstream | None:
        """Open the stream on the topic's owner and relay its answer to the first request; None
        when the client was answered with a refusal instead."""
        timeout = self.settings.operation_timeout
        deadline = self._loop.time() + timeout
        backoff = Backoff(initial=0.1, maximum=5.0, jitter=0.2)
        fresh = False
        what = f"{'registering a producer on' if self.kind is PRODUCE else 'subscribing to'} {self.topic}"
        while True:
            if self._draining.is_set():
                await abort(self.context, errors.ServiceNotReadyError(DRAINING_MESSAGE))
            try:
                address, _ = await self.lookups.owner(self.topic, self._remaining(deadline), fresh)
                upstream, reply = await self._attempt(address, first, deadline)
            except errors.HeraldError as error:
                if not error.retryable:
                    await self._reply_error(error)
                    return None
                last = error
            else:
                refusal = self.kind.refusal(reply)
                if refusal is None or refusal.code not in LOOK_AGAIN:
                    await self.context.write(reply)  # accepted, or refused for good reasons of the broker's
                    self._to_client_bytes.inc(len(reply))
                    if refusal is None:
                        return upstream
                    upstream.call.cancel()
                    return None
                upstream.call.cancel()
                self.lookups.forget(self.topic, address)
                last = refusal
            delay = backoff.next()
            if self._loop.time() + delay >= deadline:
                await self._reply_error(errors.HeraldTimeoutError(
                    f"proxy: {what} did not complete within the operation timeout of {timeout:g}s; last error: {last}"))
                return None
            log.debug("%s failed (%s); looking up again in %.2fs", what, last, delay)
            self.metrics.upstream_reconnects.labels(self.kind.name).inc()
            fresh = True
            await wait_event(self._draining, delay)

    async def _attempt(self, address: str, first: bytes, deadline: float) -> tuple[_Upstream, bytes]:
        """Open the stream at `address` and write the first request; the broker's answer."""
        call: grpc.aio.StreamStreamCall[bytes, bytes] = (
            self.pool.get(address).stream_stream(self.kind.method, None, None)(None))
        try:
            with contextlib.suppress(asyncio.InvalidStateError):  # the call ended already: read says how
                await call.write(first)
            reply = await asyncio.wait_for(call.read(), self._remaining(deadline))
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            raise self._broker_failed(address, exc, "while opening the stream") from None
        except TimeoutError:
            call.cancel()
            raise errors.HeraldTimeoutError(f"broker {address} did not answer {self.kind.first_message} in time") \
                from None
        except BaseException:
            call.cancel()
            raise
        if reply is EOF:
            call.cancel()
            raise errors.ServiceNotReadyError(f"broker {address} ended the stream without answering "
                                              f"{self.kind.first_message}")
        return _Upstream(call, address), cast(bytes, reply)

    def _broker_failed(self, address: str, exc: grpc.aio.AioRpcError, when: str) -> errors.HeraldError:
        """A call to the broker at `address` failed: unreachable (forget it and what it owned) or
        refused (its own error)."""
        error = error_from_rpc(exc, f"broker {address} {when}")
        if isinstance(error, errors.ConnectionError_):
            self.pool.discard(address)
            self.lookups.forget_broker(address)
            return errors.ServiceNotReadyError(
                f"broker {address} failed {when}: {exc.code().name}: {exc.details()}")
        return error

    def _remaining(self, deadline: float) -> float:
        return max(0.001, deadline - self._loop.time())

    # ---- relaying ----

    async def _relay(self, upstream: _Upstream) -> None:
        to_broker = self._loop.create_task(self._to_broker(upstream))
        to_client = self._loop.create_task(self._to_client(upstream))
        draining = self._loop.create_task(self._draining.wait())
        try:
            await asyncio.wait({to_client, draining}, return_when=asyncio.FIRST_COMPLETED)
            if to_client.done():
                reason = to_client.result()
                if reason is None:
                    return  # the broker ended the stream cleanly: so does the client's
                self.metrics.upstream_failures.labels(self.kind.name).inc()
                log.info("%s stream of %s from %s ended: %s", self.kind.name, self.topic, self.context.peer(), reason)
            else:
                reason = await self._wind_down(upstream, to_client)
            await self._end(reason, to_broker)
        finally:
            await cancel_and_wait(draining)
            await cancel_and_wait(to_broker, swallow_errors=True)
            await cancel_and_wait(to_client, swallow_errors=True)

    async def _end(self, reason: str, to_broker: asyncio.Task[None]) -> None:
        """End the client's stream for it to reconnect: an `error` reply (SERVICE_NOT_READY) it
        reads in order after everything relayed (unless the broker's own just said as much); the
        client hangs up on it, or, after a moment, the stream ends with UNAVAILABLE.

        The reply, and the moment, are what make the client see why: grpc-python fails a client
        call whose write fails once the server ended it (INTERNAL), dropping the replies it had
        not read yet, and a producer or consumer writes at any time."""
        error = errors.ServiceNotReadyError(reason)
        if not self._told:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.operation_timeout):  # a client that reads nothing
                    await self.context.write(self.kind.error_reply(error))
        # The client-to-broker task ends when the client half-closes; when the client cancels,
        # this handler is cancelled.
        await asyncio.wait({to_broker}, timeout=_HANG_UP_SECONDS)
        await abort(self.context, error)

    async def _to_broker(self, upstream: _Upstream) -> None:
        """Relay the client's requests until the client half-closes. Draining, the broker's side
        is half-closed after the last request forwarded; from then on (and once the broker's side
        failed) what the client sends is read and dropped: it gets no receipt, so the client
        sends it again after reconnecting. The client's read is never cancelled: a server read
        cancelled while the client writes fails the client's call, and replies not yet read with it."""
        context, call, counter, draining = self.context, upstream.call, self._to_broker_bytes, self._draining
        forwarding = True
        try:
            while True:
                if draining.is_set():
                    await self._half_close(call)
                self._reading = True
                request = await context.read()
                self._reading = False
                if request is EOF:
                    await self._half_close(call)
                    return
                if forwarding and not draining.is_set():
                    try:
                        await call.write(request)
                    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                        forwarding = False  # the broker's side failed or ended: the other direction says why
                        continue
                    counter.inc(len(request))
        finally:
            self._reading = False

    async def _half_close(self, call: grpc.aio.StreamStreamCall[bytes, bytes]) -> None:
        if not self._half_closed:
            self._half_closed = True
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await call.done_writing()

    async def _to_client(self, upstream: _Upstream) -> str | None:
        """Relay the broker's replies until its stream ends: None when it ended cleanly, else why
        the client's stream must end with a retryable error."""
        context, call, counter, kind = self.context, upstream.call, self._to_client_bytes, self.kind
        error_tag = kind.error_tag
        while True:
            try:
                reply = cast(bytes, await call.read())
            except grpc.aio.AioRpcError as exc:
                if upstream.cancelled:
                    return None
                error = self._broker_failed(upstream.address, exc, f"serving {self.topic}")
                return f"{error}: reconnect"
            if reply is EOF:
                code = await call.code()
                if code == grpc.StatusCode.OK:
                    return None
                return f"broker {upstream.address} ended the stream of {self.topic} with {code.name}: reconnect"
            try:
                await context.write(reply)
            except Exception as exc:  # the client is gone: its call is being torn down
                log.debug("%s stream of %s: writing to the client failed: %r", kind.name, self.topic, exc)
                return None
            counter.inc(len(reply))
            if reply[:1] == error_tag:
                refusal = kind.refusal(reply)
                if refusal is not None and refusal.code in LOOK_AGAIN:
                    self.lookups.forget(self.topic, upstream.address)
                    self._told = True
                    return f"broker {upstream.address} gave {self.topic} up ({refusal}): reconnect"

    async def _wind_down(self, upstream: _Upstream, to_client: asyncio.Task[str | None]) -> str:
        """Draining. A producer takes no new sends; its stream ends once the broker returned the
        receipts of what was forwarded and ended its side (or the drain timeout passed). A
        consumer's ends at once: the broker redelivers what it had not acknowledged."""
        deadline = self._loop.time() + self.settings.drain_timeout
        if self.kind is PRODUCE:
            if self._reading:  # waiting on the client, so not writing: half-close here
                await self._half_close(upstream.call)
            # (Otherwise the client-to-broker task half-closes after the write it is making.)
            await asyncio.wait({to_client}, timeout=self._remaining(deadline))
        # The broker-to-client task ends once the call is cancelled, after the reply it is
        # writing, if any (the client's stream takes one write at a time); a client that reads
        # nothing holds that write up at most until the drain timeout.
        upstream.cancel()
        await asyncio.wait({to_client}, timeout=self._remaining(deadline))
        await cancel_and_wait(to_client, swallow_errors=True)
        return DRAINING_MESSAGE
