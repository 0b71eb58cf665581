"""The schema registry with the official client: producers with evolving Record classes under the
compatibility strategies set through the REST API (accepted and refused, pulsar.IncompatibleSchema),
consumers decoding messages written with older versions by the version each carries, auto update off
and validation enforced, and GET_OR_CREATE_SCHEMA on the wire.

Pulsar's Python Record fields are nullable without a default unless required_default=True, so the
evolutions below are Avro's classic cases: a field added with a default (FULL), one added without
(FORWARD only: the new schema cannot read old data), one removed that had no default (BACKWARD only)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar_api
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from tests.conftest import StandaloneProcess
from tests.helpers import unique_name
from tests.pulsar.raw import Command, RawConnection

RECEIVE_MS = 10_000


class Order(Record):  # version 0
    item = String()
    quantity = Integer()


def order_class(**fields: Any) -> type[Record]:
    """Another version of the record Order (the record name is the class name)."""
    return type("Order", (Record,), fields)


WITH_NOTE = order_class(item=String(), quantity=Integer(), note=String(default=None, required_default=True))
WITH_REQUIRED_NOTE = order_class(item=String(), quantity=Integer(), note=String())  # no default
WITHOUT_QUANTITY = order_class(item=String())  # quantity had no default


def rest(server: StandaloneProcess, method: str, path: str, body: Any = None) -> int:
    request = urllib.request.Request(server.web_url + "/admin/v2" + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def namespace_with(server: StandaloneProcess, strategy: str | None = None, **policies: bool) -> str:
    tenant, namespace = unique_name("tenant"), unique_name("ns")
    rest(server, "PUT", f"/tenants/{tenant}", {"adminRoles": [], "allowedClusters": ["standalone"]})
    rest(server, "PUT", f"/namespaces/{tenant}/{namespace}")
    if strategy is not None:
        rest(server, "PUT", f"/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy", strategy)
    for policy, value in policies.items():
        rest(server, "POST", f"/namespaces/{tenant}/{namespace}/{policy}", value)
    return f"{tenant}/{namespace}"


@pytest.mark.parametrize(("strategy", "accepted", "refused"), [
    ("BACKWARD", [WITH_NOTE, WITHOUT_QUANTITY], [WITH_REQUIRED_NOTE]),
    ("FORWARD", [WITH_NOTE, WITH_REQUIRED_NOTE], [WITHOUT_QUANTITY]),
    ("FULL", [WITH_NOTE], [WITH_REQUIRED_NOTE, WITHOUT_QUANTITY]),
    ("ALWAYS_INCOMPATIBLE", [], [WITH_NOTE, WITH_REQUIRED_NOTE, WITHOUT_QUANTITY]),
])
def test_producers_evolve_by_the_namespaces_strategy(
    client: pulsar.Client, server: StandaloneProcess, strategy: str, accepted: list[type[Record]],
    refused: list[type[Record]],
) -> None:
    namespace = namespace_with(server, strategy)
    for evolved in refused:  # each checked against version 0 alone
        topic = f"persistent://{namespace}/{unique_name('orders')}"
        client.create_producer(topic, schema=AvroSchema(Order)).close()
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(evolved))
        client.create_producer(topic, schema=AvroSchema(Order)).close()  # version 0 still welcome
    for evolved in accepted:
        topic = f"persistent://{namespace}/{unique_name('orders')}"
        client.create_producer(topic, schema=AvroSchema(Order)).close()
        client.create_producer(topic, schema=AvroSchema(evolved)).close()


def test_a_consumer_decodes_old_messages_after_an_upgrade(client: pulsar.Client, server: StandaloneProcess) -> None:
    topic = f"persistent://{namespace_with(server, 'BACKWARD')}/orders"
    consumer = client.subscribe(topic, "s", schema=AvroSchema(Order))
    old = client.create_producer(topic, schema=AvroSchema(Order))
    old.send(Order(item="book", quantity=2))
    new = client.create_producer(topic, schema=AvroSchema(WITH_NOTE))
    new.send(WITH_NOTE(item="pen", quantity=1, note="gift"))
    first, second = (consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(2))
    # The version each message carries (the client gives its 8 bytes as a str).
    assert [m.schema_version().encode("latin-1") for m in (first, second)] == [bytes(8), (1).to_bytes(8, "big")]
    assert (first.value().item, second.value().item) == ("book", "pen")
    # A consumer of the new version reads both: the old message by version 0's definition (its
    # client asks GET_SCHEMA for it), the note defaulted.
    upgraded = client.subscribe(topic, "upgraded", schema=AvroSchema(WITH_NOTE),
                                initial_position=pulsar.InitialPosition.Earliest)
    values = [upgraded.receive(timeout_millis=RECEIVE_MS).value() for _ in range(2)]
    assert [(v.item, v.quantity, v.note) for v in values] == [("book", 2, None), ("pen", 1, "gift")]


def test_consumers_are_checked_against_the_topics_data(client: pulsar.Client, server: StandaloneProcess) -> None:
    topic = f"persistent://{namespace_with(server)}/orders"
    client.create_producer(topic, schema=JsonSchema(Order)).close()
    client.subscribe(topic, "same", schema=JsonSchema(Order)).close()
    client.subscribe(topic, "reads-it", schema=JsonSchema(WITH_NOTE)).close()  # note defaults
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "cannot", schema=JsonSchema(WITH_REQUIRED_NOTE))
    # A topic without a schema takes a consumer's as its first version.
    fresh = f"persistent://{namespace_with(server)}/fresh"
    client.subscribe(fresh, "s", schema=AvroSchema(Order)).close()
    assert rest(server, "GET", f"/schemas/{fresh.removeprefix('persistent://')}/schema/0") == 200


def test_without_auto_update_an_admin_uploads_the_next_version(
    client: pulsar.Client, server: StandaloneProcess,
) -> None:
    namespace = namespace_with(server, isAllowAutoUpdateSchema=False)
    topic = f"persistent://{namespace}/orders"
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Order))
    definition = AvroSchema(Order).schema_info().schema()
    assert rest(server, "POST", f"/schemas/{namespace}/orders/schema",
                {"type": "AVRO", "schema": definition, "properties": {}}) == 200
    producer = client.create_producer(topic, schema=AvroSchema(Order))
    producer.send(Order(item="book", quantity=1))


def test_enforced_validation_refuses_clients_without_a_schema(
    client: pulsar.Client, server: StandaloneProcess,
) -> None:
    topic = f"persistent://{namespace_with(server, schemaValidationEnforced=True)}/orders"
    client.create_producer(topic, schema=AvroSchema(Order)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "bytes")
    client.subscribe(topic, "typed", schema=AvroSchema(Order)).close()


def test_get_or_create_schema_on_the_wire(server: StandaloneProcess) -> None:
    topic = f"persistent://{namespace_with(server)}/orders"
    v1 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "x", "type": "int"}]}).encode()
    v_long = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "x", "type": "long"}]}).encode()
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        answers = []
        for request_id, data in ((1, v1), (2, v1), (3, v_long)):
            raw.send(Command(type=Command.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pulsar_api.CommandGetOrCreateSchema(
                request_id=request_id, topic=topic,
                schema=pulsar_api.Schema(name="orders", schema_data=data, type=pulsar_api.Schema.Avro))))
            answer = raw.receive()
            assert answer.type == Command.GET_OR_CREATE_SCHEMA_RESPONSE, answer
            answers.append(answer.getOrCreateSchemaResponse)
        assert [a.schema_version for a in answers[:2]] == [bytes(8), bytes(8)]
        refused = answers[2]
        assert refused.request_id == 3 and refused.error_code == pulsar_api.IncompatibleSchema, refused
        assert "the writer's long cannot be read as int" in refused.error_message
        raw.send(Command(type=Command.GET_SCHEMA, getSchema=pulsar_api.CommandGetSchema(request_id=4, topic=topic)))
        got = raw.receive().getSchemaResponse
        assert (got.schema.schema_data, got.schema_version) == (v1, bytes(8))
