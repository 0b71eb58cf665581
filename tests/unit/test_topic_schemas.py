"""Topic schemas until a registry (broker.core.schemas), over the embedded metadata store, and their
translation to Pulsar's wire (broker.pulsar.schemas)."""

from __future__ import annotations

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.core.schemas import Schema, TopicSchemas, schema_key
from herald.broker.pulsar import schemas as wire
from herald.common.errors import IncompatibleSchemaError, InvalidArgumentError, NotFoundError
from herald.metadata.store import MetadataStore

TOPIC = "persistent://public/default/orders"
JSON = Schema("JSON", b'{"type": "record", "name": "Order"}', {"k": "v"})


async def test_the_first_schema_is_kept_and_a_different_one_refused(store: MetadataStore) -> None:
    schemas = TopicSchemas(store)
    assert await schemas.check(TOPIC, JSON) == 0
    assert await schemas.check(TOPIC, Schema("json", JSON.data)) == 0  # properties are not compared
    with pytest.raises(IncompatibleSchemaError, match=r"has schema JSON .* the STRING schema given"):
        await schemas.check(TOPIC, Schema("STRING"))
    with pytest.raises(IncompatibleSchemaError):
        await schemas.check(TOPIC, Schema("JSON", b'{"type": "record", "name": "Price"}'))
    # No schema, or the bytes schema: accepted, and no version to tell.
    assert await schemas.check(TOPIC, None) is None
    assert await schemas.check(TOPIC, Schema("BYTES")) is None
    assert await schemas.get(TOPIC) == JSON


async def test_partitions_share_their_topics_schema(store: MetadataStore) -> None:
    schemas = TopicSchemas(store)
    assert schema_key(TOPIC + "-partition-3") == schema_key(TOPIC) == "/schemas/" + TOPIC
    await schemas.check(TOPIC + "-partition-0", JSON)
    with pytest.raises(IncompatibleSchemaError):
        await schemas.check(TOPIC + "-partition-1", Schema("STRING"))
    assert await schemas.get_version(TOPIC, 0) == JSON


async def test_an_unknown_schema_or_version_is_not_found(store: MetadataStore) -> None:
    schemas = TopicSchemas(store)
    with pytest.raises(NotFoundError, match="has no schema"):
        await schemas.get_version(TOPIC, None)
    await schemas.check(TOPIC, JSON)
    with pytest.raises(NotFoundError, match="schema version 4"):
        await schemas.get_version(TOPIC, 4)


def test_pulsar_schemas_translate_both_ways() -> None:
    proto = pulsar.Schema(name="orders", schema_data=JSON.data, type=pulsar.Schema.Json)
    proto.properties.add(key="k", value="v")
    core = wire.from_wire(proto)
    assert core == JSON
    back = wire.to_wire(core, "orders")
    assert (back.name, back.type, back.schema_data) == ("orders", pulsar.Schema.Json, JSON.data)
    assert wire.from_wire(pulsar.Schema(name="", schema_data=b"", type=pulsar.Schema.ProtobufNative)).type \
        == "PROTOBUFNATIVE"


def test_schema_versions_are_big_endian_longs() -> None:
    assert wire.version_bytes(0) == bytes(8)
    assert wire.version_bytes(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert wire.version_from_bytes(b"\x00\x00\x00\x00\x00\x00\x01\x02") == 258
    with pytest.raises(InvalidArgumentError, match="8 bytes"):
        wire.version_from_bytes(b"\x01")
