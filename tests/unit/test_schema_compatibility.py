"""Schema compatibility (broker.core.schema_compatibility, broker.core.schema_resolution), pure
functions. The Avro resolution check is proved against fastavro itself: for every accepted
(writer, reader) pair fastavro reads the writer's data with the reader's schema; for every refused
pair there is a datum it cannot read (the table's cases name one; the property test finds one among
data covering every symbol and branch)."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError
from herald.broker.core import schema_compatibility as compat
from herald.broker.core import schema_resolution as resolution
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import InvalidArgumentError
from hypothesis import given, settings
from hypothesis import strategies as st


def record(fields: list[dict[str, Any]], name: str = "Order", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": fields, **extra}


def avro(schema: dict[str, Any] | str, kind: str = "AVRO") -> SchemaInfo:
    return SchemaInfo(kind, json.dumps(schema).encode())


def fastavro_reads(writer: Any, reader: Any, datum: Any) -> bool:
    """Whether fastavro reads `datum`, written with `writer`, with `reader`."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(writer), datum)
    buffer.seek(0)
    try:
        fastavro.schemaless_reader(buffer, fastavro.parse_schema(writer), fastavro.parse_schema(reader))
    except (SchemaResolutionError, KeyError, ValueError, TypeError):
        return False
    return True


COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
COLOR_MORE = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
COLOR_DEFAULT = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "OTHER"], "default": "OTHER"}
X = {"name": "x", "type": "int"}

# (case, writer, reader, a datum written with writer, whether the reader can read every writer datum)
# The Avro specification's "Schema Resolution" cases; for refused ones the datum is one that fails.
CASES: list[tuple[str, Any, Any, Any, bool]] = [
    ("identical", record([X]), record([X]), {"x": 1}, True),
    ("reader adds a field with a default", record([X]), record([X, {"name": "y", "type": "string", "default": "?"}]),
     {"x": 1}, True),
    ("reader adds a field without a default", record([X]), record([X, {"name": "y", "type": "string"}]),
     {"x": 1}, False),
    ("reader drops a field", record([X, {"name": "y", "type": "string"}]), record([X]), {"x": 1, "y": "a"}, True),
    ("field renamed, reader alias", record([X]), record([{"name": "z", "type": "int", "aliases": ["x"]}]),
     {"x": 1}, True),
    ("field renamed, no alias", record([X]), record([{"name": "z", "type": "int"}]), {"x": 1}, False),
    ("int -> long", record([X]), record([{"name": "x", "type": "long"}]), {"x": 1}, True),
    ("int -> float", record([X]), record([{"name": "x", "type": "float"}]), {"x": 1}, True),
    ("int -> double", record([X]), record([{"name": "x", "type": "double"}]), {"x": 1}, True),
    ("long -> double", "long", "double", 5, True),
    ("long -> float", "long", "float", 5, True),
    ("float -> double", "float", "double", 1.5, True),
    ("string -> bytes", "string", "bytes", "a", True),
    ("bytes -> string", "bytes", "string", b"a", True),
    ("long -> int", record([{"name": "x", "type": "long"}]), record([X]), {"x": 1}, False),
    ("double -> float", "double", "float", 1.5, False),
    ("int -> string", record([X]), record([{"name": "x", "type": "string"}]), {"x": 1}, False),
    ("boolean -> int", "boolean", "int", True, False),
    ("enum symbol added by the reader", COLOR, COLOR_MORE, "GREEN", True),
    ("enum symbol the reader lacks", COLOR_MORE, COLOR, "BLUE", False),
    ("enum symbol the reader lacks, reader default", COLOR_MORE, COLOR_DEFAULT, "BLUE", True),
    ("enum renamed", COLOR, {**COLOR, "name": "Colour"}, "RED", False),
    ("enum renamed, reader alias", COLOR, {**COLOR, "name": "Colour", "aliases": ["Color"]}, "RED", True),
    ("record renamed", record([X]), record([X], name="Invoice"), {"x": 1}, False),
    ("record renamed, reader alias", record([X]), record([X], name="Invoice", aliases=["shop.Order"]),
     {"x": 1}, True),
    ("fixed same size", {"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 4},
     b"abcd", True),
    ("fixed other size", {"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8},
     b"abcd", False),
    ("int read as a union with int", "int", ["null", "int"], 3, True),
    ("int read as a union with long only", "int", ["null", "long"], 3, True),
    ("int read as a union without int", "int", ["null", "string"], 3, False),
    ("union read as one of its branches", ["null", "int"], "int", None, False),
    ("union widened", ["null", "int"], ["null", "int", "string"], 3, True),
    ("union narrowed", ["null", "int", "string"], ["null", "int"], "s", False),
    ("union branch promoted", ["null", "int"], ["null", "long"], 3, True),
    ("array items promoted", {"type": "array", "items": "int"}, {"type": "array", "items": "double"}, [1, 2], True),
    ("array items narrowed", {"type": "array", "items": "long"}, {"type": "array", "items": "int"}, [1], False),
    ("map values", {"type": "map", "values": "int"}, {"type": "map", "values": "long"}, {"a": 1}, True),
    ("map values changed", {"type": "map", "values": "int"}, {"type": "map", "values": "boolean"}, {"a": 1},
     False),
    ("array read as map", {"type": "array", "items": "int"}, {"type": "map", "values": "int"}, [1], False),
    ("nested record gains a field with a default",
     record([{"name": "line", "type": record([X], name="Line")}]),
     record([{"name": "line", "type": record([X, {"name": "q", "type": "int", "default": 0}], name="Line")}]),
     {"line": {"x": 1}}, True),
    ("nested record gains a field without one",
     record([{"name": "line", "type": record([X], name="Line")}]),
     record([{"name": "line", "type": record([X, {"name": "q", "type": "int"}], name="Line")}]),
     {"line": {"x": 1}}, False),
    ("recursive list", record([{"name": "next", "type": ["null", "shop.Node"], "default": None}, X], name="Node"),
     record([{"name": "next", "type": ["null", "shop.Node"], "default": None}, {"name": "x", "type": "long"}],
            name="Node"), {"x": 1, "next": {"x": 2, "next": None}}, True),
    ("named type referenced twice",
     record([{"name": "a", "type": COLOR}, {"name": "b", "type": "shop.Color"}]),
     record([{"name": "a", "type": COLOR_MORE}, {"name": "b", "type": "shop.Color"}]), {"a": "RED", "b": "GREEN"},
     True),
    ("logical type over its primitive", {"type": "int", "logicalType": "date"}, "long", 3, True),
]


@pytest.mark.parametrize(("case", "writer", "reader", "datum", "compatible"), CASES, ids=[c[0] for c in CASES])
def test_avro_resolution_matches_what_fastavro_reads(
    case: str, writer: Any, reader: Any, datum: Any, compatible: bool,
) -> None:
    reason = resolution.can_read(resolution.parse(json.dumps(reader)), resolution.parse(json.dumps(writer)))
    assert (reason is None) == compatible, (case, reason)
    assert fastavro_reads(writer, reader, datum) == compatible, case


# ---- the property: random record evolutions, checked against fastavro ----

FIELD_NAMES = ("a", "b", "c", "d")
PRIMITIVE_TYPES = ("int", "long", "float", "double", "string", "bytes", "boolean")
SYMBOLS = ("R", "G", "B")
SAMPLES: dict[str, list[Any]] = {"int": [7], "long": [7], "float": [1.5], "double": [1.5], "string": ["s"],
                                 "bytes": [b"b"], "boolean": [True], "null": [None]}

field_types = st.one_of(
    st.sampled_from(PRIMITIVE_TYPES),
    st.lists(st.sampled_from(PRIMITIVE_TYPES), min_size=1, max_size=2, unique=True).map(lambda t: ["null", *t]),
    st.builds(lambda symbols, default: {"type": "enum", "name": "E", "symbols": symbols,
                                        **({"default": symbols[0]} if default else {})},
              st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=3, unique=True), st.booleans()),
)


@st.composite
def record_schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(FIELD_NAMES), min_size=1, max_size=4, unique=True))
    fields = []
    for name in names:
        kind = draw(field_types)
        if isinstance(kind, dict):
            kind = {**kind, "name": f"E{name}"}  # one enum type per field (a name is defined once)
        field: dict[str, Any] = {"name": name, "type": kind}
        if draw(st.booleans()):
            field["default"] = _default(kind)
        fields.append(field)
    return record(fields, name="R")


def _default(kind: Any) -> Any:
    if isinstance(kind, list):
        return None  # a union's default is of its first branch: null
    if isinstance(kind, dict):
        return kind["symbols"][0]
    return "b" if kind == "bytes" else SAMPLES[kind][0]  # Avro's JSON default for bytes is a string


def _values(kind: Any) -> list[Any]:
    """Values of a type covering every union branch and every enum symbol."""
    if isinstance(kind, list):
        return [v for branch in kind for v in SAMPLES[branch]]
    if isinstance(kind, dict):
        return list(kind["symbols"])
    return SAMPLES[kind]


def _data(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Records whose i-th takes each field's i-th value (wrapping): every value of every field appears."""
    columns = {f["name"]: _values(f["type"]) for f in schema["fields"]}
    rows = max(len(values) for values in columns.values())
    return [{name: values[i % len(values)] for name, values in columns.items()} for i in range(rows)]


@settings(max_examples=400, deadline=None)
@given(writer=record_schemas(), reader=record_schemas())
def test_accepted_evolutions_read_every_datum_and_refused_ones_fail_on_one(
    writer: dict[str, Any], reader: dict[str, Any],
) -> None:
    reason = resolution.can_read(resolution.parse(json.dumps(reader)), resolution.parse(json.dumps(writer)))
    outcomes = [fastavro_reads(writer, reader, datum) for datum in _data(writer)]
    if reason is None:
        assert all(outcomes), (writer, reader)
    else:
        assert not all(outcomes), (reason, writer, reader)


# ---- strategies ----

V1 = avro(record([X]))
V2 = avro(record([X, {"name": "y", "type": "string", "default": "-"}]))  # adds a field with a default
V3 = avro(record([X, {"name": "y", "type": "string", "default": "-"}, {"name": "z", "type": "int"}]))
V_DROP_X = avro(record([{"name": "y", "type": "string", "default": "-"}]))  # drops x (no default in V1)
V_LONG = avro(record([{"name": "x", "type": "long"}]))


@pytest.mark.parametrize(("strategy", "schema", "versions", "accepted"), [
    ("BACKWARD", V2, [V1], True),
    ("BACKWARD", V3, [V2], False),  # z has no default: V3 cannot read V2's data
    ("FORWARD", V3, [V2], True),  # V2 ignores z
    ("FORWARD", V_DROP_X, [V1], False),  # V1 cannot read data without x
    ("BACKWARD", V_DROP_X, [V1], True),
    ("FULL", V2, [V1], True),
    ("FULL", V_LONG, [V1], False),  # long reads int, but int does not read long
    ("BACKWARD", V_LONG, [V1], True),
    ("ALWAYS_COMPATIBLE", SchemaInfo("STRING"), [V1], True),
    ("ALWAYS_INCOMPATIBLE", V2, [V1], False),
    ("ALWAYS_INCOMPATIBLE", V1, [], True),  # the first version is always accepted
    ("UNDEFINED", V_LONG, [V1], False),  # the broker default, FULL
    # _TRANSITIVE: against every version. V1 -> V2 -> V_LONG' : each step BACKWARD, not all.
    ("BACKWARD", avro(record([{"name": "y", "type": "string", "default": "-"}, {"name": "x", "type": "int"}])),
     [V_DROP_X], False),
    ("FULL", SchemaInfo("STRING"), [V1], False),
    ("FULL", SchemaInfo("STRING"), [SchemaInfo("STRING")], True),
])
def test_strategies(strategy: str, schema: SchemaInfo, versions: list[SchemaInfo], accepted: bool) -> None:
    reason = compat.check(strategy, schema, list(enumerate(versions)))
    assert (reason is None) == accepted, reason


def test_transitive_strategies_check_every_version_the_others_the_latest() -> None:
    # V_DROP_X drops x; V_BACK brings x back without a default: it reads V_DROP_X's data? No: x has
    # no default. With a default it reads V_DROP_X's data, but V1's data only as well (x is there).
    v_back = avro(record([{"name": "y", "type": "string", "default": "-"}, {"name": "x", "type": "string",
                                                                             "default": ""}]))
    history = list(enumerate([V1, V_DROP_X]))
    assert compat.check("BACKWARD", v_back, history) is None  # reads V_DROP_X's data
    reason = compat.check("BACKWARD_TRANSITIVE", v_back, history)
    assert reason is not None and "version 0" in reason and "int cannot be read as string" in reason
    assert compat.check("FORWARD", v_back, history) is None
    assert compat.check("FORWARD_TRANSITIVE", v_back, history) is not None
    assert compat.check("FULL_TRANSITIVE", v_back, history) is not None
    assert compat.check("FULL", v_back, history) is None


def test_consumers_must_read_the_latest_or_every_version() -> None:
    history = list(enumerate([V1, V_DROP_X]))
    reads_latest_only = avro(record([{"name": "y", "type": "string"}]))
    assert compat.check_reader("FULL", reads_latest_only, history) is None
    reason = compat.check_reader("FULL_TRANSITIVE", reads_latest_only, history)
    assert reason is not None and "version 0" in reason
    assert compat.check_reader("BACKWARD", avro(record([X])), history) is not None
    assert compat.check_reader("ALWAYS_COMPATIBLE", SchemaInfo("STRING"), history) is None


def test_json_schemas_are_resolved_as_avro_and_other_json_by_bytes() -> None:
    json_v1, json_v2 = avro(record([X]), "JSON"), avro(record([X, {"name": "y", "type": "int"}]), "JSON")
    assert compat.check("BACKWARD", json_v2, [(0, json_v1)]) is not None
    assert compat.check("FORWARD", json_v2, [(0, json_v1)]) is None
    draft = SchemaInfo("JSON", b'{"$schema": "http://json-schema.org/draft-07/schema#"}')
    assert compat.can_read(draft, draft) is None
    assert compat.can_read(draft, json_v1) is not None
    assert compat.same(avro(record([X]), "JSON"), SchemaInfo("JSON", json.dumps(
        record([{"name": "x", "type": "int", "doc": "the client's own spelling"}]), indent=2).encode()))


def test_an_invalid_avro_definition_is_refused_with_what_is_wrong() -> None:
    with pytest.raises(InvalidArgumentError, match="not a valid Avro schema"):
        compat.validate(SchemaInfo("AVRO", b'{"type": "record"}'))
    with pytest.raises(InvalidArgumentError, match="not a valid Avro schema"):
        compat.validate(SchemaInfo("AVRO", b"not json"))
    compat.validate(SchemaInfo("JSON", b'{"type": "record"}'))  # a JSON definition need not be Avro


def test_same_version_is_by_canonical_form_for_avro_by_data_for_others_and_by_type_for_primitives() -> None:
    spaced = SchemaInfo("AVRO", json.dumps(record([X]), indent=4).encode(), {"a": "b"})
    assert compat.same(V1, spaced)
    assert not compat.same(V1, V2)
    assert not compat.same(V1, SchemaInfo("JSON", V1.data))
    assert compat.same(SchemaInfo("STRING", b""), SchemaInfo("string", b""))
    assert not compat.same(SchemaInfo("JSON", b"not avro a"), SchemaInfo("JSON", b"not avro b"))


def protobuf(root: str, file: str) -> SchemaInfo:
    return SchemaInfo("PROTOBUF_NATIVE", json.dumps({"fileDescriptorSet": "", "rootMessageTypeName": root,
                                                     "rootFileDescriptorName": file}).encode())


def test_protobuf_native_keeps_its_root_message_and_file() -> None:
    assert compat.check("FULL", protobuf("shop.Order", "order.proto"), [(0, protobuf("shop.Order", "order.proto"))]) \
        is None
    reason = compat.check("BACKWARD", protobuf("shop.Invoice", "order.proto"), [(0, protobuf("shop.Order",
                                                                                                "order.proto"))])
    assert reason is not None and "root message shop.Order" in reason
    assert compat.check("FORWARD", protobuf("shop.Order", "other.proto"),
                        [(0, protobuf("shop.Order", "order.proto"))]) is not None
    with pytest.raises(InvalidArgumentError, match="ProtobufNativeSchemaData"):
        compat.validate(SchemaInfo("PROTOBUF_NATIVE", b"descriptor bytes"))


def test_key_value_checks_key_and_value_each_by_its_type() -> None:
    kv = compat.join_key_value(SchemaInfo("STRING"), V1)
    assert compat.split_key_value(kv) == (SchemaInfo("STRING", b"", {}), SchemaInfo("AVRO", V1.data, {}))
    assert compat.check("BACKWARD", compat.join_key_value(SchemaInfo("STRING"), V2), [(0, kv)]) is None
    reason = compat.check("BACKWARD", compat.join_key_value(SchemaInfo("STRING"), V3), [(0, kv)])
    assert reason is not None and "the value schema" in reason
    reason = compat.check("FULL", compat.join_key_value(SchemaInfo("INT64"), V1), [(0, kv)])
    assert reason is not None and "the key schema" in reason
    assert compat.same(kv, compat.join_key_value(SchemaInfo("STRING"), SchemaInfo("AVRO", json.dumps(
        record([X]), indent=1).encode())))
    # Pulsar's layout: a big-endian int32 length before each part.
    assert kv.data[:4] == struct.pack(">i", 0) and kv.data[4:8] == struct.pack(">i", len(V1.data))
    for broken, what in ((b"\x00\x00", "ends before the key"), (struct.pack(">i", 9) + b"abc", "said to be 9 bytes")):
        with pytest.raises(InvalidArgumentError, match=what):
            compat.validate(SchemaInfo("KEY_VALUE", broken, kv.properties))


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="use one of ALWAYS_COMPATIBLE"):
        compat.check("SOMETIMES", V1, [(0, V1)])


def test_primitive_schemas_are_one_version_whatever_their_data() -> None:
    # pulsar-client sends b"null" as a STRING schema's data, Herald's client sends none: one version.
    assert compat.same(SchemaInfo("STRING", b"null"), SchemaInfo("STRING", b""))
    assert not compat.same(SchemaInfo("STRING"), SchemaInfo("INT32"))
