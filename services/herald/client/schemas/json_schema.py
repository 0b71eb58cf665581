"""JsonSchema: values are JSON text. Untyped (no record), any JSON value goes and nothing is
registered (info None: the topic sees raw bytes). With a record class (a dataclass or a Record) or
an Avro-style definition, the topic's schema is type JSON with that definition, as Pulsar's JSON
schema is: values are checked against it when sent and when read; a document lacking a field gets
the field's default and one with fields the record lacks is read without them (a writer on another
version of the schema)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from herald.client.schemas.base import Schema
from herald.client.schemas.datum import Mismatch, RecordFactory, plain_record
from herald.client.schemas.defined import DefinedSchema
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

T = TypeVar("T")


def dumps(document: Any) -> bytes:
    try:
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"value cannot be sent as JSON: {exc}") from None


class _TypedJson(DefinedSchema[T]):
    type_name = "JSON"

    def __repr__(self) -> str:
        return f"JsonSchema({self.name})"

    def encode(self, value: T) -> bytes:
        if self.record is not None and not isinstance(value, self.record):
            raise SchemaError(f"{self!r} sends {self.record.__name__} values, got {type(value).__name__}")
        try:
            document = self.node.to_json(value)
        except Mismatch as exc:
            raise SchemaError(f"value cannot be sent with {self!r}: {exc.describe(self.name)}") from None
        return dumps(document)

    def decode(self, data: bytes) -> T:
        try:
            return self.node.from_json(json.loads(data))  # type: ignore[no-any-return]
        except ValueError as exc:
            raise SchemaError(f"message does not decode with {self!r}: {exc}") from None
        except Mismatch as exc:
            raise SchemaError(f"message does not decode with {self!r}: {exc.describe(self.name)}") from None


class JsonSchema(Schema[T]):
    """Values are JSON documents: plain JSON values (dicts, lists, numbers, strings) by default, or
    instances of `record` (a dataclass or a Record subclass), or dicts checked against `definition`."""

    def __init__(self, record: type[T] | None = None, *, definition: Mapping[str, Any] | str | None = None,
                 factory: RecordFactory = plain_record) -> None:
        self.record = record
        self._typed: _TypedJson[T] | None = None
        if record is not None or definition is not None:
            self._typed = _TypedJson(record, definition=definition, factory=factory)

    @property
    def definition(self) -> Any:
        return self._typed.definition if self._typed is not None else None

    @property
    def info(self) -> SchemaInfo | None:
        return self._typed.info if self._typed is not None else None

    def encode(self, value: T) -> bytes:
        return self._typed.encode(value) if self._typed is not None else dumps(value)

    def decode(self, data: bytes) -> T:
        if self._typed is not None:
            return self._typed.decode(data)
        try:
            return json.loads(data)  # type: ignore[no-any-return]
        except ValueError as exc:
            raise SchemaError(f"message does not decode with {self!r}: {exc}") from None

    def reader_for(self, writer: SchemaInfo, version: int | None = None) -> Callable[[bytes], T]:
        # A JSON document carries its field names: any version reads with this one's rules.
        return self.decode

    def __repr__(self) -> str:
        return f"JsonSchema({self._typed.name if self._typed is not None else ''})"
