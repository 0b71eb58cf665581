"""AvroSchema: values are Avro binary (no header: the schema travels in the registry, its version in
each message). A message written with another version of the schema is read by Avro's resolution
rules (fastavro) from the writer's definition to this one: fields the writer lacks take this
schema's defaults, fields this schema lacks are skipped."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import fastavro

from herald.client.schemas.datum import RecordFactory, checked, plain_record
from herald.client.schemas.defined import DefinedSchema, load_definition, parse
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

T = TypeVar("T")


class AvroSchema(DefinedSchema[T]):
    """Values are instances of `record` (a dataclass or a Record subclass), or, with `definition`
    (an Avro schema as a dict or JSON text) instead, dicts."""

    type_name = "AVRO"

    def __init__(self, record: type[T] | None = None, *, definition: Mapping[str, Any] | str | None = None,
                 factory: RecordFactory = plain_record) -> None:
        super().__init__(record, definition=definition, factory=factory)
        self._parsed = self.parsed

    def encode(self, value: T) -> bytes:
        datum = checked(self.name, self.node.to_avro, value)
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self._parsed, datum)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SchemaError(f"value does not encode with {self!r}: {exc}") from None
        return buffer.getvalue()

    def decode(self, data: bytes) -> T:
        try:
            datum = fastavro.schemaless_reader(io.BytesIO(data), self._parsed, None)
        except Exception as exc:  # truncated or corrupt data fails in many ways (EOFError, IndexError...)
            raise SchemaError(f"message does not decode with {self!r}: {exc!r}") from None
        return self.node.from_avro(datum)  # type: ignore[no-any-return]

    def reader_for(self, writer: SchemaInfo, version: int | None = None) -> Callable[[bytes], T]:
        if writer.type.upper() != "AVRO" or writer.data == self._info.data:
            return self.decode
        return self._readers.get(writer, self._resolving)

    def _resolving(self, writer: SchemaInfo) -> Callable[[bytes], T]:
        written = parse(load_definition(writer))
        reader, node = self._parsed, self.node

        def read(data: bytes) -> T:
            try:
                datum = fastavro.schemaless_reader(io.BytesIO(data), written, reader)
            except Exception as exc:
                raise SchemaError(f"message written with another version of the schema does not decode "
                                  f"with {self!r}: {exc!r}") from None
            return node.from_avro(datum)  # type: ignore[no-any-return]

        return read
