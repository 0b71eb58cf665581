"""What AvroSchema and JsonSchema share: a record class (dataclass or Record) or a definition given
as it is, compiled once into the converters of `datum`, and the SchemaInfo they register. The
definition's bytes are the JSON text pulsar-client sends for the same class, so that a Herald and a
Pulsar producer of one class register one schema version, not two."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import fastavro

from herald.client.schemas.base import ReaderCache, Schema
from herald.client.schemas.datum import Node, RecordFactory, compile_definition, plain_record
from herald.client.schemas.definition import Bindings, definition_of
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

T = TypeVar("T")


def definition_bytes(definition: Any) -> bytes:
    # pulsar-client (Python) sends json.dumps(definition, indent=True): the same bytes from us.
    return json.dumps(definition, indent=True).encode()


def parse(definition: Any) -> Any:
    """fastavro's parsed form of a definition: checked once, then the fast path's input."""
    try:
        return fastavro.parse_schema(definition)
    except Exception as exc:  # fastavro raises SchemaParseError, KeyError, TypeError... on a bad definition
        raise SchemaError(f"not a valid Avro definition: {exc}") from None


def load_definition(info: SchemaInfo) -> Any:
    try:
        return json.loads(info.data)
    except ValueError as exc:
        raise SchemaError(f"the {info.type} schema's definition is not JSON: {exc}") from None


class DefinedSchema(Schema[T], Generic[T]):
    type_name = ""

    def __init__(self, record: type[T] | None = None, *, definition: Mapping[str, Any] | str | None = None,
                 factory: RecordFactory = plain_record) -> None:
        bindings: Bindings = {}
        if record is not None:
            if definition is not None:
                raise SchemaError(f"{type(self).__name__} takes a record class or a definition, not both")
            definition, bindings = definition_of(record)
            data = definition_bytes(definition)
        elif isinstance(definition, str):
            data = definition.encode()
            definition = load_definition(SchemaInfo(self.type_name, data))
        elif definition is not None:
            data = definition_bytes(definition)
        else:
            raise SchemaError(f"{type(self).__name__} needs a record class (a dataclass or a Record) or "
                              "a definition (an Avro schema as a dict or JSON text)")
        self.record = record
        self.definition: Any = definition
        self.parsed = parse(definition)
        self.node: Node = compile_definition(definition, bindings, factory)
        self._info = SchemaInfo(self.type_name, data)
        self._readers: ReaderCache[T] = ReaderCache()

    @property
    def info(self) -> SchemaInfo | None:
        return self._info

    @property
    def name(self) -> str:
        if self.record is not None:
            return self.record.__name__
        return str(self.definition.get("name", "")) if isinstance(self.definition, Mapping) else str(self.definition)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"
