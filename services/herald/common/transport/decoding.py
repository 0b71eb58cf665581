"""Requests decoded at the edge: a server interceptor that takes each request as bytes and decodes
it itself, so that bytes that are no valid message end the call with INVALID_ARGUMENT naming the
message type. Left to grpc, a request that fails to decode is an "unexpected" exception of the
servicer (a traceback in the log and UNKNOWN for the client).

It also holds the per-method size limit: gRPC has one receive limit per server, as large as the
server's data needs (a producer's send, a storage node's batch of adds); every request of the
other methods (lookups, admin calls, acks...) larger than `max_request_bytes` is refused with
MessageTooLargeError before it is parsed."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from herald.common.errors import InvalidArgumentError, MessageTooLargeError
from herald.common.transport.rpc import EOF, MIB, abort, handler_behavior

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor

Context = grpc.aio.ServicerContext[Any, Any]
Decoder = Callable[[bytes], Any]
# What a request of a method that carries no message data may take, by default.
CONTROL_REQUEST_MAX_BYTES = 1 * MIB


def _as_is(raw: bytes) -> bytes:
    """The "decoder" of handlers on bytes (the proxy's): the size check only."""
    return raw


class _Limit:
    __slots__ = ("max_bytes", "method")

    def __init__(self, method: str, max_bytes: int | None) -> None:
        self.method = method
        self.max_bytes = max_bytes  # None: only the server's gRPC limit

    async def decode(self, decoder: Decoder, raw: bytes, context: Context) -> Any:
        if self.max_bytes is not None and len(raw) > self.max_bytes:
            await abort(context, MessageTooLargeError(
                f"{self.method}: the request takes {len(raw)} bytes, more than the {self.max_bytes} this method "
                "accepts: send a smaller request"))
        return await _decode(decoder, raw, context, self.method)


async def _decode(decoder: Decoder, raw: bytes, context: Context, method: str) -> Any:
    try:
        return decoder(raw)
    except (DecodeError, ValueError, TypeError) as exc:
        descriptor: Any = getattr(getattr(decoder, "__self__", None), "DESCRIPTOR", None)
        what = descriptor.full_name if descriptor is not None else "request"
        await abort(context, InvalidArgumentError(
            f"{method}: the request is not a valid {what} message ({exc}): check the client's protocol version"))


class _DecodingContext:
    """The call's context with read() decoding (everything else is the context's own)."""

    __slots__ = ("_context", "_decoder", "_limit")  # one per stream

    def __init__(self, context: Context, decoder: Decoder, limit: _Limit) -> None:
        self._context = context
        self._decoder = decoder
        self._limit = limit

    async def read(self) -> Any:
        raw = await self._context.read()
        if raw is EOF:
            return raw
        return await self._limit.decode(self._decoder, raw, self._context)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class DecodingInterceptor(_Interceptor):
    """`bulk_methods` ("/package.Service/Method") carry message data: their requests are limited by
    the server's gRPC receive limit only; every other method's by `max_request_bytes`."""

    def __init__(self, bulk_methods: Collection[str] = (), max_request_bytes: int = CONTROL_REQUEST_MAX_BYTES) -> None:
        self._bulk = frozenset(bulk_methods)
        self._max_request_bytes = max_request_bytes

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        bulk = method in self._bulk
        decoder = handler.request_deserializer
        if decoder is None:
            if bulk:
                return handler  # generic handlers on bytes decode for themselves
            decoder = _as_is
        limit = _Limit(method, None if bulk else self._max_request_bytes)
        inner, make = handler_behavior(handler)

        if handler.request_streaming:
            def arguments(request: Any, context: Context) -> tuple[Any, Any]:
                decoding = _DecodingContext(context, decoder, limit)

                async def requests() -> AsyncIterator[Any]:
                    async for raw in request:
                        yield await limit.decode(decoder, raw, context)

                return requests(), decoding
        else:
            def arguments(request: Any, context: Context) -> tuple[Any, Any]:
                return request, context

        if inspect.isasyncgenfunction(inner):
            async def generating(request: Any, context: Context) -> AsyncIterator[Any]:
                if not handler.request_streaming:
                    request = await limit.decode(decoder, request, context)
                async for reply in inner(*arguments(request, context)):
                    yield reply

            wrapped: Any = generating
        else:
            async def calling(request: Any, context: Context) -> Any:
                if not handler.request_streaming:
                    request = await limit.decode(decoder, request, context)
                return await inner(*arguments(request, context))

            wrapped = calling
        return make(wrapped, request_deserializer=None,
                    response_serializer=handler.response_serializer)
