"""Avro's schema resolution rules, checked statically: can data written with one Avro schema be read
with another? (the Avro specification's "Schema Resolution": promotions int->long/float/double,
long->float/double, float->double, string<->bytes; record fields matched by name and the reader's
aliases, a reader field missing in the writer needs a default; writer enum symbols must exist in the
reader unless it has a default; unions; named types by unqualified name or alias; fixed sizes.)

fastavro resolves only while reading data; this walks both parsed schemas (fastavro.parse_schema's
form) the way fastavro's reader would, so what it accepts fastavro reads (tests/unit/
test_schema_resolution.py proves it against fastavro itself). Pure: no I/O, no Herald state.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, to_parsing_canonical_form

from herald.common.errors import InvalidArgumentError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
# writer type -> the reader types it is promoted to
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class AvroSchema:
    """One parsed Avro definition: its parsed form and its named types (full name -> definition)."""

    def __init__(self, definition: bytes | str) -> None:
        try:
            document = json.loads(definition)
            self.named: dict[str, Any] = {}
            self.parsed: Any = fastavro.parse_schema(document, named_schemas=self.named, _write_hint=False)
            self.canonical: str = to_parsing_canonical_form(document)
        except (ValueError, TypeError, KeyError, AttributeError, SchemaParseException) as error:
            text = definition.decode(errors="replace") if isinstance(definition, bytes) else definition
            raise InvalidArgumentError(
                f"the schema definition is not a valid Avro schema ({error}): {text[:200]!r}") from None


@functools.lru_cache(maxsize=256)
def parse(definition: bytes | str) -> AvroSchema:
    """The parsed definition; the recently used are kept (a topic's versions are compared with every
    producer's schema when it connects; parsed schemas are never changed)."""
    return AvroSchema(definition)


def can_read(reader: AvroSchema, writer: AvroSchema) -> str | None:
    """None when every datum written with `writer` can be read with `reader`; else why not."""
    return _Resolution(reader.named, writer.named).resolve(reader.parsed, writer.parsed, "")


def _unqualified(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = schema["type"]
        return kind if isinstance(kind, str) else "union"
    return str(schema)


def _describe(schema: Any) -> str:
    kind = _kind(schema)
    if isinstance(schema, dict) and kind in NAMED:
        return f"{kind} {schema['name']}"
    if kind == "union":
        return "union [" + ", ".join(_describe(branch) for branch in schema) + "]"
    return kind


def _names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    """The spec: same unqualified name, or the writer's name among the reader's aliases."""
    writer_name = writer["name"]
    aliases = {alias for alias in reader.get("aliases", [])}
    return (_unqualified(writer_name) == _unqualified(reader["name"]) or writer_name in aliases
            or _unqualified(writer_name) in {_unqualified(alias) for alias in aliases})


class _Resolution:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        # (reader name, writer name) pairs being resolved: a recursive type meeting itself again
        # resolves if the rest of it does.
        self.in_progress: set[tuple[str, str]] = set()

    def _deref(self, schema: Any, named: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return named.get(schema, schema)
        if isinstance(schema, dict):
            inner = schema.get("type")
            wrapped = isinstance(inner, list) or (isinstance(inner, str) and inner not in NAMED
                                                  and inner not in ("array", "map"))
            if wrapped:
                return self._deref(inner, named)  # a primitive with attributes (logical types), a wrapped union
        return schema

    def matches(self, reader: Any, writer: Any) -> bool:
        """The shallow match that picks a reader union's branch (the first that matches is used)."""
        reader, writer = self._deref(reader, self.reader_named), self._deref(writer, self.writer_named)
        if isinstance(reader, list) or isinstance(writer, list):
            return True
        kind_r, kind_w = _kind(reader), _kind(writer)
        if kind_w in PRIMITIVES:
            return kind_r == kind_w or kind_r in PROMOTIONS.get(kind_w, ())
        if kind_r != kind_w:
            return False
        if kind_r == "array":
            return self.matches(reader["items"], writer["items"])
        if kind_r == "map":
            return self.matches(reader["values"], writer["values"])
        if kind_r == "fixed" and reader["size"] != writer["size"]:
            return False
        return _names_match(reader, writer)

    def resolve(self, reader: Any, writer: Any, path: str) -> str | None:
        reader, writer = self._deref(reader, self.reader_named), self._deref(writer, self.writer_named)
        where = path or "the schema"
        if isinstance(writer, list):
            # Each branch the writer may have written must be readable.
            for branch in writer:
                reason = self.resolve(reader, branch, path)
                if reason is not None:
                    return reason
            return None
        if isinstance(reader, list):
            for branch in reader:
                if self.matches(branch, writer):
                    return self.resolve(branch, writer, path)
            return f"{where}: the writer's {_describe(writer)} matches no branch of the reader's {_describe(reader)}"
        kind_r, kind_w = _kind(reader), _kind(writer)
        if kind_w in PRIMITIVES or kind_r in PRIMITIVES:
            if kind_r == kind_w or kind_r in PROMOTIONS.get(kind_w, ()):
                return None
            return f"{where}: the writer's {_describe(writer)} cannot be read as {_describe(reader)}"
        if kind_r != kind_w:
            return f"{where}: the writer's {_describe(writer)} cannot be read as {_describe(reader)}"
        if kind_r == "array":
            return self.resolve(reader["items"], writer["items"], f"{path}[]")
        if kind_r == "map":
            return self.resolve(reader["values"], writer["values"], f"{path}{{}}")
        if not _names_match(reader, writer):
            return (f"{where}: the writer's {_describe(writer)} has another name than the reader's "
                    f"{_describe(reader)} (and is not one of its aliases)")
        if kind_r == "fixed":
            if reader["size"] != writer["size"]:
                return f"{where}: fixed {writer['name']} is {writer['size']} bytes, the reader's {reader['size']}"
            return None
        if kind_r == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and not reader.get("default"):
                return (f"{where}: the writer's enum {writer['name']} has symbols {missing} the reader's lacks "
                        "(and the reader's has no default)")
            return None
        return self._record(reader, writer, path)

    def _record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> str | None:
        key = (reader["name"], writer["name"])
        if key in self.in_progress:
            return None
        self.in_progress.add(key)
        try:
            by_name = {field["name"]: field for field in writer["fields"]}
            for field in reader["fields"]:
                name = field["name"]
                written = by_name.get(name)
                if written is None:
                    written = next((by_name[a] for a in field.get("aliases", []) if a in by_name), None)
                field_path = f"{path}.{name}" if path else f"field {name}"
                if written is None:
                    if "default" not in field:
                        return (f"{field_path}: the reader's record {reader['name']} has field {name!r} with no "
                                "default, which the writer's does not have")
                    continue
                reason = self.resolve(field["type"], written["type"], field_path)
                if reason is not None:
                    return reason
            return None
        finally:
            self.in_progress.discard(key)
