"""KeyValueSchema: pairs framed as Pulsar frames them (4-byte big-endian length, -1 for None, key
then value), the KEY_VALUE schema info with Pulsar's property names, SEPARATED pairs split into a
message key and a payload, and each half read with its own schema's resolution."""

from __future__ import annotations

import dataclasses
import json

import pytest
from herald.client import AvroSchema, JsonSchema, KeyValue, KeyValueSchema, StringSchema
from herald.client.schemas import BytesSchema
from herald.client.schemas.key_value import split_info
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError
from hypothesis import given
from hypothesis import strategies as st


@dataclasses.dataclass
class Reading:
    value: float


@dataclasses.dataclass
class ReadingV2:
    value: float
    unit: str = "C"


def test_inline_pairs_are_framed_with_big_endian_lengths() -> None:
    schema = KeyValueSchema(StringSchema(), StringSchema())
    assert schema.encode(KeyValue("k", "vv")) == b"\x00\x00\x00\x01k\x00\x00\x00\x02vv"
    assert schema.encode(("k", None)) == b"\x00\x00\x00\x01k\xff\xff\xff\xff"  # a plain tuple, a None value
    assert schema.decode(b"\xff\xff\xff\xff\x00\x00\x00\x00") == KeyValue(None, "")


@given(st.none() | st.text(), st.none() | st.binary())
def test_pairs_round_trip(key: str | None, value: bytes | None) -> None:
    schema = KeyValueSchema(StringSchema(), BytesSchema())
    assert schema.decode(schema.encode(KeyValue(key, value))) == (key, value)
    separated = KeyValueSchema(StringSchema(), BytesSchema(), "SEPARATED")
    assert separated.join(*separated.split((key, value))) == (key, value)


def test_the_info_carries_both_definitions_and_pulsars_properties() -> None:
    key, value = StringSchema("latin-1"), AvroSchema(Reading)
    info = KeyValueSchema(key, value, "SEPARATED").info
    assert info is not None and info.type == "KEY_VALUE"
    assert value.info is not None
    assert info.data == b"\x00\x00\x00\x00" + len(value.info.data).to_bytes(4, "big") + value.info.data
    assert dict(info.properties) == {
        "key.schema.name": "STRING", "key.schema.type": "STRING", "key.schema.properties": '{"__charset":"latin-1"}',
        "value.schema.name": "AVRO", "value.schema.type": "AVRO", "value.schema.properties": "{}",
        "kv.encoding.type": "SEPARATED"}
    assert split_info(info) == (key.info, value.info, "SEPARATED")


def test_a_separated_schema_refuses_whole_payloads() -> None:
    schema = KeyValueSchema(StringSchema(), StringSchema(), "SEPARATED")
    assert schema.split(KeyValue("k", "v")) == (b"k", b"v")
    with pytest.raises(SchemaError, match=r"keeps the key in the message key.*does not encode"):
        schema.encode(KeyValue("k", "v"))
    with pytest.raises(SchemaError, match="does not decode"):
        schema.decode(b"")
    with pytest.raises(SchemaError, match="encoding 'BOTH' is unknown: use INLINE or SEPARATED"):
        KeyValueSchema(StringSchema(), StringSchema(), "BOTH")


def test_damaged_frames_are_refused() -> None:
    schema = KeyValueSchema(StringSchema(), StringSchema())
    with pytest.raises(SchemaError, match="no length for the value"):
        schema.decode(b"\x00\x00\x00\x01k")
    with pytest.raises(SchemaError, match="the key claims 9 bytes, 1 are left"):
        schema.decode(b"\x00\x00\x00\x09k")
    with pytest.raises(SchemaError, match="2 bytes after the value"):
        schema.decode(b"\xff\xff\xff\xff\xff\xff\xff\xffzz")
    with pytest.raises(SchemaError, match="sends KeyValue"):
        schema.encode("k")  # type: ignore[arg-type]


def test_each_half_reads_by_its_own_schemas_resolution() -> None:
    old = KeyValueSchema(StringSchema(), AvroSchema(Reading))
    new = KeyValueSchema(StringSchema(), AvroSchema(ReadingV2))
    assert old.info is not None and new.info is not None
    _, value_info, _ = split_info(old.info)
    definition = json.loads(value_info.data)
    definition["name"] = "ReadingV2"  # one record's versions share its name
    writer = KeyValueSchema(StringSchema(), AvroSchema[dict[str, float]](definition=definition)).info
    assert writer is not None
    read = new.reader_for(writer)
    assert new.reader_for(writer) is read  # made once per writer
    assert read(old.encode(KeyValue("t1", Reading(20.5)))) == KeyValue("t1", ReadingV2(20.5, "C"))
    assert new.reader_for(new.info) == new.decode


def test_a_json_value_half() -> None:
    schema = KeyValueSchema(StringSchema(), JsonSchema(Reading))
    assert schema.decode(schema.encode(KeyValue("a", Reading(1.0)))) == ("a", Reading(1.0))
    assert split_info(schema.info)[1].type == "JSON"  # type: ignore[arg-type]


def test_a_schema_info_of_no_schema_is_bytes() -> None:
    info = KeyValueSchema().info
    assert info is not None and info.properties["key.schema.type"] == "BYTES"
    assert split_info(SchemaInfo("KEY_VALUE", info.data))[0] == SchemaInfo("BYTES")
