"""What a REST request names and carries: tenant, namespace, topic and subscription from its path
(invalid names are 412, as Pulsar answers them), flags from its query, its JSON body (malformed: 400)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from herald.broker.rest.errors import RestError
from herald.common.codec.names import TopicName, parse_namespace, validate_subscription_name, validate_tenant_name
from herald.common.errors import ErrorCode, InvalidArgumentError

ADMIN_V2 = "/admin/v2"


def _invalid(what: str, error: Exception) -> RestError:
    return RestError(412, f"{what} is not valid: {error}", ErrorCode.INVALID_ARGUMENT)


def tenant_of(request: web.Request) -> str:
    try:
        return validate_tenant_name(request.match_info["tenant"])
    except InvalidArgumentError as error:
        raise _invalid("Tenant name", error) from None


def namespace_of(request: web.Request) -> str:
    """`tenant/namespace` from the path."""
    text = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
    try:
        tenant, namespace = parse_namespace(text)
    except InvalidArgumentError as error:
        raise _invalid("Namespace name", error) from None
    return f"{tenant}/{namespace}"


def topic_of(request: web.Request) -> TopicName:
    info = request.match_info
    text = f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}"
    try:
        return TopicName.parse(text)
    except InvalidArgumentError as error:
        raise _invalid("Topic name", error) from None


def persistent_topic_of(request: web.Request) -> TopicName:
    """A topic a path names without its domain (the schema paths): a persistent one, as in Pulsar."""
    info = request.match_info
    try:
        return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidArgumentError as error:
        raise _invalid("Topic name", error) from None


def subscription_of(request: web.Request) -> str:
    try:
        return validate_subscription_name(request.match_info["subscription"])
    except InvalidArgumentError as error:
        raise _invalid("Subscription name", error) from None


def flag(request: web.Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter (`?force=true`), as JAX-RS reads one: "true" in any case is true."""
    value = request.query.get(name)
    return default if value is None else value.strip().lower() == "true"


def int_of(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"{what} {text!r} is not an integer") from None


async def json_body(request: web.Request) -> Any:
    """The request's JSON body; None when it has none. InvalidArgumentError (400) when it is not JSON."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"the request body is not JSON: {exc}") from None


def typed(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """`value` when it is a `kind` (bool is no int here); InvalidArgumentError naming `what` otherwise."""
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise InvalidArgumentError(f"{what} must be {_kind_name(kind)}, not {json.dumps(value)}")
    if not isinstance(value, kind):
        raise InvalidArgumentError(f"{what} must be {_kind_name(kind)}, not {json.dumps(value)[:100]}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", bool: "a boolean", str: "a string", dict: "a JSON object", list: "a JSON array",
             float: "a number"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
