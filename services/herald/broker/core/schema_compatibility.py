"""Whether a schema may join a topic's schema history, by Pulsar's compatibility strategies
("Schema evolution and compatibility"): BACKWARD (the new schema reads data written with the last
one), FORWARD (data written with the new one is read with the last), FULL (both), their _TRANSITIVE
forms (against every version, not just the last), ALWAYS_COMPATIBLE and ALWAYS_INCOMPATIBLE.

What "reads" means depends on the type: AVRO, JSON (Pulsar's JSON definition is an Avro record) and
PROTOBUF (Avro-described too) by Avro's resolution rules (broker.core.schema_resolution);
PROTOBUF_NATIVE by Pulsar's rule (the root message and its file must not change); KEY_VALUE its key
and value schemas each by their own type's rule; any other type (STRING, INT32...) reads only itself.
Two types never read each other. Pure functions: no I/O.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence

from herald.broker.core import schema_resolution as avro
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import InvalidArgumentError

DEFAULT_STRATEGY = "FULL"  # Pulsar's broker default; a namespace's UNDEFINED means it
STRATEGIES = (
    "ALWAYS_COMPATIBLE", "ALWAYS_INCOMPATIBLE", "BACKWARD", "FORWARD", "FULL",
    "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
)
AVRO_BASED = frozenset({"AVRO", "JSON", "PROTOBUF"})
# Types a client may name to say "whatever the topic has": never stored as a version.
AUTO_TYPES = frozenset({"AUTO", "AUTO_CONSUME", "AUTO_PUBLISH", "AUTO_PRODUCE", "AUTO_PRODUCE_BYTES"})
_KV_LENGTH = struct.Struct(">i")


def effective_strategy(strategy: str | None) -> str:
    """The strategy a topic runs with (None / UNDEFINED: the broker default, FULL)."""
    if strategy is None or strategy == "UNDEFINED":
        return DEFAULT_STRATEGY
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(f"schema compatibility strategy {strategy!r} is invalid: use one of "
                                   f"{', '.join(STRATEGIES)}")
    return strategy


def type_of(schema: SchemaInfo) -> str:
    return schema.type.upper()


# ---- definitions ----

def _avro(schema: SchemaInfo) -> avro.AvroSchema | None:
    """The Avro form of an Avro-described schema; None when a JSON or PROTOBUF definition is not Avro
    (an old client's JSON-schema draft: compared by its bytes only)."""
    try:
        return avro.parse(schema.data)
    except InvalidArgumentError:
        if type_of(schema) == "AVRO":
            raise
        return None


def split_key_value(schema: SchemaInfo) -> tuple[SchemaInfo, SchemaInfo]:
    """A KEY_VALUE schema's key and value schemas: Pulsar's data is a big-endian int32 length and the
    key schema's data, then the same for the value's; their types are the properties
    key.schema.type and value.schema.type (and their properties key.schema.properties /
    value.schema.properties, JSON objects)."""
    data = schema.data
    parts: list[bytes] = []
    offset = 0
    for which in ("key", "value"):
        if len(data) < offset + 4:
            raise InvalidArgumentError(f"the KEY_VALUE schema data ends before the {which} schema's length "
                                       f"({len(data)} bytes): it is a 4-byte length and the {which} schema, twice")
        (length,) = _KV_LENGTH.unpack_from(data, offset)
        offset += 4
        if length < 0:
            length = 0  # Pulsar writes -1 for an absent (bytes) schema
        if len(data) < offset + length:
            raise InvalidArgumentError(f"the KEY_VALUE schema's {which} schema is said to be {length} bytes, but "
                                       f"only {len(data) - offset} follow")
        parts.append(data[offset:offset + length])
        offset += length
    properties = schema.properties
    answer = []
    for which, part in zip(("key", "value"), parts, strict=True):
        inner_properties: dict[str, str] = {}
        text = properties.get(f"{which}.schema.properties")
        if text:
            try:
                loaded = json.loads(text)
                inner_properties = {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
            except ValueError:
                inner_properties = {}
        answer.append(SchemaInfo(properties.get(f"{which}.schema.type", "BYTES").upper(), part, inner_properties))
    return answer[0], answer[1]


def join_key_value(key: SchemaInfo, value: SchemaInfo, encoding: str = "INLINE") -> SchemaInfo:
    """The KEY_VALUE schema of `key` and `value` (the inverse of split_key_value)."""
    data = _KV_LENGTH.pack(len(key.data)) + key.data + _KV_LENGTH.pack(len(value.data)) + value.data
    return SchemaInfo("KEY_VALUE", data, {
        "key.schema.type": type_of(key), "value.schema.type": type_of(value), "kv.encoding.type": encoding,
        "key.schema.properties": json.dumps(dict(key.properties)),
        "value.schema.properties": json.dumps(dict(value.properties)),
    })


def _protobuf_root(schema: SchemaInfo) -> tuple[str, str]:
    """PROTOBUF_NATIVE data is Pulsar's ProtobufNativeSchemaData: JSON with fileDescriptorSet,
    rootMessageTypeName and rootFileDescriptorName."""
    try:
        document = json.loads(schema.data)
        return str(document["rootMessageTypeName"]), str(document["rootFileDescriptorName"])
    except (ValueError, KeyError, TypeError):
        raise InvalidArgumentError(
            "the PROTOBUF_NATIVE schema data is not Pulsar's ProtobufNativeSchemaData (JSON with "
            "fileDescriptorSet, rootMessageTypeName and rootFileDescriptorName)") from None


def validate(schema: SchemaInfo) -> None:
    """InvalidArgumentError when the definition cannot be what its type says (checked before a
    schema is stored: a bad one would make every later check fail)."""
    kind = type_of(schema)
    if kind in AVRO_BASED:
        _avro(schema)
    elif kind == "PROTOBUF_NATIVE":
        _protobuf_root(schema)
    elif kind == "KEY_VALUE":
        for part in split_key_value(schema):
            validate(part)


def same(a: SchemaInfo, b: SchemaInfo) -> bool:
    """Whether two schemas are one version: Avro-described ones when their Parsing Canonical Forms are
    equal (one record defined by two clients, spaces, doc and defaults aside), PROTOBUF_NATIVE by its
    data, primitive types (STRING, INT32...) by type alone: their data says nothing (pulsar-client sends
    b"null" for a STRING schema where Herald's and Java's clients send nothing)."""
    kind = type_of(a)
    if kind != type_of(b):
        return False
    if kind in AVRO_BASED:
        first, second = _avro(a), _avro(b)
        if first is not None and second is not None:
            return first.canonical == second.canonical
    if kind == "KEY_VALUE":
        (ka, va), (kb, vb) = split_key_value(a), split_key_value(b)
        return same(ka, kb) and same(va, vb)
    if kind == "PROTOBUF_NATIVE" or kind in AVRO_BASED:
        return a.data == b.data
    return True


# ---- reading ----

def can_read(reader: SchemaInfo, writer: SchemaInfo) -> str | None:
    """None when data written with `writer` can be read with `reader`; else why not."""
    kind = type_of(reader)
    if kind != type_of(writer):
        return f"data of type {type_of(writer)} cannot be read with a schema of type {kind}"
    if kind in AVRO_BASED:
        reader_avro, writer_avro = _avro(reader), _avro(writer)
        if reader_avro is None or writer_avro is None:
            return None if reader.data == writer.data else \
                f"the {kind} definitions differ and are not both Avro schemas, so they cannot be resolved"
        return avro.can_read(reader_avro, writer_avro)
    if kind == "PROTOBUF_NATIVE":
        reader_root, writer_root = _protobuf_root(reader), _protobuf_root(writer)
        if reader_root != writer_root:
            return (f"the root message {writer_root[0]} (file {writer_root[1]}) cannot change to {reader_root[0]} "
                    f"(file {reader_root[1]})")
        return None
    if kind == "KEY_VALUE":
        (reader_key, reader_value), (writer_key, writer_value) = split_key_value(reader), split_key_value(writer)
        for which, r, w in (("key", reader_key, writer_key), ("value", reader_value, writer_value)):
            reason = can_read(r, w)
            if reason is not None:
                return f"the {which} schema: {reason}"
        return None
    return None  # STRING, INT32...: the same type reads itself


# ---- strategies ----

def check(strategy: str, schema: SchemaInfo, versions: Sequence[tuple[int, SchemaInfo]]) -> str | None:
    """None when `schema` may become the version after `versions` ((version, schema), oldest first)
    under `strategy`; else why not. A topic without versions accepts any schema."""
    strategy = effective_strategy(strategy)
    if not versions or strategy == "ALWAYS_COMPATIBLE":
        return None
    if strategy == "ALWAYS_INCOMPATIBLE":
        return "the compatibility strategy ALWAYS_INCOMPATIBLE accepts no new schema version"
    base = strategy.removesuffix("_TRANSITIVE")
    for number, existing in _against(strategy, versions):
        if base in ("BACKWARD", "FULL"):
            reason = can_read(schema, existing)
            if reason is not None:
                return f"{strategy}: the new schema cannot read data written with version {number}: {reason}"
        if base in ("FORWARD", "FULL"):
            reason = can_read(existing, schema)
            if reason is not None:
                return f"{strategy}: data written with the new schema cannot be read with version {number}: {reason}"
    return None


def check_reader(strategy: str, schema: SchemaInfo, versions: Sequence[tuple[int, SchemaInfo]]) -> str | None:
    """None when a consumer with `schema` can read the topic's data: written with the latest version
    (with every version, under a _TRANSITIVE strategy); ALWAYS_COMPATIBLE checks nothing."""
    strategy = effective_strategy(strategy)
    if not versions or strategy == "ALWAYS_COMPATIBLE":
        return None
    for number, existing in _against(strategy, versions):
        reason = can_read(schema, existing)
        if reason is not None:
            return f"the consumer's schema cannot read data written with the topic's version {number}: {reason}"
    return None


def _against(strategy: str, versions: Sequence[tuple[int, SchemaInfo]]) -> list[tuple[int, SchemaInfo]]:
    """The versions a strategy checks, newest first: all under a _TRANSITIVE one, else the latest."""
    return list(reversed(versions)) if strategy.endswith("_TRANSITIVE") else [versions[-1]]
