"""Pulsar-style Record classes: fields declared as class attributes, values checked when set,
Pulsar's defaults (None, False for Boolean), nested records from dicts, and the Avro definition
with Pulsar's nullability rules; values round-trip through AvroSchema and JsonSchema."""

from __future__ import annotations

import enum
import json

import pytest
from herald.client import AvroSchema, JsonSchema
from herald.client.schemas import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Float,
    Integer,
    Long,
    Map,
    Record,
    String,
)
from herald.common.errors import SchemaError


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Tag(Record):
    label = String(required=True)


class Profile(Record):
    _avro_namespace = "com.example"
    name = String(required=True)
    age = Integer()
    visits = Long(default=0, required_default=True)
    score = Float()
    ratio = Double()
    active = Boolean()
    avatar = Bytes()
    color = Color
    shade = CustomEnum(Color, default=Color.GREEN, required_default=True)
    tags = Array(Tag())
    counts = Map(Long())
    best = Tag


def test_fields_take_their_defaults_and_are_checked_when_set() -> None:
    profile = Profile(name="ada")
    assert (profile.age, profile.visits, profile.active, profile.shade, profile.tags) == (None, 0, False, Color.GREEN,
                                                                                         None)
    profile.age = 36
    profile.color = "RED"  # an Enum field takes a member's name or value too
    assert profile.color is Color.RED
    with pytest.raises(SchemaError, match="field 'age' takes int values, got str"):
        profile.age = "old"
    with pytest.raises(SchemaError, match="field 'active' takes bool values"):
        Profile(active="yes")
    with pytest.raises(SchemaError, match="field 'age' takes int values, got bool"):
        profile.age = True
    with pytest.raises(AttributeError, match="Profile has no field 'nick'"):
        profile.nick = "x"
    with pytest.raises(SchemaError, match="Profile has no field 'nick'"):
        Profile(nick="x")
    with pytest.raises(SchemaError, match="array field 'tags' takes Tag items, got int"):
        Profile(tags=[1])


def test_nested_records_are_built_from_dicts_and_compare_by_value() -> None:
    profile = Profile(name="ada", tags=[{"label": "a"}], best={"label": "b"}, counts={"x": 1})
    assert profile.tags == [Tag(label="a")] and profile.best == Tag(label="b")
    assert profile == Profile(name="ada", tags=[Tag(label="a")], best=Tag(label="b"), counts={"x": 1})
    assert profile != Profile(name="bob")
    assert "Profile(name='ada'" in repr(profile)


def test_the_definition_follows_pulsars_nullability_and_default_rules() -> None:
    definition = json.loads(AvroSchema(Profile).info.data)  # type: ignore[union-attr]
    assert (definition["name"], definition["namespace"]) == ("Profile", "com.example")
    fields = {field["name"]: field for field in definition["fields"]}
    assert list(fields) == ["name", "age", "visits", "score", "ratio", "active", "avatar", "color", "shade", "tags",
                            "counts", "best"]
    assert fields["name"] == {"name": "name", "type": "string"}  # required: no null
    assert fields["age"] == {"name": "age", "type": ["null", "int"]}  # not required: null first, no default
    assert fields["visits"] == {"name": "visits", "default": 0, "type": ["null", "long"]}
    assert fields["shade"] == {"name": "shade", "default": "GREEN", "type": ["null", "Color"]}  # named once
    assert fields["tags"]["type"][1] == {"type": "array", "items": {
        "type": "record", "name": "Tag", "fields": [{"name": "label", "type": "string"}]}}
    assert fields["best"]["type"] == ["null", "Tag"]


def test_sorted_fields_sort_the_definition() -> None:
    class Sorted(Record):
        _sorted_fields = True
        b = String()
        a = String()

    assert [f["name"] for f in Sorted.schema()["fields"]] == ["a", "b"]


@pytest.mark.parametrize("schema_class", [AvroSchema, JsonSchema])
def test_records_round_trip(schema_class: type[AvroSchema[Profile]]) -> None:
    schema = schema_class(Profile)
    profile = Profile(name="ada", age=36, score=1.5, ratio=0.25, active=True, avatar=b"\x01", color=Color.RED,
                      tags=[Tag(label="x")], counts={"a": 2}, best=Tag(label="y"))
    assert schema.decode(schema.encode(profile)) == profile
    empty = Profile(name="min")
    assert schema.decode(schema.encode(empty)) == empty


def test_a_container_needs_a_field_or_record() -> None:
    with pytest.raises(SchemaError, match="Array takes a Field or a Record"):
        Array(int)
    with pytest.raises(SchemaError, match="CustomEnum takes an Enum class"):
        CustomEnum(int)  # type: ignore[arg-type]
