"""AvroSchema and JsonSchema from a dataclass: the definition its type hints give, values that
round-trip in Avro binary and JSON text, values and data of the wrong shape refused with the field
named, and messages written with another version of the schema read by Avro's resolution rules."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest
from herald.client import AvroSchema, JsonSchema
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError
from hypothesis import given
from hypothesis import strategies as st


class Status(enum.Enum):
    NEW = "n"
    PAID = "p"


@dataclasses.dataclass
class Address:
    street: str
    number: int | None = None


@dataclasses.dataclass
class Order:
    id: int
    total: float
    paid: bool
    note: str | None
    status: Status = Status.NEW
    items: list[str] = dataclasses.field(default_factory=list)
    prices: dict[str, float] = dataclasses.field(default_factory=dict)
    address: Address | None = None
    blob: bytes = b""


@dataclasses.dataclass
class OrderV1:
    id: int
    total: float


@dataclasses.dataclass
class OrderV2:  # OrderV1 plus a field with a default: BACKWARD compatible
    id: int
    total: float
    currency: str = "EUR"


@dataclasses.dataclass
class OrderV3:  # a new field without a default: a reader of it cannot read OrderV1's messages
    id: int
    total: float
    customer: str


def _rename(schema: AvroSchema[Any] | JsonSchema[Any], name: str) -> SchemaInfo:
    """The schema's info with the record renamed (versions of one record share its name)."""
    assert schema.info is not None
    definition = json.loads(schema.info.data)
    definition["name"] = name
    return SchemaInfo(schema.info.type, json.dumps(definition).encode())


def test_a_dataclass_gives_the_avro_definition_of_its_type_hints() -> None:
    info = AvroSchema(Order).info
    assert info is not None and info.type == "AVRO" and dict(info.properties) == {}
    definition = json.loads(info.data)
    assert definition["type"] == "record" and definition["name"] == "Order"
    fields = {field["name"]: field for field in definition["fields"]}
    assert list(fields) == ["id", "total", "paid", "note", "status", "items", "prices", "address", "blob"]
    assert fields["id"]["type"] == "long" and fields["total"]["type"] == "double"
    assert fields["paid"]["type"] == "boolean"
    assert fields["note"] == {"name": "note", "type": ["null", "string"], "default": None}
    assert fields["status"]["type"] == {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}
    assert fields["status"]["default"] == "NEW"
    assert fields["items"] == {"name": "items", "type": {"type": "array", "items": "string"}, "default": []}
    assert fields["prices"]["type"] == {"type": "map", "values": "double"}
    assert fields["address"]["type"][0] == "null" and fields["address"]["type"][1]["name"] == "Address"
    assert fields["blob"] == {"name": "blob", "type": "bytes", "default": ""}
    assert "default" not in fields["id"]


def test_an_optional_field_with_a_default_puts_null_second() -> None:
    @dataclasses.dataclass
    class Item:
        label: str | None = "none"

    Item.__module__ = __name__
    definition = json.loads(AvroSchema(Item).info.data)  # type: ignore[union-attr]
    assert definition["fields"][0] == {"name": "label", "type": ["string", "null"], "default": "none"}


def test_the_definition_bytes_are_what_pulsar_client_sends() -> None:
    info = AvroSchema(OrderV1).info
    assert info is not None
    assert info.data == json.dumps(json.loads(info.data), indent=True).encode()


@pytest.mark.parametrize("hint", [Any, set[int], dict[int, str], int | str | None, complex])
def test_a_type_hint_with_no_avro_form_is_refused_naming_the_field(hint: Any) -> None:
    record = dataclasses.make_dataclass("Odd", [("value", hint)])
    with pytest.raises(SchemaError, match=r"Odd.value: "):
        AvroSchema(record)


def test_a_record_must_be_a_dataclass_or_a_record() -> None:
    with pytest.raises(SchemaError, match=r"must be a dataclass or a herald.client.schemas.Record"):
        AvroSchema(dict)
    with pytest.raises(SchemaError, match="needs a record class"):
        AvroSchema()


addresses = st.builds(Address, st.text(), st.none() | st.integers(-2**63, 2**63 - 1))
orders = st.builds(
    Order, id=st.integers(-2**63, 2**63 - 1), total=st.floats(allow_nan=False), paid=st.booleans(),
    note=st.none() | st.text(), status=st.sampled_from(Status), items=st.lists(st.text(), max_size=4),
    prices=st.dictionaries(st.text(), st.floats(allow_nan=False), max_size=4), address=st.none() | addresses,
    blob=st.binary(max_size=16))


@given(orders)
def test_avro_values_round_trip(order: Order) -> None:
    schema = AvroSchema(Order)
    assert schema.decode(schema.encode(order)) == order


@given(orders)
def test_json_values_round_trip(order: Order) -> None:
    schema = JsonSchema(Order)
    assert schema.decode(schema.encode(order)) == order


def test_json_documents_carry_enum_names_and_base64_bytes() -> None:
    order = Order(1, 2.5, False, None, Status.PAID, blob=b"\x00\x01")
    document = json.loads(JsonSchema(Order).encode(order))
    assert document["status"] == "PAID" and document["blob"] == "AAE="


def test_a_value_of_the_wrong_shape_is_refused_with_its_path() -> None:
    bad = Order(1, 2.0, True, None, items=["a", 3])  # type: ignore[list-item]
    with pytest.raises(SchemaError, match=r"Order\.items\[1\]: expected string, got int 3"):
        AvroSchema(Order).encode(bad)
    with pytest.raises(SchemaError, match=r"Order\.items\[1\]: expected string, got int 3"):
        JsonSchema(Order).encode(bad)
    with pytest.raises(SchemaError, match=r"Order\.id: expected long \(a 64-bit integer\), got bool"):
        AvroSchema(Order).encode(Order(True, 2.0, True, None))
    with pytest.raises(SchemaError, match=r"Order.id: expected long"):
        AvroSchema(Order).encode(Order(2**63, 2.0, True, None))
    with pytest.raises(SchemaError, match=r"expected record Order \(Order\), got OrderV1"):
        AvroSchema(Order).encode(OrderV1(1, 2.0))  # type: ignore[arg-type]


def test_data_that_does_not_decode_is_refused() -> None:
    with pytest.raises(SchemaError, match=r"does not decode with AvroSchema\(Order\)"):
        AvroSchema(Order).decode(b"\x02")
    with pytest.raises(SchemaError, match=r"Order.status: expected enum Status \(one of NEW, PAID\), got str 'GONE'"):
        JsonSchema(Order).decode(b'{"id": 1, "total": 1, "paid": true, "note": null, "status": "GONE"}')
    with pytest.raises(SchemaError, match=r"Order.paid: expected a value \(the field has no default\)"):
        JsonSchema(Order).decode(b'{"id": 1, "total": 1}')


def test_a_schema_from_a_definition_takes_and_gives_dicts() -> None:
    definition = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"},
                                                              {"name": "y", "type": "int", "default": 0}]}
    avro: AvroSchema[dict[str, int]] = AvroSchema(definition=definition)
    assert avro.decode(avro.encode({"x": 1, "y": 2})) == {"x": 1, "y": 2}
    assert avro.decode(avro.encode({"x": 1})) == {"x": 1, "y": 0}  # a missing field takes its default
    assert AvroSchema[Any](definition=json.dumps(definition)).info == avro.info.__class__(  # type: ignore[union-attr]
        "AVRO", json.dumps(definition).encode())
    with pytest.raises(SchemaError, match=r"Point.x: expected int \(a 32-bit integer\), got int 4294967296"):
        avro.encode({"x": 2**32})
    with pytest.raises(SchemaError, match="not a valid Avro definition"):
        AvroSchema(definition={"type": "record", "name": "Bad", "fields": [{"name": "x", "type": "nope"}]})


def test_an_old_message_reads_with_a_newer_schema_by_avro_resolution() -> None:
    old, new = AvroSchema(OrderV1), AvroSchema(OrderV2)
    message = old.encode(OrderV1(7, 9.5))
    read = new.reader_for(_rename(old, "OrderV2"))
    assert read(message) == OrderV2(7, 9.5, "EUR")  # the field it lacked takes the reader's default
    # And a newer message reads with the older schema: the field it does not know is skipped.
    assert old.reader_for(_rename(new, "OrderV1"))(new.encode(OrderV2(8, 1.0, "USD"))) == OrderV1(8, 1.0)


def test_a_writer_that_does_not_resolve_is_a_schema_error_when_read() -> None:
    message = AvroSchema(OrderV1).encode(OrderV1(7, 9.5))
    read = AvroSchema(OrderV3).reader_for(_rename(AvroSchema(OrderV1), "OrderV3"))
    with pytest.raises(SchemaError, match=r"another version of the schema does not decode with AvroSchema\(OrderV3\)"):
        read(message)


def test_readers_are_made_once_per_writer_and_the_same_schema_decodes_directly() -> None:
    schema = AvroSchema(OrderV2)
    writer = _rename(AvroSchema(OrderV1), "OrderV2")
    assert schema.reader_for(writer) is schema.reader_for(writer)
    assert schema.reader_for(schema.info) == schema.decode  # type: ignore[arg-type]


def test_json_reads_documents_of_other_versions_by_defaults_and_skipping() -> None:
    new = JsonSchema(OrderV2)
    read = new.reader_for(_rename(JsonSchema(OrderV1), "OrderV2"))
    assert read(JsonSchema(OrderV1).encode(OrderV1(1, 2.0))) == OrderV2(1, 2.0, "EUR")
    assert JsonSchema(OrderV1).decode(new.encode(OrderV2(1, 2.0, "USD"))) == OrderV1(1, 2.0)


def test_untyped_json_registers_nothing_and_typed_json_registers_its_definition() -> None:
    assert JsonSchema().info is None
    info = JsonSchema(OrderV1).info
    assert info is not None and info.type == "JSON"
    assert info.data == AvroSchema(OrderV1).info.data  # type: ignore[union-attr]
