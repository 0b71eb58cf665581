"""Herald's errors as Pulsar's REST API answers them: an HTTP status and the body
`{"reason": "..."}`. A route whose status Pulsar fixes differently from the error's kind (409 for a
namespace that still has topics, 406 for a partition count, 405 for a call not allowed on a
partitioned topic) raises a `RestError` carrying it."""

from __future__ import annotations

import json

from aiohttp import web

from herald.common.errors import ErrorCode, HeraldError

_STATUS_BY_CODE: dict[int, int] = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.AUTHENTICATION_ERROR: 401,
    ErrorCode.AUTHORIZATION_ERROR: 403,
    ErrorCode.INCOMPATIBLE_SCHEMA: 409,  # as Pulsar answers a schema it cannot accept
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.TOPIC_NOT_FOUND: 404,
    ErrorCode.CONSUMER_NOT_FOUND: 404,
    ErrorCode.PRODUCER_NOT_FOUND: 404,
    ErrorCode.NOT_ALLOWED: 405,
    ErrorCode.TOPIC_TERMINATED: 405,
    ErrorCode.ALREADY_EXISTS: 409,
    ErrorCode.BAD_VERSION: 409,  # a compare-and-set lost to a concurrent admin: Pulsar's "Concurrent modification"
    ErrorCode.PRECONDITION_FAILED: 412,
    ErrorCode.TOO_MANY_REQUESTS: 429,
    ErrorCode.SERVICE_NOT_READY: 503,
    ErrorCode.NOT_OWNER: 503,
    ErrorCode.TIMEOUT: 504,
}


class RestError(HeraldError):
    """A refusal with the HTTP status Pulsar's REST API gives it on this route; `code` its kind."""

    def __init__(self, status: int, message: str, code: int = ErrorCode.UNKNOWN_ERROR) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def status_of(error: HeraldError) -> int:
    if isinstance(error, RestError):
        return error.status
    return _STATUS_BY_CODE.get(error.code, 500)


def reason_response(status: int, reason: str) -> web.Response:
    """Pulsar's error body."""
    return web.Response(status=status, text=json.dumps({"reason": reason}), content_type="application/json")


def error_response(error: HeraldError) -> web.Response:
    return reason_response(status_of(error), str(error))
