"""Admission of a call before anything of its request is read: authentication
(herald.common.security.authentication) and the connection limits (herald.common.transport.connections) decide from
the call's metadata, TLS client certificate and peer alone.

grpc.aio reads a unary request in full before it runs the method's handler, so a method with a
unary request is served through a request-streaming handler that admits the call, then reads its
one request (with the handler's deserializer) and runs the unary behaviour on it: a refused call's
body is never read, HTTP/2 flow control holds it back in the client. A request-streaming handler
reads nothing before its behaviour does, so it is only wrapped. Interceptors after the admitting
one see the handlers as the servicer made them."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from herald.common.errors import InvalidArgumentError
from herald.common.transport.rpc import EOF, abort, handler_behavior

# Probes carry no credentials: neither authenticated nor counted as connections.
OPEN_METHODS = ("/grpc.health.v1.Health/",)

Context = grpc.aio.ServicerContext[Any, Any]
# Admits a call (aborting it to refuse) for as long as the context is entered.
Admit = Callable[[Context], contextlib.AbstractAsyncContextManager[None]]


def admitting(handler: grpc.RpcMethodHandler[Any, Any], admit: Admit, method: str) -> grpc.RpcMethodHandler[Any, Any]:
    """`handler` run inside `admit`, entered before the request is read."""
    behavior, make = handler_behavior(handler)
    if behavior is None:
        return handler
    wrapped: Any
    if handler.request_streaming:
        if inspect.isasyncgenfunction(behavior):
            async def relayed(requests: Any, context: Context) -> AsyncIterator[Any]:
                async with admit(context):
                    async for reply in behavior(requests, context):
                        yield reply
            wrapped = relayed
        else:
            async def passed(requests: Any, context: Context) -> Any:
                async with admit(context):
                    return await behavior(requests, context)
            wrapped = passed
        return make(wrapped, request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)

    async def request(context: Context) -> Any:
        received = await context.read()
        if received is EOF:
            await abort(context, InvalidArgumentError(f"{method}: the call ended without its request message"))
        return received

    if not handler.response_streaming:
        async def called(requests: Any, context: Context) -> Any:
            async with admit(context):
                return await behavior(await request(context), context)
        wrapped, make = called, grpc.stream_unary_rpc_method_handler
    elif inspect.isasyncgenfunction(behavior):
        async def streamed(requests: Any, context: Context) -> AsyncIterator[Any]:
            async with admit(context):
                async for reply in behavior(await request(context), context):
                    yield reply
        wrapped, make = streamed, grpc.stream_stream_rpc_method_handler
    else:  # a coroutine that writes its replies with context.write()
        async def writing(requests: Any, context: Context) -> Any:
            async with admit(context):
                return await behavior(await request(context), context)
        wrapped, make = writing, grpc.stream_stream_rpc_method_handler
    return make(wrapped, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
