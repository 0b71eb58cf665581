"""Schemas through Pulsar's admin REST paths on a real standalone: /admin/v2/schemas/... (get, get
by version, all versions, upload, delete, compatibility test), the namespace policies
schemaValidationEnforced / isAllowAutoUpdateSchema, a topic's own schemaCompatibilityStrategy, the
schema history going with a deleted topic unless deleteSchema=false, and who may do what with
authorization on."""

from __future__ import annotations

import json
from typing import Any

from tests.helpers import unique_name
from tests.rest.conftest import V2, Rest, new_namespace
from tests.security.conftest import ADMIN, Keys


def avro(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": list(fields)})


X = {"name": "x", "type": "int"}
V1 = avro(X)
V2_ADDED = avro(X, {"name": "y", "type": "string", "default": ""})
V_LONG = avro({"name": "x", "type": "long"})


def payload(definition: str, kind: str = "AVRO", properties: dict[str, str] | None = None) -> dict[str, Any]:
    return {"type": kind, "schema": definition, "properties": properties or {}}


async def test_upload_get_list_test_and_delete(rest: Rest) -> None:
    namespace = await new_namespace(rest)
    path = f"{V2}/schemas/{namespace}/orders"
    missing = await rest.get(f"{path}/schema")
    assert missing.status == 404 and "has no schema" in missing.reason
    first = await rest.post(f"{path}/schema", payload(V1, properties={"k": "v"}))
    assert (first.status, first.body) == (200, {"version": {"version": 0}}), first
    assert (await rest.post(f"{path}/schema", payload(V2_ADDED))).body == {"version": {"version": 1}}
    latest = await rest.get(f"{path}/schema")
    assert latest.status == 200
    assert {k: latest.body[k] for k in ("version", "type", "data", "properties")} == {
        "version": 1, "type": "AVRO", "data": V2_ADDED, "properties": {}}
    assert latest.body["timestamp"] > 0
    assert (await rest.get(f"{path}/schema/0")).body["properties"] == {"k": "v"}
    every = await rest.get(f"{path}/schemas")
    assert [(s["version"], s["data"]) for s in every.body["getSchemaResponses"]] == [(0, V1), (1, V2_ADDED)]
    # The compatibility test stores nothing, and says why not.
    good = await rest.post(f"{path}/compatibility", payload(V2_ADDED))
    assert good.body == {"isCompatibility": True, "schemaCompatibilityStrategy": "FULL"}
    bad = await rest.post(f"{path}/compatibility", payload(V_LONG))
    assert bad.status == 200 and bad.body["isCompatibility"] is False
    assert "the writer's long cannot be read as int" in bad.body["reason"]
    refused = await rest.post(f"{path}/schema", payload(V_LONG))
    assert refused.status == 409 and "FULL" in refused.reason and "Evolve it compatibly" in refused.reason
    # Deleted: gone, old versions readable by number, the numbering continues.
    deleted = await rest.delete(f"{path}/schema")
    assert (deleted.status, deleted.body) == (200, {"version": 1})
    assert (await rest.get(f"{path}/schema")).status == 404
    assert (await rest.get(f"{path}/schemas")).body == {"getSchemaResponses": []}
    assert (await rest.get(f"{path}/schema/1")).body["data"] == V2_ADDED
    assert (await rest.post(f"{path}/schema", payload("", "STRING"))).body == {"version": {"version": 2}}
    assert (await rest.delete(f"{V2}/schemas/{namespace}/never/schema")).body == {"version": -1}


async def test_malformed_requests_are_refused_with_what_is_wrong(rest: Rest) -> None:
    namespace = await new_namespace(rest)
    path = f"{V2}/schemas/{namespace}/orders"
    for body, raw, status, reason in (
        (None, b"{not json", 400, "not JSON"),
        ({"schema": V1}, None, 400, "type must be a string"),
        (payload(V1) | {"schema": 5}, None, 400, "schema (the definition, as a string) must be a string"),
        (payload('{"type": "record"}'), None, 400, "not a valid Avro schema"),
        (payload("x", "KEY_VALUE"), None, 400, "a KEY_VALUE schema is JSON"),
        (payload("", "BYTES"), None, 400, "cannot be uploaded"),
        (payload(V1) | {"properties": {"a": 1}}, None, 400, "properties[a] must be a string"),
    ):
        reply = await rest.call("POST", f"{path}/schema", body, raw=raw)
        assert reply.status == status and reason in reply.reason, (body, reply)
    assert (await rest.get(f"{path}/schema/seven")).status == 400
    await rest.post(f"{path}/schema", payload(V1))
    unknown = await rest.get(f"{path}/schema/9")
    assert unknown.status == 404 and "no schema version 9" in unknown.reason
    assert (await rest.get(f"{V2}/schemas/{namespace}/bad name/schema")).status == 412
    assert (await rest.get(f"{V2}/schemas/{namespace.split('/')[0]}/nope/t/schema")).status == 404


async def test_a_key_value_schema_round_trips_as_pulsar_writes_it(rest: Rest) -> None:
    namespace = await new_namespace(rest)
    path = f"{V2}/schemas/{namespace}/kv"
    properties = {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "SEPARATED"}
    definition = json.dumps({"key": "", "value": json.loads(V1)})
    assert (await rest.post(f"{path}/schema", payload(definition, "KEY_VALUE", properties))).status == 200
    got = (await rest.get(f"{path}/schema")).body
    assert got["type"] == "KEY_VALUE" and json.loads(got["data"]) == {"key": "", "value": json.loads(V1)}
    assert got["properties"]["kv.encoding.type"] == "SEPARATED"
    # The value schema evolves by its own (Avro) rules.
    evolved = json.dumps({"key": "", "value": json.loads(V_LONG)})
    test = await rest.post(f"{path}/compatibility", payload(evolved, "KEY_VALUE", properties))
    assert test.body["isCompatibility"] is False and "the value schema" in test.body["reason"]


async def test_namespace_schema_policies_and_a_topics_own_strategy(rest: Rest) -> None:
    namespace = await new_namespace(rest)
    ns = f"{V2}/namespaces/{namespace}"
    assert (await rest.get(f"{ns}/schemaValidationEnforced")).body is False
    assert (await rest.get(f"{ns}/isAllowAutoUpdateSchema")).body is True
    assert (await rest.post(f"{ns}/schemaValidationEnforced", True)).status == 204
    assert (await rest.post(f"{ns}/isAllowAutoUpdateSchema", False)).status == 204
    assert (await rest.get(f"{ns}/schemaValidationEnforced")).body is True
    assert (await rest.get(f"{ns}/isAllowAutoUpdateSchema")).body is False
    wrong = await rest.post(f"{ns}/schemaValidationEnforced", "yes")
    assert wrong.status == 400 and "true or false" in wrong.reason
    assert (await rest.delete(f"{ns}/isAllowAutoUpdateSchema")).status == 204
    assert (await rest.get(f"{ns}/isAllowAutoUpdateSchema")).body is True

    topic = f"{V2}/persistent/{namespace}/orders/schemaCompatibilityStrategy"
    assert (await rest.get(topic)).body == "UNDEFINED"
    assert (await rest.get(topic, params={"applied": "true"})).body == "FULL"
    assert (await rest.put(f"{ns}/schemaCompatibilityStrategy", "BACKWARD")).status == 204
    assert (await rest.get(topic, params={"applied": "true"})).body == "BACKWARD"
    assert (await rest.put(topic, "ALWAYS_COMPATIBLE")).status == 204
    assert (await rest.get(topic)).body == "ALWAYS_COMPATIBLE"
    schemas = f"{V2}/schemas/{namespace}/orders"
    await rest.post(f"{schemas}/schema", payload(V1))
    assert (await rest.post(f"{schemas}/schema", payload("", "STRING"))).status == 200  # anything goes
    invalid = await rest.put(topic, "SOMETIMES")
    assert invalid.status == 400 and "use one of" in invalid.reason
    assert (await rest.delete(topic)).status == 204
    assert (await rest.get(topic)).body == "UNDEFINED"
    assert (await rest.get(topic, params={"applied": "true"})).body == "BACKWARD"


async def test_deleting_a_topic_deletes_its_schemas_unless_asked_to_keep_them(rest: Rest) -> None:
    namespace = await new_namespace(rest)
    for name, params, kept in (("gone", {}, False), ("kept", {"deleteSchema": "false"}, True)):
        assert (await rest.put(f"{V2}/persistent/{namespace}/{name}")).status == 204
        schema = f"{V2}/schemas/{namespace}/{name}/schema"
        assert (await rest.post(schema, payload(V1))).status == 200
        assert (await rest.delete(f"{V2}/persistent/{namespace}/{name}", params=params)).status == 204
        assert (await rest.get(schema)).status == (200 if kept else 404), name
    # A partitioned topic's schemas go with it.
    assert (await rest.put(f"{V2}/persistent/{namespace}/parts/partitions", 2)).status == 204
    schema = f"{V2}/schemas/{namespace}/parts/schema"
    assert (await rest.post(schema, payload(V1))).status == 200
    assert (await rest.get(f"{V2}/schemas/{namespace}/parts-partition-1/schema")).body["data"] == V1
    assert (await rest.delete(f"{V2}/persistent/{namespace}/parts/partitions")).status == 204
    assert (await rest.get(schema)).status == 404


async def test_readers_may_read_and_test_schemas_and_only_tenant_admins_change_them(
    secure_rest: Rest, keys: Keys,
) -> None:
    admin = secure_rest.as_role(keys.token(ADMIN))
    owner_role, reader_role = unique_name("owner"), unique_name("reader")
    namespace = await new_namespace(admin, admin_roles=(owner_role,))
    owner = secure_rest.as_role(keys.token(owner_role))
    reader = secure_rest.as_role(keys.token(reader_role))
    stranger = secure_rest.as_role(keys.token(unique_name("stranger")))
    assert (await admin.post(f"{V2}/namespaces/{namespace}/permissions/{reader_role}", ["consume"])).status == 204
    path = f"{V2}/schemas/{namespace}/orders"
    assert (await owner.post(f"{path}/schema", payload(V1))).status == 200
    for role in (owner, reader):
        assert (await role.get(f"{path}/schema")).status == 200
        assert (await role.get(f"{path}/schemas")).status == 200
        assert (await role.post(f"{path}/compatibility", payload(V2_ADDED))).body["isCompatibility"] is True
    for method, sub, body in (("POST", "schema", payload(V2_ADDED)), ("DELETE", "schema", None)):
        refused = await reader.call(method, f"{path}/{sub}", body)
        assert refused.status == 403 and "may not administer tenant" in refused.reason, refused
    for method, sub, body in (("GET", "schema", None), ("POST", "compatibility", payload(V1)),
                              ("POST", "schema", payload(V2_ADDED))):
        assert (await stranger.call(method, f"{path}/{sub}", body)).status == 403
    strategy = f"{V2}/persistent/{namespace}/orders/schemaCompatibilityStrategy"
    assert (await reader.put(strategy, "FORWARD")).status == 403
    assert (await owner.put(strategy, "FORWARD")).status == 204
    for policy in ("schemaValidationEnforced", "isAllowAutoUpdateSchema"):
        assert (await reader.post(f"{V2}/namespaces/{namespace}/{policy}", True)).status == 403
        assert (await owner.post(f"{V2}/namespaces/{namespace}/{policy}", True)).status == 204
    assert (await secure_rest.get(f"{path}/schema")).status == 401
