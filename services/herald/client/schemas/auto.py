"""Schemas that take the topic's: AutoConsumeSchema reads each message by the schema it was written
with (Avro and JSON records as GenericRecords, protobuf as messages of a class built from the
writer's descriptors, text as str, key/value pairs as KeyValue of their decoded halves, raw bytes as
bytes); AutoProduceBytesSchema sends bytes already encoded, checking first that they decode with the
topic's schema."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from typing import Any

import fastavro

from herald.client.schemas.base import ReaderCache, Schema
from herald.client.schemas.datum import Mismatch, Node, compile_definition
from herald.client.schemas.defined import load_definition, parse
from herald.client.schemas.generic import GenericRecord
from herald.client.schemas.key_value import KeyValue, split_info, unpack
from herald.client.schemas.protobuf import message_class_of, parse_message
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

Reader = Callable[[bytes], Any]

# Pulsar's fixed-width primitive schemas, big-endian as its Java client writes them.
_NUMBERS = {"INT8": ">b", "INT16": ">h", "INT32": ">i", "INT64": ">q", "FLOAT": ">f", "DOUBLE": ">d"}


def _generic(schema_type: str, version: int | None) -> Callable[[str, dict[str, Any]], GenericRecord]:
    return lambda name, fields: GenericRecord(fields, schema_type, version, name)


def _avro(info: SchemaInfo, version: int | None, strict: bool) -> Reader:
    parsed = parse(load_definition(info))
    node = compile_definition(load_definition(info), factory=_generic("AVRO", version))

    def read(data: bytes) -> Any:
        buffer = io.BytesIO(data)
        try:
            datum = fastavro.schemaless_reader(buffer, parsed, None)
        except Exception as exc:  # corrupt data fails in many ways (EOFError, IndexError, UnicodeError...)
            raise SchemaError(f"bytes do not decode with the topic's AVRO schema: {exc!r}") from None
        if strict and buffer.tell() != len(data):
            raise SchemaError(f"bytes do not decode with the topic's AVRO schema: {len(data) - buffer.tell()} "
                              "bytes are left after the record")
        return node.from_avro(datum)

    return read


def _json(info: SchemaInfo, version: int | None) -> Reader:
    node: Node | None = None
    if info.data:
        node = compile_definition(load_definition(info), factory=_generic("JSON", version))

    def read(data: bytes) -> Any:
        try:
            document = json.loads(data)
            return node.from_json(document) if node is not None else document
        except ValueError as exc:
            raise SchemaError(f"bytes are not JSON: {exc}") from None
        except Mismatch as exc:
            raise SchemaError(f"the JSON document does not match the topic's JSON schema: "
                              f"{exc.describe('record')}") from None

    return read


def _string(info: SchemaInfo) -> Reader:
    charset = info.properties.get("__charset", "utf-8")

    def read(data: bytes) -> str:
        try:
            return data.decode(charset)
        except UnicodeDecodeError as exc:
            raise SchemaError(f"bytes are not {charset} text: {exc}") from None

    return read


def _number(info: SchemaInfo) -> Reader:
    layout = struct.Struct(_NUMBERS[info.type.upper()])

    def read(data: bytes) -> Any:
        if len(data) != layout.size:
            raise SchemaError(f"a {info.type.upper()} value is {layout.size} bytes, got {len(data)}")
        return layout.unpack(data)[0]

    return read


def _boolean(data: bytes) -> bool:
    if len(data) != 1:
        raise SchemaError(f"a BOOLEAN value is 1 byte, got {len(data)}")
    return data != b"\x00"


def _key_value(info: SchemaInfo, version: int | None, strict: bool) -> Reader:
    key_info, value_info, encoding = split_info(info)
    read_key, read_value = reader_of(key_info, version, strict), reader_of(value_info, version, strict)
    if encoding == "SEPARATED":
        # The payload is the value alone (the key is the message's key, joined by the consumer).
        return lambda data: read_value(data)

    def read(data: bytes) -> KeyValue[Any, Any]:
        key, value = unpack(data)
        return KeyValue(None if key is None else read_key(key), None if value is None else read_value(value))

    return read


def reader_of(info: SchemaInfo, version: int | None = None, strict: bool = False) -> Reader:
    """How to read bytes written with `info` without the writer's classes; `strict` also refuses
    bytes left over after an Avro record (checking what a producer is about to send)."""
    kind = info.type.upper()
    if kind == "AVRO":
        return _avro(info, version, strict)
    if kind == "JSON":
        return _json(info, version)
    if kind == "STRING":
        return _string(info)
    if kind == "KEY_VALUE":
        return _key_value(info, version, strict)
    if kind == "PROTOBUF_NATIVE":
        message_class = message_class_of(info)
        return lambda data: parse_message(message_class, data)
    if kind in _NUMBERS:
        return _number(info)
    if kind == "BOOLEAN":
        return _boolean
    return bytes  # NONE, BYTES and the types with nothing to check: the bytes as they are


class AutoConsumeSchema(Schema[Any]):
    """Reads any typed topic: each message by the schema version it was written with. Without a
    writer's schema (a topic with none), values are the bytes."""

    def __init__(self) -> None:
        self._readers: ReaderCache[Any] = ReaderCache()

    @property
    def info(self) -> SchemaInfo | None:
        return SchemaInfo("AUTO_CONSUME")

    def encode(self, value: Any) -> bytes:
        raise SchemaError("AutoConsumeSchema is for consumers and readers: a producer needs a schema of its own "
                          "(or AutoProduceBytesSchema to send bytes already encoded)")

    def decode(self, data: bytes) -> Any:
        return data

    def reader_for(self, writer: SchemaInfo, version: int | None = None) -> Callable[[bytes], Any]:
        # GenericRecords carry the version: one reader per writer and version.
        return self._readers.get(writer, lambda info: reader_of(info, version), version)


class AutoProduceBytesSchema(Schema[bytes]):
    """Sends bytes already encoded with the topic's schema, unchanged. Until bound to the topic's
    schema (`bound_to`, which the producer does when it connects) it checks nothing and registers
    nothing; bound, it refuses bytes that do not decode with that schema."""

    def __init__(self, topic_schema: SchemaInfo | None = None) -> None:
        self._topic_schema = topic_schema
        self._check: Reader | None = None
        self._refusal = ""
        if topic_schema is not None and not topic_schema.raw:
            self._check = reader_of(topic_schema, strict=True)
            self._refusal = f"refused to send bytes that the topic's {topic_schema.type} schema cannot read"

    def bound_to(self, info: SchemaInfo) -> AutoProduceBytesSchema:
        return AutoProduceBytesSchema(info)

    @property
    def info(self) -> SchemaInfo | None:
        return self._topic_schema

    def encode(self, value: bytes) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise SchemaError(f"AutoProduceBytesSchema sends bytes already encoded, got {type(value).__name__}")
        data = bytes(value)
        if self._check is not None:
            try:
                self._check(data)
            except SchemaError as exc:
                raise SchemaError(f"{self._refusal}: {exc}") from None
        return data

    def decode(self, data: bytes) -> bytes:
        return data

    def __repr__(self) -> str:
        bound = self._topic_schema.type if self._topic_schema is not None else "unbound"
        return f"AutoProduceBytesSchema({bound})"
