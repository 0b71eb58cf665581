"""Typed values: a Schema turns an application's values into message bytes on the producer and back
on the consumer. Bytes (the default, no work at all), str and JSON are built in; any object with
`encode` and `decode` serves. There is no schema registry yet: producer and consumer must agree.

    producer = await client.create_producer("orders", schema=JsonSchema(Order))
    await producer.send(Order(id=1, total=9.5))
    consumer = await client.subscribe("orders", "billing", schema=JsonSchema(Order))
    order = (await consumer.receive()).value        # an Order
"""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

T = TypeVar("T")


class Schema(abc.ABC, Generic[T]):
    """Encodes values of type T to bytes and decodes them back. Subclass it for other formats;
    errors are SchemaError."""

    @abc.abstractmethod
    def encode(self, value: T) -> bytes: ...

    @abc.abstractmethod
    def decode(self, data: bytes) -> T: ...

    @property
    def info(self) -> SchemaInfo | None:
        """What the producer registers and the consumer is checked against on the topic (the
        registry's view of this schema); None: raw bytes, nothing to register."""
        return None

    def reader_for(self, writer: SchemaInfo) -> Callable[[bytes], T]:
        """How to decode a message written with `writer` (the schema version it carries): Avro
        resolves the writer's schema to this one; formats without resolution decode as usual."""
        return self.decode

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSchema(Schema[bytes]):
    """Values are bytes, sent as they are (bytearray and memoryview are taken too)."""

    def encode(self, value: bytes) -> bytes:
        if value.__class__ is bytes:
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise SchemaError(
            f"a message value must be bytes, got {type(value).__name__}: give the producer a schema "
            "(StringSchema(), JsonSchema()) to send other values")

    def decode(self, data: bytes) -> bytes:
        return data


class StringSchema(Schema[str]):
    """Values are text, sent encoded (UTF-8 unless told otherwise)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        "".encode(encoding)  # LookupError now for an unknown encoding, not at the first send
        self.encoding = encoding

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise SchemaError(f"StringSchema sends str values, got {type(value).__name__}")
        return value.encode(self.encoding)

    @property
    def info(self) -> SchemaInfo | None:
        return SchemaInfo("STRING", b"", {"__charset": self.encoding} if self.encoding != "utf-8" else {})

    def decode(self, data: bytes) -> str:
        try:
            return data.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise SchemaError(f"message is not {self.encoding} text: {exc}") from None

    def __repr__(self) -> str:
        return f"StringSchema({self.encoding!r})"


class JsonSchema(Schema[T]):
    """Values are JSON documents: plain JSON values (dicts, lists, numbers, strings) by default, or
    instances of a dataclass given as `record`, encoded from its fields and decoded back into it."""

    def __init__(self, record: type[T] | None = None) -> None:
        if record is not None and not dataclasses.is_dataclass(record):
            raise SchemaError(f"JsonSchema record must be a dataclass, got {record!r}")
        self.record = record

    def encode(self, value: T) -> bytes:
        document: Any = value
        if self.record is not None:
            if not isinstance(value, self.record):
                raise SchemaError(
                    f"JsonSchema({self.record.__name__}) sends {self.record.__name__} values, "
                    f"got {type(value).__name__}")
            document = dataclasses.asdict(value)  # type: ignore[call-overload]
        try:
            return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"value cannot be sent as JSON: {exc}") from None

    def decode(self, data: bytes) -> T:
        try:
            document = json.loads(data)
            if self.record is None:
                return document  # type: ignore[no-any-return]
            return self.record(**document)
        except (ValueError, TypeError) as exc:
            raise SchemaError(f"message does not decode with {self!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"JsonSchema({self.record.__name__ if self.record else ''})"


BYTES = BytesSchema()
