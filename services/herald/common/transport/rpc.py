"""gRPC plumbing shared by services and the client: channel and server options, and the one
mapping between HeraldError and gRPC status.

Convention: a service that fails an RPC aborts with a gRPC status whose details are
"<ErrorCode number>:<message>"; `error_from_rpc` turns that back into the same HeraldError class.
Errors inside streams travel as `Error` messages instead (see the protos).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NoReturn

import grpc
import grpc.aio

from herald.api.v1 import common_pb2
from herald.common import errors
from herald.common.limits import DEFAULT_MAX_STREAMS_PER_CONNECTION

# What a stream's read() returns once the peer has finished writing.
EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]
MIB = 1024 * 1024
# What clients and services accept in what they receive from a server (replies: a consumer's
# EntryBatch of several entries, a storage read chunk): servers are trusted more than clients.
MAX_GRPC_MESSAGE_BYTES = 64 * MIB
# The most of an error's text a failed call's status carries (status_details), in UTF-8 bytes.
MAX_ERROR_DETAILS_BYTES = 2048

_STATUS_BY_CODE: dict[int, grpc.StatusCode] = {
    common_pb2.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    common_pb2.CHECKSUM_ERROR: grpc.StatusCode.DATA_LOSS,
    common_pb2.NOT_OWNER: grpc.StatusCode.FAILED_PRECONDITION,
    common_pb2.TOPIC_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    common_pb2.LEDGER_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    common_pb2.ENTRY_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    common_pb2.FENCED: grpc.StatusCode.FAILED_PRECONDITION,
    common_pb2.SERVICE_NOT_READY: grpc.StatusCode.UNAVAILABLE,
    common_pb2.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    common_pb2.TOO_MANY_REQUESTS: grpc.StatusCode.RESOURCE_EXHAUSTED,
    common_pb2.MESSAGE_TOO_LARGE: grpc.StatusCode.INVALID_ARGUMENT,
    common_pb2.BAD_VERSION: grpc.StatusCode.ABORTED,
    common_pb2.NOT_ALLOWED: grpc.StatusCode.FAILED_PRECONDITION,
    common_pb2.BACKLOG_QUOTA_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    common_pb2.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    common_pb2.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    common_pb2.PRECONDITION_FAILED: grpc.StatusCode.FAILED_PRECONDITION,
    common_pb2.AUTHENTICATION_ERROR: grpc.StatusCode.UNAUTHENTICATED,
    common_pb2.AUTHORIZATION_ERROR: grpc.StatusCode.PERMISSION_DENIED,
    common_pb2.PRODUCER_FENCED: grpc.StatusCode.FAILED_PRECONDITION,
    common_pb2.INCOMPATIBLE_SCHEMA: grpc.StatusCode.FAILED_PRECONDITION,
}
_DETAILS = re.compile(r"^(\d+):(.*)$", re.DOTALL)


def channel_options(keepalive_seconds: float = 30.0) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", int(keepalive_seconds * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.enable_retries", 0),
    ]


def server_options(max_receive_message_bytes: int,
                   max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION) -> list[tuple[str, int]]:
    """A server's options; a request larger than `max_receive_message_bytes` is refused by gRPC
    with RESOURCE_EXHAUSTED (the connection and every other call go on). A connection holds at most
    `max_streams_per_connection` streams at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): with the
    receive limit, that bounds the request bytes one connection can have in flight."""
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", max_receive_message_bytes),
        ("grpc.max_concurrent_streams", max_streams_per_connection),
        ("grpc.keepalive_permit_without_calls", 1),
        # Clients may ping every second to notice a dead or paused broker quickly; allow it.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.so_reuseport", 0),
    ]


def error_to_proto(error: errors.HeraldError) -> common_pb2.Error:
    """The Error message a HeraldError travels as inside a stream's replies."""
    return common_pb2.Error(code=error.code, message=str(error))  # type: ignore[arg-type]


def error_from_proto(error: common_pb2.Error) -> errors.HeraldError:
    """The HeraldError an Error message stands for."""
    return errors.error_for_code(error.code, error.message)


def status_for(error: errors.HeraldError) -> grpc.StatusCode:
    return _STATUS_BY_CODE.get(error.code, grpc.StatusCode.UNKNOWN)


def status_details(error: errors.HeraldError) -> str:
    """A failed call's status details, "<code>:<message>", cut to MAX_ERROR_DETAILS_BYTES: they
    travel in the call's trailing metadata (grpc-message, percent-encoded: a non-ASCII byte takes
    three), of which gRPC clients take 8 KiB (16 KiB at most). An error quoting a huge value (a
    name of 70,000 characters) was dropped by the caller's gRPC, the call failing with
    RESOURCE_EXHAUSTED and no word of what was wrong."""
    details = f"{error.code}:{error}"
    raw = details.encode()
    if len(raw) <= MAX_ERROR_DETAILS_BYTES:
        return details
    kept = raw[:MAX_ERROR_DETAILS_BYTES - 64].decode(errors="ignore")
    return f"{kept}... ({len(details) - len(kept)} characters of this message cut)"


async def abort(context: grpc.aio.ServicerContext, error: errors.HeraldError) -> NoReturn:  # type: ignore[type-arg]
    await context.abort(status_for(error), status_details(error))
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


def error_from_rpc(exc: grpc.aio.AioRpcError, operation: str = "") -> errors.HeraldError:
    """The HeraldError a failed RPC stands for; transport failures become ConnectionError_."""
    details = exc.details() or ""
    match = _DETAILS.match(details)
    if match:
        return errors.error_for_code(int(match.group(1)), match.group(2))
    where = f"{operation}: " if operation else ""
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.HeraldTimeoutError(f"{where}timed out")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        # gRPC's own refusal of a request past the server's grpc_max_receive_message_bytes: final.
        return errors.MessageTooLargeError(
            f"{where}the request is larger than the service accepts (its grpc_max_receive_message_bytes "
            f"setting): {details}")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return errors.AuthenticationError(f"{where}{details}")
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return errors.AuthorizationError(f"{where}{details}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL):
        return errors.ConnectionError_(f"{where}connection failed ({code.name}): {details}")
    return errors.HeraldError(f"{where}{code.name}: {details}")


def handler_behavior(
    handler: grpc.RpcMethodHandler[Any, Any],
) -> tuple[Any, Callable[..., grpc.RpcMethodHandler[Any, Any]]]:
    """A method handler's behaviour (the servicer's function) and the grpc function that makes a
    handler of the same kind: what a server interceptor needs to wrap one."""
    if handler.request_streaming and handler.response_streaming:
        return handler.stream_stream, grpc.stream_stream_rpc_method_handler
    if handler.request_streaming:
        return handler.stream_unary, grpc.stream_unary_rpc_method_handler
    if handler.response_streaming:
        return handler.unary_stream, grpc.unary_stream_rpc_method_handler
    return handler.unary_unary, grpc.unary_unary_rpc_method_handler
