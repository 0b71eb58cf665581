"""Server spans for gRPC calls that carry a trace context: an interceptor giving every unary call
(lookups, admin calls, storage fences...) whose metadata holds a `traceparent` a SERVER span, its
child, named `<package.Service>/<Method>` with the rpc.* attributes of OpenTelemetry's RPC
conventions. Streams are left alone: their spans are per entry (herald.common.tracing). Calls
without a trace context get no span, so heartbeats and probes do not make traces of their own."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from opentelemetry import trace

from herald.common import tracing
from herald.common.transport.decoding import CONTROL_REQUEST_MAX_BYTES, DecodingInterceptor

_COMPONENT = "herald.rpc"

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor



def server_interceptors(bulk_methods: Collection[str] = (),
                        max_request_bytes: int = CONTROL_REQUEST_MAX_BYTES) -> list[_Interceptor]:
    """The interceptors a server is made with, last in its list: the tracing one while tracing is
    on (decided when the server is made), and the one decoding requests at the edge (malformed
    bytes get INVALID_ARGUMENT; requests of methods other than `bulk_methods` larger than
    `max_request_bytes` are refused: herald.common.transport.decoding)."""
    return [*([TracingInterceptor()] if tracing.ENABLED else []), DecodingInterceptor(bulk_methods, max_request_bytes)]


class TracingInterceptor(_Interceptor):
    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.response_streaming or handler.unary_unary is None:
            return handler
        parent = tracing.metadata_context(handler_call_details.invocation_metadata)  # type: ignore[attr-defined]
        if parent is None:
            return handler
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        behavior: Any = handler.unary_unary  # a coroutine function on an aio server

        async def traced(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            with start_server_span(method, parent) as span:
                try:
                    return await behavior(request, context)
                except BaseException as exc:
                    code = context.code() if hasattr(context, "code") else None
                    if isinstance(code, grpc.StatusCode):
                        span.set_attribute("rpc.grpc.status_code", code.value[0])
                    tracing.fail(span, exc)
                    raise

        return grpc.unary_unary_rpc_method_handler(
            traced,  # type: ignore[arg-type]  # the stubs know only the sync handler signature
            request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)


def start_server_span(method: str, parent: tracing.SpanContext | None) -> Any:
    """A current SERVER span for `/package.Service/Method`, child of `parent` (a context manager;
    exceptions are recorded by the caller)."""
    service, _, name = method.lstrip("/").rpartition("/")
    return tracing.tracer(_COMPONENT).start_as_current_span(
        method.lstrip("/"), context=tracing.parent(parent), kind=trace.SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
        record_exception=False, set_status_on_exception=False,
    )


@contextlib.contextmanager
def handshake_span(context: grpc.aio.ServicerContext[Any, Any], method: str) -> Iterator[None]:
    """A SERVER span around a stream's handshake (registering a producer, subscribing: the topic
    may be loaded meanwhile), child of the context the client opened the stream in; nothing when
    tracing is off or the client sent none. The stream's entries have spans of their own."""
    parent = tracing.metadata_context(context.invocation_metadata()) if tracing.ENABLED else None
    if parent is None:
        yield
        return
    with start_server_span(method, parent) as span:
        try:
            yield
        except BaseException as exc:
            tracing.fail(span, exc)
            raise
