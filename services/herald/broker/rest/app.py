"""What every route shares: the context it acts on, authentication (middleware), authorization
(`authorize`: the gRPC admin's decisions) and errors as Pulsar's bodies."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from aiohttp import web

from herald.broker.core.admin_access import AdminAccess, AdminCall
from herald.broker.core.ports import BrokerUrls, TopicOwners
from herald.broker.core.service import BrokerService
from herald.broker.rest.errors import error_response, reason_response
from herald.common.errors import HeraldError, NotOwnerError, ServiceNotReadyError
from herald.common.security.authentication import Authenticator, Principal, acting_as, current_role
from herald.metadata.authorization import Permissions

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ROLE = "herald.role"
T = TypeVar("T")


@dataclass
class RestContext:
    """What the routes act on. `access`: None when authorization is off; `authenticator`: None when
    authentication is off; `urls`: where this broker serves each protocol (its web service among
    them); `owners`: who serves a topic (lookup, which assigns an owner when there is none; set
    once the broker is registered)."""

    service: BrokerService
    access: AdminAccess | None
    authenticator: Authenticator | None
    cluster: str
    tls: bool
    urls: BrokerUrls = field(default_factory=BrokerUrls)
    owners: TopicOwners | None = None

    @property
    def http_url(self) -> str:
        """This broker's web service."""
        return self.urls.web_tls if self.tls else self.urls.web

    @property
    def permissions(self) -> Permissions:
        return Permissions(self.service.store)

    async def owner(self, topic: str) -> BrokerUrls | None:
        """The owner's URLs when another broker serves `topic`, None when this one does; asked for
        the request's role (lookup authorizes it)."""
        if self.owners is None:
            raise ServiceNotReadyError("the broker is not registered with lookup yet: retry")
        return await self.owners.owner(topic, current_role())


class OwnedElsewhere(Exception):
    """The topic is served by another broker: the request is redirected to its web service."""

    def __init__(self, topic: str, urls: BrokerUrls, tls: bool) -> None:
        super().__init__(topic)
        self.topic = topic
        self.web_url = urls.web_tls if tls and urls.web_tls else urls.web or urls.web_tls


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
    is made again here, else the request is redirected (307) to the owner's web service, as
    Pulsar's brokers do."""
    try:
        return await call()
    except NotOwnerError:
        owner = await context.owner(topic)
        if owner is not None:
            raise OwnedElsewhere(topic, owner, context.tls) from None
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
    except OwnedElsewhere as elsewhere:
        if not elsewhere.web_url:
            return error_response(ServiceNotReadyError(
                f"topic {elsewhere.topic} is served by a broker with no web service: ask it over its own protocol"))
        raise web.HTTPTemporaryRedirect(elsewhere.web_url + str(request.rel_url)) from None
    except web.HTTPException as exc:
        if exc.status >= 400:  # aiohttp's own (no route: 404, wrong method: 405), with Pulsar's body
            return reason_response(exc.status, exc.reason)
        raise
    except Exception as exc:
        log.exception("REST %s %s failed", request.method, request.path)
        return reason_response(500, f"internal error: {exc!r}")
