"""Schemas: bytes pass as they are, str and JSON values round-trip, and a value of the wrong kind
or data that does not decode fails with a SchemaError that says what was wrong."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from herald.client.schema import BYTES, BytesSchema, JsonSchema, Schema, StringSchema
from herald.common.errors import InvalidArgumentError, SchemaError
from hypothesis import given
from hypothesis import strategies as st


@dataclasses.dataclass
class Order:
    id: int
    total: float
    items: list[str] = dataclasses.field(default_factory=list)


def test_bytes_pass_through_untouched() -> None:
    value = b"raw"
    assert BYTES.encode(value) is value
    assert BYTES.decode(value) is value
    assert BytesSchema().encode(bytearray(b"ba")) == b"ba"  # type: ignore[arg-type]
    assert BytesSchema().encode(memoryview(b"mv")) == b"mv"  # type: ignore[arg-type]


def test_bytes_schema_refuses_other_values_and_names_the_fix() -> None:
    with pytest.raises(SchemaError, match="must be bytes, got str: give the producer a schema"):
        BYTES.encode("text")  # type: ignore[arg-type]


@given(st.text())
def test_strings_round_trip(text: str) -> None:
    schema = StringSchema()
    assert schema.decode(schema.encode(text)) == text


def test_string_schema_takes_an_encoding() -> None:
    schema = StringSchema("latin-1")
    assert schema.encode("é") == b"\xe9"
    assert schema.decode(b"\xe9") == "é"
    assert repr(schema) == "StringSchema('latin-1')"


def test_string_schema_refuses_an_unknown_encoding_when_made() -> None:
    with pytest.raises(LookupError):
        StringSchema("no-such-encoding")


def test_string_schema_refuses_non_strings_and_undecodable_bytes() -> None:
    with pytest.raises(SchemaError, match="StringSchema sends str values, got bytes"):
        StringSchema().encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="message is not utf-8 text"):
        StringSchema().decode(b"\xff\xfe")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children), max_leaves=10)


@given(json_values)
def test_json_values_round_trip(value: object) -> None:
    schema: JsonSchema[object] = JsonSchema()
    assert schema.decode(schema.encode(value)) == value


def test_json_encoding_is_compact_utf8() -> None:
    assert JsonSchema[Any]().encode({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()


def test_json_record_round_trips_a_dataclass() -> None:
    schema = JsonSchema(Order)
    order = Order(1, 9.5, ["x"])
    assert schema.encode(order) == b'{"id":1,"total":9.5,"items":["x"]}'
    assert schema.decode(schema.encode(order)) == order
    assert repr(schema) == "JsonSchema(Order)"


def test_json_record_must_be_a_dataclass() -> None:
    with pytest.raises(SchemaError, match="record must be a dataclass"):
        JsonSchema(dict)


def test_json_schema_refuses_values_it_cannot_send() -> None:
    with pytest.raises(SchemaError, match="JsonSchema\\(Order\\) sends Order values, got dict"):
        JsonSchema(Order).encode({"id": 1})  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="value cannot be sent as JSON"):
        JsonSchema[Any]().encode({1, 2})


def test_json_schema_refuses_data_that_does_not_decode() -> None:
    with pytest.raises(SchemaError, match="does not decode"):
        JsonSchema().decode(b"{not json")
    with pytest.raises(SchemaError, match="does not decode"):
        JsonSchema(Order).decode(b'{"unknown": 1}')


def test_schema_errors_are_invalid_arguments() -> None:
    assert issubclass(SchemaError, InvalidArgumentError)


def test_any_object_with_encode_and_decode_can_be_a_schema() -> None:
    class Upper(Schema[str]):
        def encode(self, value: str) -> bytes:
            return value.upper().encode()

        def decode(self, data: bytes) -> str:
            return data.decode().lower()

    schema = Upper()
    assert schema.decode(schema.encode("abc")) == "abc"
    assert repr(schema) == "Upper()"
