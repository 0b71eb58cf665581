"""What every route shares: the context it acts on, authentication (middleware), authorization
(`authorize`: the gRPC admin's decisions) and errors as Pulsar's bodies."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from aiohttp import web

from herald.broker.core.admin_access import AdminAccess, AdminCall
from herald.broker.core.service import BrokerService
from herald.broker.rest.errors import error_response, reason_response
from herald.common.errors import HeraldError, NotOwnerError, ServiceNotReadyError
from herald.common.security.authentication import Authenticator, Principal, acting_as
from herald.metadata.authorization import Permissions

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ROLE = "herald.role"
T = TypeVar("T")
# Seconds a lookup of a topic's owner may take.
OWNER_LOOKUP_TIMEOUT = 30.0


@dataclass
class RestContext:
    """What the routes act on. `access`: None when authorization is off; `authenticator`: None when
    authentication is off; `owner_of(topic, timeout)`: the address of a topic's owner broker, which
    lookup assigns when it has none (a port the process wires); `own_address`: this broker's, as
    lookup names it; `broker_scheme`: the scheme of a broker URL (herald, herald+ssl); `http_url`:
    this broker's web service."""

    service: BrokerService
    access: AdminAccess | None
    authenticator: Authenticator | None
    owner_of: Callable[[str, float], Awaitable[str]]
    own_address: str
    cluster: str
    broker_scheme: str
    http_url: str
    tls: bool

    @property
    def permissions(self) -> Permissions:
        return Permissions(self.service.store)


CONTEXT: web.AppKey[RestContext] = web.AppKey("herald_context", RestContext)


def context_of(request: web.Request) -> RestContext:
    return request.app[CONTEXT]


async def authorize(request: web.Request, call: AdminCall) -> None:
    """The gRPC admin's decision on `call` for the request's role (AuthorizationError: 403)."""
    access = context_of(request).access
    if access is not None:
        await access.decide(call, request.get(ROLE))


async def on_owner(context: RestContext, topic: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, which acts on `topic`'s state: when this broker does not serve the topic, lookup
    is asked for its owner (and assigns one when there is none); when that is this broker, the call
    is made again here, else the caller is told which broker owns it (503: Pulsar's "not ready",
    the client asks again)."""
    try:
        return await call()
    except NotOwnerError:
        owner = await context.owner_of(topic, OWNER_LOOKUP_TIMEOUT)
        if owner != context.own_address:
            raise ServiceNotReadyError(
                f"topic {topic} is owned by broker {owner}: ask that broker's web service") from None
        return await call()


def _authenticate(authenticator: Authenticator, request: web.Request) -> Principal:
    header = request.headers.get("Authorization")
    metadata = [] if header is None else [("authorization", header)]
    return authenticator.authenticate(metadata, {}, f"{request.method} {request.path}")


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        authenticator = context_of(request).authenticator
        principal = None
        if authenticator is not None:
            principal = _authenticate(authenticator, request)
            request[ROLE] = principal.role
        with acting_as(principal):
            return await handler(request)
    except HeraldError as error:
        return error_response(error)
    except web.HTTPException as exc:
        if exc.status >= 400:  # aiohttp's own (no route: 404, wrong method: 405), with Pulsar's body
            return reason_response(exc.status, exc.reason)
        raise
    except Exception as exc:
        log.exception("REST %s %s failed", request.method, request.path)
        return reason_response(500, f"internal error: {exc!r}")
