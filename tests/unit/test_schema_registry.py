"""The schema registry (broker.core.schema_registry over broker.core.schemas' storage), over the
embedded metadata store with the real policies (namespace and topic policies in the store, the
broker's defaults), and schemas' translation to Pulsar's wire (broker.pulsar.schemas)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.core.policies import PolicyResolver
from herald.broker.core.schema_registry import SchemaRegistry
from herald.broker.core.schemas import SchemaStorage, schema_key
from herald.broker.pulsar import schemas as wire
from herald.broker.settings import BrokerSettings
from herald.common.codec.schema_info import SchemaInfo as Schema
from herald.common.errors import IncompatibleSchemaError, InvalidArgumentError, NotFoundError
from herald.metadata.policies import Policies
from herald.metadata.resources import Resources
from herald.metadata.store import MetadataStore

TOPIC = "persistent://public/default/orders"
JSON = Schema("JSON", b'{"type": "record", "name": "Order"}', {"k": "v"})  # not Avro: compared by bytes


def avro(fields: list[dict[str, Any]], kind: str = "AVRO") -> Schema:
    return Schema(kind, json.dumps({"type": "record", "name": "Order", "fields": fields}).encode())


X = {"name": "x", "type": "int"}
V1 = avro([X])
V2 = avro([X, {"name": "y", "type": "string", "default": ""}])  # BACKWARD and FORWARD of V1
V_REQUIRED = avro([X, {"name": "z", "type": "string"}])  # FORWARD only
V_LONG = avro([{"name": "x", "type": "long"}])  # BACKWARD only


@pytest.fixture
async def resources(store: MetadataStore) -> Resources:
    made = Resources(store)
    await made.ensure_default_namespace()
    return made


@pytest.fixture
def registry(store: MetadataStore, resources: Resources) -> SchemaRegistry:
    return SchemaRegistry(store, PolicyResolver(resources, BrokerSettings()))


async def set_policies(resources: Resources, policies: Policies, topic: str | None = None) -> None:
    if topic is None:
        await resources.set_namespace_policies("public/default", policies)
    else:
        await resources.set_topic_policies(topic, policies)


async def test_producers_get_versions_and_compatible_schemas_are_added(registry: SchemaRegistry) -> None:
    assert await registry.register_producer(TOPIC, V1) == 0
    assert await registry.register_producer(TOPIC, V1) == 0
    assert await registry.register_producer(TOPIC, V2) == 1  # FULL (the default): compatible both ways
    assert await registry.register_producer(TOPIC, V1) == 0  # an old version: no check, its number
    assert await registry.history(TOPIC) == [(0, V1), (1, V2)]
    assert await registry.get(TOPIC) == (1, V2)
    assert await registry.get(TOPIC, 0) == (0, V1)
    # No schema, or the bytes schema: accepted, and no version to tell.
    assert await registry.register_producer(TOPIC, None) is None
    assert await registry.register_producer(TOPIC, Schema("BYTES")) is None


async def test_an_incompatible_producer_is_refused_with_the_reason(registry: SchemaRegistry) -> None:
    await registry.register_producer(TOPIC, V1)
    with pytest.raises(IncompatibleSchemaError, match=r"FULL: data written with the new schema cannot be read with "
                                                      r"version 0: field x: the writer's long cannot be read as int"):
        await registry.register_producer(TOPIC, V_LONG)
    with pytest.raises(IncompatibleSchemaError, match="data of type AVRO cannot be read with a schema of type STRING"):
        await registry.register_producer(TOPIC, Schema("STRING"))
    assert await registry.history(TOPIC) == [(0, V1)]


async def test_the_strategy_comes_from_topic_then_namespace_then_broker(
    registry: SchemaRegistry, resources: Resources,
) -> None:
    await registry.register_producer(TOPIC, V1)
    await set_policies(resources, Policies(schema_compatibility_strategy="BACKWARD"))
    assert (await registry.policies(TOPIC)).strategy == "BACKWARD"
    with pytest.raises(IncompatibleSchemaError, match="BACKWARD: the new schema cannot read"):
        await registry.register_producer(TOPIC, V_REQUIRED)
    assert await registry.register_producer(TOPIC, V_LONG) == 1
    # A topic's own strategy wins; UNDEFINED at the topic falls to the namespace's.
    await set_policies(resources, Policies(schema_compatibility_strategy="FORWARD"), TOPIC)
    assert (await registry.policies(TOPIC + "-partition-2")).strategy == "FORWARD"
    await set_policies(resources, Policies(schema_compatibility_strategy="UNDEFINED"), TOPIC)
    assert (await registry.policies(TOPIC)).strategy == "BACKWARD"
    await set_policies(resources, Policies(schema_compatibility_strategy="UNDEFINED"))
    assert (await registry.policies(TOPIC)).strategy == "FULL"


async def test_without_auto_update_only_an_admin_adds_versions(registry: SchemaRegistry, resources: Resources) -> None:
    await set_policies(resources, Policies(is_allow_auto_update_schema=False))
    with pytest.raises(IncompatibleSchemaError, match="is_allow_auto_update_schema is off: an admin must upload"):
        await registry.register_producer(TOPIC, V1)
    with pytest.raises(IncompatibleSchemaError, match="is_allow_auto_update_schema is off"):
        await registry.check_consumer(TOPIC, V1)
    assert await registry.upload(TOPIC, V1) == 0
    assert await registry.register_producer(TOPIC, V1) == 0
    with pytest.raises(IncompatibleSchemaError, match="an admin must upload"):
        await registry.register_producer(TOPIC, V2)
    # The admin's upload is checked by the strategy all the same.
    with pytest.raises(IncompatibleSchemaError, match="FULL"):
        await registry.upload(TOPIC, V_LONG)
    assert await registry.upload(TOPIC, V2) == 1
    assert await registry.upload(TOPIC, V2) == 1  # the same again: its version


async def test_enforced_validation_refuses_producers_and_consumers_without_a_schema(
    registry: SchemaRegistry, resources: Resources,
) -> None:
    await set_policies(resources, Policies(schema_validation_enforced=True))
    assert await registry.register_producer(TOPIC, None) is None  # no schema yet: nothing to enforce
    await registry.register_producer(TOPIC, V1)
    for call in (lambda: registry.register_producer(TOPIC, None),
                 lambda: registry.register_producer(TOPIC, Schema("BYTES")),
                 lambda: registry.check_consumer(TOPIC, None)):
        with pytest.raises(IncompatibleSchemaError, match="schema_validation_enforced is on"):
            await call()
    await registry.check_consumer(TOPIC, Schema("AUTO_CONSUME"))  # reads whatever was written


async def test_consumers_must_read_the_topics_data(registry: SchemaRegistry, resources: Resources) -> None:
    await registry.check_consumer(TOPIC, V1)  # a topic without a schema takes the consumer's
    assert await registry.history(TOPIC) == [(0, V1)]
    await registry.check_consumer(TOPIC, avro([{"name": "x", "type": "int", "doc": "the same"}]))
    await registry.check_consumer(TOPIC, V_LONG)  # long reads int
    with pytest.raises(IncompatibleSchemaError, match="the consumer's schema cannot read data written with the "
                                                      "topic's version 0"):
        await registry.check_consumer(TOPIC, V_REQUIRED)
    with pytest.raises(IncompatibleSchemaError):
        await registry.check_consumer(TOPIC, Schema("STRING"))
    await registry.check_consumer(TOPIC, None)
    await registry.check_consumer(TOPIC, Schema("AUTO_CONSUME"))
    assert await registry.history(TOPIC) == [(0, V1)]  # consumers add nothing to a typed topic
    # BACKWARD_TRANSITIVE: against every version.
    await set_policies(resources, Policies(schema_compatibility_strategy="ALWAYS_COMPATIBLE"))
    await registry.register_producer(TOPIC, Schema("AVRO", json.dumps(
        {"type": "record", "name": "Order", "fields": [{"name": "x", "type": "string"}]}).encode()))
    await registry.check_consumer(TOPIC, Schema("AVRO", json.dumps(
        {"type": "record", "name": "Order", "fields": [{"name": "x", "type": "bytes"}]}).encode()))
    await set_policies(resources, Policies(schema_compatibility_strategy="BACKWARD_TRANSITIVE"))
    with pytest.raises(IncompatibleSchemaError, match="version 0"):
        await registry.check_consumer(TOPIC, Schema("AVRO", json.dumps(
            {"type": "record", "name": "Order", "fields": [{"name": "x", "type": "bytes"}]}).encode()))


async def test_auto_types_are_never_stored(registry: SchemaRegistry) -> None:
    assert await registry.register_producer(TOPIC, Schema("AUTO_PRODUCE_BYTES")) is None
    await registry.check_consumer(TOPIC, Schema("AUTO_CONSUME"))
    assert await registry.history(TOPIC) == []
    for call in (lambda: registry.upload(TOPIC, Schema("AUTO_CONSUME")),
                 lambda: registry.get_or_create(TOPIC, Schema("BYTES"))):
        with pytest.raises(InvalidArgumentError, match="schema"):
            await call()


async def test_deleting_starts_a_new_lineage_numbered_on(registry: SchemaRegistry) -> None:
    assert await registry.delete(TOPIC) is None
    await registry.register_producer(TOPIC, V1)
    await registry.register_producer(TOPIC, V2)
    assert await registry.delete(TOPIC) == 1
    with pytest.raises(NotFoundError, match="has no schema"):
        await registry.get(TOPIC)
    assert await registry.history(TOPIC) == []
    assert await registry.get(TOPIC, 1) == (1, V2)  # old messages' versions stay readable by number
    # Anything goes now (a new lineage); numbering continues.
    assert await registry.register_producer(TOPIC, Schema("STRING")) == 2
    with pytest.raises(IncompatibleSchemaError, match="version 2"):  # checked against the new lineage only
        await registry.register_producer(TOPIC, V1)
    assert await registry.history(TOPIC) == [(2, Schema("STRING"))]


async def test_removing_forgets_the_numbering_too(registry: SchemaRegistry) -> None:
    await registry.register_producer(TOPIC, V1)
    await registry.remove(TOPIC)
    assert await registry.register_producer(TOPIC, Schema("STRING")) == 0


async def test_concurrent_registrations_get_distinct_versions(registry: SchemaRegistry, resources: Resources) -> None:
    await set_policies(resources, Policies(schema_compatibility_strategy="ALWAYS_COMPATIBLE"))
    schemas = [Schema("JSON", f"not avro {i}".encode()) for i in range(8)]  # distinct by their data
    versions = await asyncio.gather(*(registry.register_producer(TOPIC, s) for s in schemas))
    assert sorted(v for v in versions if v is not None) == list(range(8))
    assert {v: s for v, s in await registry.history(TOPIC)} == dict(zip(versions, schemas, strict=True))


async def test_test_says_why_an_upload_would_be_refused(registry: SchemaRegistry) -> None:
    assert await registry.test(TOPIC, V1) is None
    await registry.upload(TOPIC, V1)
    assert await registry.test(TOPIC, V1) is None
    reason = await registry.test(TOPIC, V_LONG)
    assert reason is not None and "FULL" in reason
    assert "not a valid Avro schema" in (await registry.test(TOPIC, Schema("AVRO", b"{}")) or "")
    assert "cannot be uploaded" in (await registry.test(TOPIC, Schema("BYTES")) or "")
    assert await registry.history(TOPIC) == [(0, V1)]  # testing stores nothing


async def test_get_or_create_adds_like_a_producer(registry: SchemaRegistry) -> None:
    assert await registry.get_or_create(TOPIC, V1) == 0
    assert await registry.get_or_create(TOPIC, V2) == 1
    with pytest.raises(IncompatibleSchemaError):
        await registry.get_or_create(TOPIC, V_LONG)


async def test_an_invalid_definition_is_refused_before_it_is_stored(registry: SchemaRegistry) -> None:
    with pytest.raises(InvalidArgumentError, match="not a valid Avro schema"):
        await registry.register_producer(TOPIC, Schema("AVRO", b'{"type": "record"}'))
    assert await registry.history(TOPIC) == []


async def test_the_first_schema_kept_before_the_registry_reads_as_version_0(
    registry: SchemaRegistry, store: MetadataStore,
) -> None:
    await store.put(schema_key(TOPIC), JSON.to_json())  # the pre-registry record: one schema
    assert await registry.get(TOPIC) == (0, JSON)
    assert await registry.register_producer(TOPIC, Schema("json", JSON.data)) == 0  # properties are not compared
    with pytest.raises(IncompatibleSchemaError):
        await registry.register_producer(TOPIC, Schema("JSON", b'{"type": "record", "name": "Price"}'))
    assert (await SchemaStorage(store).read(TOPIC)).next_version == 1


async def test_partitions_share_their_topics_schema(registry: SchemaRegistry) -> None:
    assert schema_key(TOPIC + "-partition-3") == schema_key(TOPIC) == "/schemas/" + TOPIC
    await registry.register_producer(TOPIC + "-partition-0", JSON)
    with pytest.raises(IncompatibleSchemaError):
        await registry.register_producer(TOPIC + "-partition-1", Schema("STRING"))
    assert await registry.get(TOPIC, 0) == (0, JSON)


async def test_an_unknown_schema_or_version_is_not_found(registry: SchemaRegistry) -> None:
    with pytest.raises(NotFoundError, match="has no schema"):
        await registry.get(TOPIC, None)
    await registry.register_producer(TOPIC, JSON)
    with pytest.raises(NotFoundError, match="schema version 4"):
        await registry.get(TOPIC, 4)


def test_pulsar_schemas_translate_both_ways() -> None:
    proto = pulsar.Schema(name="orders", schema_data=JSON.data, type=pulsar.Schema.Json)
    proto.properties.add(key="k", value="v")
    core = wire.from_wire(proto)
    assert core == JSON
    back = wire.to_wire(core, "orders")
    assert (back.name, back.type, back.schema_data) == ("orders", pulsar.Schema.Json, JSON.data)
    # Pulsar's SchemaType names (the wire enum's are CamelCase).
    for number, name in ((pulsar.Schema.ProtobufNative, "PROTOBUF_NATIVE"), (pulsar.Schema.KeyValue, "KEY_VALUE"),
                         (pulsar.Schema.LocalDateTime, "LOCAL_DATE_TIME"), (pulsar.Schema.Int8, "INT8")):
        assert wire.from_wire(pulsar.Schema(name="", schema_data=b"", type=number)).type == name  # type: ignore[arg-type]
        assert wire.to_wire(Schema(name), "t").type == number


def test_schema_versions_are_big_endian_longs() -> None:
    assert wire.version_bytes(0) == bytes(8)
    assert wire.version_bytes(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert wire.version_from_bytes(b"\x00\x00\x00\x00\x00\x00\x01\x02") == 258
    with pytest.raises(InvalidArgumentError, match="8 bytes"):
        wire.version_from_bytes(b"\x01")
