"""KeyValueSchema: values are (key, value) pairs, each half with a schema of its own, as Pulsar's
KeyValue schema. INLINE puts both in the payload (a 4-byte big-endian length, -1 for None, then the
bytes, for the key and then the value); SEPARATED sends the key as the message key and the value as
the payload, which lets compaction and Key_Shared see the key: the producer calls `split`, the
consumer `join`. The registered schema is type KEY_VALUE, its data the two definitions framed the
same way, its properties naming each half's schema and the encoding (Pulsar's property names)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from herald.client.schemas.base import BYTES, ReaderCache, Schema
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

K = TypeVar("K")
V = TypeVar("V")

ENCODINGS = ("INLINE", "SEPARATED")
_LENGTH = struct.Struct(">i")


class KeyValue(NamedTuple, Generic[K, V]):
    key: K
    value: V


def pack(key: bytes | None, value: bytes | None) -> bytes:
    """Both halves framed: length (-1: None) and bytes, the key first."""
    return b"".join((_LENGTH.pack(-1 if key is None else len(key)), key or b"",
                     _LENGTH.pack(-1 if value is None else len(value)), value or b""))


def unpack(data: bytes) -> tuple[bytes | None, bytes | None]:
    halves: list[bytes | None] = []
    offset = 0
    for half in ("key", "value"):
        if offset + 4 > len(data):
            raise SchemaError(f"key/value data is cut short: no length for the {half} at byte {offset} "
                              f"of {len(data)}")
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        if length == -1:
            halves.append(None)
            continue
        if length < 0 or offset + length > len(data):
            raise SchemaError(f"key/value data is cut short: the {half} claims {length} bytes, "
                              f"{len(data) - offset} are left")
        halves.append(data[offset:offset + length])
        offset += length
    if offset != len(data):
        raise SchemaError(f"key/value data has {len(data) - offset} bytes after the value")
    return halves[0], halves[1]


def _half_properties(prefix: str, info: SchemaInfo | None) -> dict[str, str]:
    info = info or SchemaInfo("BYTES")
    return {f"{prefix}.schema.name": info.type, f"{prefix}.schema.type": info.type,
            f"{prefix}.schema.properties": json.dumps(dict(info.properties), sort_keys=True, separators=(",", ":"))}


def key_value_info(key: SchemaInfo | None, value: SchemaInfo | None, encoding: str) -> SchemaInfo:
    properties = {**_half_properties("key", key), **_half_properties("value", value), "kv.encoding.type": encoding}
    return SchemaInfo("KEY_VALUE", pack((key or SchemaInfo("BYTES")).data, (value or SchemaInfo("BYTES")).data),
                      properties)


def split_info(info: SchemaInfo) -> tuple[SchemaInfo, SchemaInfo, str]:
    """A KEY_VALUE schema's key schema, value schema and encoding."""
    key_data, value_data = unpack(info.data)
    halves = []
    for prefix, data in (("key", key_data), ("value", value_data)):
        try:
            properties = json.loads(info.properties.get(f"{prefix}.schema.properties") or "{}")
        except ValueError:
            raise SchemaError(f"the KEY_VALUE schema's {prefix}.schema.properties is not JSON") from None
        halves.append(SchemaInfo(info.properties.get(f"{prefix}.schema.type", "BYTES"), data or b"",
                                 {str(k): str(v) for k, v in properties.items()}))
    encoding = info.properties.get("kv.encoding.type") or "INLINE"
    return halves[0], halves[1], encoding


class KeyValueSchema(Schema[KeyValue[K, V]], Generic[K, V]):
    """Values are KeyValue(key, value) pairs (plain 2-tuples are taken too); either half may be
    None. `encoding` is "INLINE" (both in the payload) or "SEPARATED" (the key in the message key:
    the producer and consumer use `split` and `join`; `encode`/`decode` refuse)."""

    def __init__(self, key_schema: Schema[K] | None = None, value_schema: Schema[V] | None = None,
                 encoding: str = "INLINE") -> None:
        if encoding not in ENCODINGS:
            raise SchemaError(f"key/value encoding {encoding!r} is unknown: use INLINE or SEPARATED")
        self.key_schema: Schema[Any] = key_schema if key_schema is not None else BYTES
        self.value_schema: Schema[Any] = value_schema if value_schema is not None else BYTES
        self.encoding = encoding
        self._info = key_value_info(self.key_schema.info, self.value_schema.info, encoding)
        self._readers: ReaderCache[KeyValue[K, V]] = ReaderCache()

    @property
    def info(self) -> SchemaInfo | None:
        return self._info

    def split(self, value: KeyValue[K, V] | tuple[K, V]) -> tuple[bytes | None, bytes | None]:
        """The key's bytes and the value's bytes (None for a None half)."""
        if not isinstance(value, tuple) or len(value) != 2:
            raise SchemaError(f"{self!r} sends KeyValue(key, value) pairs, got {type(value).__name__}")
        key, item = value
        return (None if key is None else self.key_schema.encode(key),
                None if item is None else self.value_schema.encode(item))

    def join(self, key: bytes | None, value: bytes | None,
             readers: tuple[Callable[[bytes], Any], Callable[[bytes], Any]] | None = None) -> KeyValue[K, V]:
        """The pair from its halves' bytes (decoded with `readers` when given: another version)."""
        read_key, read_value = readers or (self.key_schema.decode, self.value_schema.decode)
        key_part: Any = None if key is None else read_key(key)  # a None half stays None, whatever K is
        value_part: Any = None if value is None else read_value(value)
        return KeyValue(key_part, value_part)

    def encode(self, value: KeyValue[K, V]) -> bytes:
        self._inline("encode")
        return pack(*self.split(value))

    def decode(self, data: bytes) -> KeyValue[K, V]:
        self._inline("decode")
        return self.join(*unpack(data))

    def reader_for(self, writer: SchemaInfo, version: int | None = None) -> Callable[[bytes], KeyValue[K, V]]:
        """Each half read with its own schema's resolution from the writer's half."""
        if writer.type.upper() != "KEY_VALUE" or writer.data == self._info.data:
            return self.decode
        return self._readers.get(writer, lambda info: self._resolving(info, version), version)

    def _resolving(self, writer: SchemaInfo, version: int | None) -> Callable[[bytes], KeyValue[K, V]]:
        key_info, value_info, _ = split_info(writer)
        readers = (self.key_schema.reader_for(key_info, version), self.value_schema.reader_for(value_info, version))
        return lambda data: self.join(*unpack(data), readers=readers)

    def _inline(self, what: str) -> None:
        if self.encoding != "INLINE":
            raise SchemaError(f"{self!r} keeps the key in the message key: a producer or consumer with this "
                              f"schema uses split()/join(), it does not {what} a whole payload")

    def __repr__(self) -> str:
        return f"KeyValueSchema({self.key_schema!r}, {self.value_schema!r}, {self.encoding!r})"
