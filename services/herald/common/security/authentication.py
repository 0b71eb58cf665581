"""Server-side authentication, the same for every service: an interceptor that checks each call's
or stream's credentials once, when it starts and before its request is read — a JWT in
`authorization: Bearer <token>` (herald.common.security.tokens), else with tls_client_auth the client
certificate's common name — and makes the role the call acts for (`current_principal()`) known to
the servicer that handles it.

A proxy (or a broker forwarding an admin call, or a dlq-worker moving a subscriber's dead letter)
authenticates with its own role and names the client it acts for in `x-herald-original-principal`;
that header is taken only from the roles given as `forwarder_roles`, and the principal is then the
original one. `acting_roles` (the dlq-workers') may name one too, but only on `acting_methods`
(what moving a dead letter takes), so that their token is not every role's. Refusals are
UNAUTHENTICATED (AuthenticationError) or, for a forbidden forwarding, PERMISSION_DENIED.
grpc.health.v1 is left open: probes carry no credentials."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from herald.common import errors
from herald.common.security.tokens import TokenVerifier
from herald.common.transport.admission import OPEN_METHODS, admitting
from herald.common.transport.rpc import abort, handler_behavior

ORIGINAL_PRINCIPAL = "x-herald-original-principal"
_BEARER = "bearer "

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor
    Context = grpc.aio.ServicerContext


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a call acts for: `role` is authorized; `authenticated_role` presented the credentials
    (the proxy's role when it forwards a client's call, else the same)."""

    role: str
    authenticated_role: str

    @property
    def forwarded(self) -> bool:
        return self.role != self.authenticated_role


_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("herald_principal", default=None)


def current_principal() -> Principal | None:
    """The principal of the call being handled (None when authentication is off)."""
    return _PRINCIPAL.get()


def current_role() -> str | None:
    principal = _PRINCIPAL.get()
    return None if principal is None else principal.role


@contextlib.contextmanager
def acting_as(principal: Principal | None) -> Iterator[None]:
    """Make `principal` the current one while a call that was not authenticated by the interceptor
    runs (a front end that authenticates its own requests: the broker's REST API), so that the calls
    it makes on the principal's behalf name it (`forwarded_principal`)."""
    token = _PRINCIPAL.set(principal)
    try:
        yield
    finally:
        _PRINCIPAL.reset(token)


def forwarded_principal() -> list[tuple[str, str]]:
    """Metadata naming the current call's principal, for a call made on its behalf (proxy → broker,
    broker → broker); nothing outside an authenticated call."""
    role = current_role()
    return [] if role is None else [(ORIGINAL_PRINCIPAL, role)]


class Authenticator:
    """Decides who a call is from. `verifier`: tokens (None: not taken); `tls_client_auth`: a
    verified client certificate's common name is the role when no token is given."""

    def __init__(self, verifier: TokenVerifier | None, *, tls_client_auth: bool = False,
                 forwarder_roles: Collection[str] = (), allowed_roles: Collection[str] | None = None,
                 acting_roles: Collection[str] = (), acting_methods: Collection[str] = ()) -> None:
        if verifier is None and not tls_client_auth:
            raise errors.InvalidArgumentError(
                "authentication_enabled needs a way to authenticate: token_secret_key_file or "
                "token_public_key_file (tokens), or tls_client_auth with tls_require_client_cert (certificates)")
        self._verifier = verifier
        self._tls_client_auth = tls_client_auth
        self._forwarders = frozenset(forwarder_roles)
        self._acting_roles = frozenset(acting_roles)
        self._acting_methods = frozenset(acting_methods)
        # None: any authenticated role gets in (authorization, if any, is the servicer's).
        self._allowed = None if allowed_roles is None else frozenset(allowed_roles)

    def authenticate(self, metadata: Iterable[tuple[str, Any]], auth_context: Mapping[str, Any],
                     method: str = "") -> Principal:
        """The principal of a call to `method` (`/package.Service/Method`)."""
        token = None
        original = None
        for key, value in metadata:
            if key == "authorization":
                token = value
            elif key == ORIGINAL_PRINCIPAL:
                original = value
        if token is not None:
            if not isinstance(token, str) or not token.lower().startswith(_BEARER):
                raise errors.AuthenticationError("the authorization metadata must be 'Bearer <token>'")
            if self._verifier is None:
                raise errors.AuthenticationError("this service takes no tokens: authenticate with a client certificate")
            role = self._verifier.role(token[len(_BEARER):].strip())
        else:
            role = self._certificate_role(auth_context)
        if self._allowed is not None and role not in self._allowed:
            raise errors.AuthorizationError(f"role {role!r} may not use this service")
        if original is None or original == role:
            return Principal(role, role)
        if role not in self._forwarders and role in self._acting_roles:
            if method in self._acting_methods:
                return Principal(str(original), role)
            raise errors.AuthorizationError(
                f"role {role!r} may act for another principal ({ORIGINAL_PRINCIPAL}) only to move dead letters "
                f"(dlq_worker_roles), not in {method or 'this call'}")
        if role not in self._forwarders:
            raise errors.AuthorizationError(
                f"role {role!r} may not act for another principal ({ORIGINAL_PRINCIPAL}): only the proxy and "
                "broker roles may (proxy_roles, broker_roles; dlq_worker_roles to move dead letters)")
        return Principal(str(original), role)

    def _certificate_role(self, auth_context: Mapping[str, Any]) -> str:
        names = auth_context.get("x509_common_name") if self._tls_client_auth else None
        if names:
            name = names[0]
            return name.decode() if isinstance(name, bytes) else str(name)
        if self._tls_client_auth and self._verifier is None:
            raise errors.AuthenticationError("no client certificate: connect with a certificate signed by "
                                             "the cluster's CA")
        raise errors.AuthenticationError("authentication is required: no token was given (pass "
                                         "auth=AuthenticationToken(...) or --auth-token-file)")


class AuthenticationInterceptor(_Interceptor):
    """Wraps every handler (but health's) so the call is authenticated before it runs, once, from
    its metadata and TLS client certificate: before anything of its request is read
    (herald.common.transport.admission). Put it first in the server's interceptors."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        if handler is None or method.startswith(OPEN_METHODS):
            return handler
        return admitting(handler, functools.partial(self._authenticated, method=method), method)

    @contextlib.asynccontextmanager
    async def _authenticated(self, context: Context, *, method: str) -> AsyncIterator[None]:
        try:
            principal = self._authenticator.authenticate(context.invocation_metadata() or (), context.auth_context(),
                                                         method)
        except errors.HeraldError as error:
            await abort(context, error)
        _PRINCIPAL.set(principal)
        yield


def _wrap(handler: grpc.RpcMethodHandler[Any, Any],
          enter: Callable[[Context], Awaitable[None]]) -> grpc.RpcMethodHandler[Any, Any]:
    behavior, make = handler_behavior(handler)
    if behavior is None:
        return handler
    return make(_guarded(behavior, enter), request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


def _guarded(behavior: Any, enter: Callable[[Context], Awaitable[None]]) -> Any:
    if inspect.isasyncgenfunction(behavior):
        async def streamed(request: Any, context: Context) -> AsyncIterator[Any]:
            await enter(context)
            async for reply in behavior(request, context):
                yield reply
        return streamed

    async def called(request: Any, context: Context) -> Any:
        await enter(context)
        return await behavior(request, context)
    return called


Decide = Callable[[str, Any, "str | None"], Awaitable[None]]


class AuthorizationInterceptor(_Interceptor):
    """Authorizes the calls of one service (`package.Service`): `decide(method name, request, role)`
    raises a HeraldError (AuthorizationError) to refuse. Unary calls are decided once their request
    is decoded; streams when they open, with request None (a servicer that needs the stream's first
    message decides itself). Put it after the AuthenticationInterceptor, which makes the role known."""

    def __init__(self, service: str, decide: Decide) -> None:
        self._prefix = f"/{service}/"
        self._decide = decide

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        if handler is None or not method.startswith(self._prefix):
            return handler
        name = method[len(self._prefix):]
        decide = self._decide
        if handler.unary_unary is None:
            async def opening(context: Context) -> None:
                try:
                    await decide(name, None, current_role())
                except errors.HeraldError as error:
                    await abort(context, error)
            return _wrap(handler, opening)
        behavior: Any = handler.unary_unary

        async def checked(request: Any, context: Context) -> Any:
            try:
                await decide(name, request, current_role())
            except errors.HeraldError as error:
                await abort(context, error)
            return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked,  # type: ignore[arg-type]  # the stubs know only the sync handler signature
            request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
