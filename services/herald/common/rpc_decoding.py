"""Requests decoded at the edge: a server interceptor that takes each request as bytes and decodes
it itself, so that bytes that are no valid message end the call with INVALID_ARGUMENT naming the
message type. Left to grpc, a request that fails to decode is an "unexpected" exception of the
servicer (a traceback in the log and UNKNOWN for the client)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from herald.common.errors import InvalidArgumentError
from herald.common.rpc import EOF, abort, handler_behavior

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor

Context = grpc.aio.ServicerContext[Any, Any]
Decoder = Callable[[bytes], Any]


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

    def __init__(self, context: Context, decoder: Decoder, method: str) -> None:
        self._context = context
        self._decoder = decoder
        self._method = method

    async def read(self) -> Any:
        raw = await self._context.read()
        if raw is EOF:
            return raw
        return await _decode(self._decoder, raw, self._context, self._method)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class DecodingInterceptor(_Interceptor):
    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        decoder = None if handler is None else handler.request_deserializer
        if handler is None or decoder is None:
            return handler  # generic handlers on bytes decode for themselves
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        inner, make = handler_behavior(handler)

        if handler.request_streaming:
            def arguments(request: Any, context: Context) -> tuple[Any, Any]:
                decoding = _DecodingContext(context, decoder, method)

                async def requests() -> AsyncIterator[Any]:
                    async for raw in request:
                        yield await _decode(decoder, raw, context, method)

                return requests(), decoding
        else:
            def arguments(request: Any, context: Context) -> tuple[Any, Any]:
                return request, context

        if inspect.isasyncgenfunction(inner):
            async def generating(request: Any, context: Context) -> AsyncIterator[Any]:
                if not handler.request_streaming:
                    request = await _decode(decoder, request, context, method)
                async for reply in inner(*arguments(request, context)):
                    yield reply

            wrapped: Any = generating
        else:
            async def calling(request: Any, context: Context) -> Any:
                if not handler.request_streaming:
                    request = await _decode(decoder, request, context, method)
                return await inner(*arguments(request, context))

            wrapped = calling
        return make(wrapped, request_deserializer=None,
                    response_serializer=handler.response_serializer)
