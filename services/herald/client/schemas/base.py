"""The Schema contract and the schemas with no definition to agree on: bytes and text.

A Schema turns an application's values into message bytes on the producer and back on the consumer;
`info` is what the producer registers with the topic's schema registry and what a consumer is checked
against; `reader_for` decodes a message written with another version of the schema.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

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

    def reader_for(self, writer: SchemaInfo, version: int | None = None) -> Callable[[bytes], T]:
        """How to decode a message written with `writer` (the schema version it carries, `version`
        when known): Avro resolves the writer's schema to this one; formats without resolution
        decode as usual."""
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
        # Pulsar's STRING schema names a charset other than UTF-8 in the "__charset" property.
        return SchemaInfo("STRING", b"", {"__charset": self.encoding} if self.encoding != "utf-8" else {})

    def decode(self, data: bytes) -> str:
        try:
            return data.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise SchemaError(f"message is not {self.encoding} text: {exc}") from None

    def __repr__(self) -> str:
        return f"StringSchema({self.encoding!r})"


BYTES = BytesSchema()


class ReaderCache(Generic[T]):
    """Readers made for writer schemas, by the writer's definition: a topic has few versions, but a
    consumer may meet many over its life, so the cache keeps the most recent `capacity`."""

    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        # Values decode on the application's threads (the blocking API) as well as the loop's.
        self._lock = threading.Lock()
        self._readers: dict[tuple[str, bytes, frozenset[tuple[str, str]], int | None], Callable[[bytes], T]] = {}

    def get(self, writer: SchemaInfo, make: Callable[[SchemaInfo], Callable[[bytes], T]],
            version: int | None = None) -> Callable[[bytes], T]:
        """The reader for `writer` (and `version`, for readers whose values carry it), made once."""
        # Properties count: a KEY_VALUE schema's encoding and a STRING schema's charset are there.
        key = (writer.type.upper(), writer.data, frozenset(writer.properties.items()), version)
        with self._lock:
            reader = self._readers.pop(key, None)
            if reader is not None:
                self._readers[key] = reader  # now the most recently used
                return reader
        reader = make(writer)  # outside the lock: parsing a definition may take a while
        with self._lock:
            if len(self._readers) >= self._capacity:
                del self._readers[next(iter(self._readers))]  # the least recently used
            self._readers[key] = reader
        return reader
