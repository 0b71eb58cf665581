"""Topics' schemas as Pulsar's admin REST API serves them (/admin/v2/schemas/{tenant}/{namespace}/
{topic}/schema[s], .../compatibility) and a topic's own schemaCompatibilityStrategy
(/admin/v2/persistent/{tenant}/{namespace}/{topic}/schemaCompatibilityStrategy). Schemas live in the
metadata store (broker.core.schema_registry), so any broker answers: no redirect to the owner.

Reading needs the rights to look the topic up (produce or consume) and so does testing a schema
(nothing is stored); uploading and deleting are a tenant admin's. A definition travels as a string
(`schema`, as pulsar-admin sends it); a KEY_VALUE schema's as Pulsar's REST writes it, JSON
{"key": ..., "value": ...} of its two definitions."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from herald.broker.core import schema_compatibility as compatibility
from herald.broker.core.admin_access import AdminCall
from herald.broker.core.schemas import SchemaVersion
from herald.broker.rest.app import authorize, context_of
from herald.broker.rest.paths import ADMIN_V2, flag, int_of, json_body, persistent_topic_of, topic_of, typed
from herald.broker.rest.tenants import json_response, no_content
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import InvalidArgumentError
from herald.metadata.policies import SCHEMA_COMPATIBILITY_STRATEGIES, Policies

SCHEMA_PATH = f"{ADMIN_V2}/schemas/{{tenant}}/{{namespace}}/{{topic}}"
STRATEGY_PATH = f"{ADMIN_V2}/{{domain:persistent|non-persistent}}/{{tenant}}/{{namespace}}/{{topic}}" \
                "/schemaCompatibilityStrategy"


# ---- definitions as REST carries them ----

def _definition_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def data_to_rest(schema: SchemaInfo) -> str:
    if schema.type.upper() != "KEY_VALUE":
        return _definition_text(schema.data)
    key, value = compatibility.split_key_value(schema)
    parts: dict[str, Any] = {}
    for which, part in (("key", key), ("value", value)):
        text = _definition_text(part.data)
        try:
            parts[which] = json.loads(text) if text else text
        except ValueError:
            parts[which] = text
    return json.dumps(parts)


def data_from_rest(kind: str, text: str, properties: dict[str, str]) -> SchemaInfo:
    if kind != "KEY_VALUE":
        return SchemaInfo(kind, text.encode(), properties)
    try:
        parts = json.loads(text)
        key, value = parts["key"], parts["value"]
    except (ValueError, KeyError, TypeError):
        raise InvalidArgumentError('a KEY_VALUE schema is JSON {"key": <key schema>, "value": <value schema>}, '
                                   f"not {text[:100]!r}") from None
    joined = compatibility.join_key_value(
        SchemaInfo(properties.get("key.schema.type", "BYTES").upper(), _encode_part(key)),
        SchemaInfo(properties.get("value.schema.type", "BYTES").upper(), _encode_part(value)),
        properties.get("kv.encoding.type", "INLINE"))
    return SchemaInfo("KEY_VALUE", joined.data, {**joined.properties, **properties})


def _encode_part(part: Any) -> bytes:
    """One half of a KEY_VALUE definition: a string as it is, a JSON value (an Avro schema) as JSON."""
    return (part if isinstance(part, str) else json.dumps(part)).encode()


def _response(found: SchemaVersion) -> dict[str, Any]:
    """Pulsar's GetSchemaResponse."""
    schema = found.schema
    return {"version": found.version, "type": schema.type.upper(), "timestamp": found.timestamp,
            "data": data_to_rest(schema), "properties": dict(schema.properties)}


def _schema_from(doc: Any) -> SchemaInfo:
    """Pulsar's PostSchemaPayload: {"type", "schema", "properties"}."""
    doc = typed(doc, dict, "the schema payload ({\"type\", \"schema\", \"properties\"})")
    kind = typed(doc.get("type"), str, "type").upper()
    text = typed(doc.get("schema", ""), str, "schema (the definition, as a string)")
    properties = typed(doc.get("properties") or {}, dict, "properties")
    return data_from_rest(kind, text, {str(k): typed(v, str, f"properties[{k}]") for k, v in properties.items()})


# ---- routes ----

async def get_schema(request: web.Request) -> web.Response:
    name = persistent_topic_of(request)
    await authorize(request, AdminCall.on("GetSchema", topic=str(name)))
    version = request.match_info.get("version")
    number = int_of(version, "schema version") if version is not None else None
    found = await context_of(request).service.schemas.entry(str(name), number)
    return json_response(_response(found))


async def get_all_schemas(request: web.Request) -> web.Response:
    name = persistent_topic_of(request)
    await authorize(request, AdminCall.on("GetSchema", topic=str(name)))
    entries = await context_of(request).service.schemas.entries(str(name))
    return json_response({"getSchemaResponses": [_response(entry) for entry in entries]})


async def post_schema(request: web.Request) -> web.Response:
    name = persistent_topic_of(request)
    schema = _schema_from(await json_body(request))
    await authorize(request, AdminCall.on("UploadSchema", topic=str(name)))
    version = await context_of(request).service.schemas.upload(str(name), schema)
    return json_response({"version": {"version": version}})


async def delete_schema(request: web.Request) -> web.Response:
    name = persistent_topic_of(request)
    await authorize(request, AdminCall.on("DeleteSchema", topic=str(name)))
    last = await context_of(request).service.schemas.delete(str(name))
    return json_response({"version": last if last is not None else -1})


async def test_compatibility(request: web.Request) -> web.Response:
    name = persistent_topic_of(request)
    schema = _schema_from(await json_body(request))
    await authorize(request, AdminCall.on("TestSchemaCompatibility", topic=str(name)))
    registry = context_of(request).service.schemas
    reason = await registry.test(str(name), schema)
    strategy = (await registry.policies(str(name))).strategy
    answer: dict[str, Any] = {"isCompatibility": reason is None, "schemaCompatibilityStrategy": strategy}
    if reason is not None:
        answer["reason"] = reason  # Herald's addition: why not
    return json_response(answer)


# ---- a topic's own strategy ----

async def get_topic_strategy(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("GetTopicPolicies", topic=str(name)))
    service = context_of(request).service
    if flag(request, "applied"):
        return json_response((await service.schemas.policies(str(name))).strategy)
    own = (await service.resources.get_topic_policies(str(name))).schema_compatibility_strategy
    return json_response(own or "UNDEFINED")


async def set_topic_strategy(request: web.Request) -> web.Response:
    name = topic_of(request)
    strategy = typed(await json_body(request), str, "the schema compatibility strategy")
    if strategy not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise InvalidArgumentError(f"schema compatibility strategy {strategy!r} is invalid: use one of "
                                   f"{', '.join(SCHEMA_COMPATIBILITY_STRATEGIES)}")
    await authorize(request, AdminCall.on("SetTopicPolicies", topic=str(name)))
    await context_of(request).service.resources.set_topic_policies(
        str(name), Policies(schema_compatibility_strategy=strategy))
    return no_content()


async def remove_topic_strategy(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("SetTopicPolicies", topic=str(name)))
    await context_of(request).service.resources.set_topic_policies(
        str(name), Policies(), ["schema_compatibility_strategy"])
    return no_content()


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get(f"{SCHEMA_PATH}/schema", get_schema)
    router.add_get(f"{SCHEMA_PATH}/schema/{{version}}", get_schema)
    router.add_get(f"{SCHEMA_PATH}/schemas", get_all_schemas)
    router.add_post(f"{SCHEMA_PATH}/schema", post_schema)
    router.add_delete(f"{SCHEMA_PATH}/schema", delete_schema)
    router.add_post(f"{SCHEMA_PATH}/compatibility", test_compatibility)
    router.add_get(STRATEGY_PATH, get_topic_strategy)
    router.add_put(STRATEGY_PATH, set_topic_strategy)
    router.add_post(STRATEGY_PATH, set_topic_strategy)
    router.add_delete(STRATEGY_PATH, remove_topic_strategy)
