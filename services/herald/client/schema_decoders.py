"""How a consumer decodes each message: with the schema version the message was written with (its
entry's schema_version). No version, or a version whose schema is the consumer's own: the consumer's
schema decodes. Another version: `schema.reader_for(writer)` (Avro resolves the writer's schema to
the reader's), once that version's SchemaInfo was fetched (schema_fetcher.py); until then the
consumer's protocol holds the entries back, in order (consumer_protocol.py). A version that could not
be fetched decodes to a SchemaError on `.value`: the message is never lost.

The producer's side of the same schema kinds is here too (SeparatedKeyValue, BindsToTopic).

A KeyValue schema with SEPARATED encoding (the key travels as the message key, base64 text, and the
value as the payload) rebuilds each value from both: `schema.join(key, value)`.

No I/O here: the owner (topic_consumer.py) fetches what `needs` says and reports it with `learned`
or `failed`."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from herald.client.schema import BytesSchema, Schema
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import HeraldError, SchemaError

Decode = Callable[[bytes], Any]
SEPARATED = "SEPARATED"


@runtime_checkable
class SeparatedKeyValue(Protocol):
    """A KeyValue schema (herald.client.schemas): with `encoding` SEPARATED the key goes as the
    message key and the value as the payload."""

    encoding: str

    def split(self, value: Any) -> tuple[bytes, bytes]: ...

    def join(self, key: bytes, value: bytes) -> Any: ...


@runtime_checkable
class BindsToTopic(Protocol):
    """AUTO_PRODUCE_BYTES (herald.client.schemas): before registering, the producer fetches the
    topic's latest schema and sends with `bound_to(it)`, a schema whose `info` is the topic's and
    whose encode checks the bytes against it."""

    def bound_to(self, info: SchemaInfo) -> Schema[Any]: ...


def separated(schema: Schema[Any] | None) -> SeparatedKeyValue | None:
    """The schema, when it is a KeyValue schema with SEPARATED encoding."""
    if isinstance(schema, SeparatedKeyValue) and schema.encoding == SEPARATED:
        return schema
    return None


def key_text(key: bytes) -> str:
    """A SEPARATED key as a message key: base64 text (Pulsar's partition_key with
    partition_key_b64_encoded holds the same text)."""
    return base64.b64encode(key).decode("ascii")


class KeyedDecode:
    """The decode of a SEPARATED KeyValue schema: the value is rebuilt from the message key too
    (Message.value calls `join` with both)."""

    __slots__ = ("_schema",)

    def __init__(self, schema: SeparatedKeyValue) -> None:
        self._schema = schema

    def __call__(self, data: bytes) -> Any:
        return self.join(None, data)

    def join(self, key: str | None, data: bytes) -> Any:
        if key is None:
            raise SchemaError("a KeyValue message with SEPARATED encoding carries no key: it was not written "
                              "with this schema (decode message.data() yourself)")
        try:
            raw = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise SchemaError(f"a KeyValue message with SEPARATED encoding has key {key[:40]!r}, not base64: it "
                              "was not written with this schema") from None
        return self._schema.join(raw, data)


class _Failed:
    """A version whose schema could not be fetched: decoding says so."""

    __slots__ = ("_error",)

    def __init__(self, error: SchemaError) -> None:
        self._error = error

    def __call__(self, data: bytes) -> Any:
        raise self._error


class _Resolved:
    """A reader for another version: whatever it raises, `.value` raises a SchemaError saying so."""

    __slots__ = ("_reader", "_topic", "_version")

    def __init__(self, reader: Decode, version: int, topic: str) -> None:
        self._reader = reader
        self._version = version
        self._topic = topic

    def __call__(self, data: bytes) -> Any:
        try:
            return self._reader(data)
        except SchemaError:
            raise
        except Exception as exc:
            raise SchemaError(f"message written with schema version {self._version} of {self._topic} does not "
                              f"decode: {exc!r}") from exc


class SchemaDecoders:
    """One consumer's decode per schema version."""

    def __init__(self, topic: str, schema: Schema[Any] | None) -> None:
        self.topic = topic
        self._schema = schema
        keyed = separated(schema)
        self.plain: Decode | None = None  # no version, or the consumer's own: None decodes nothing (bytes)
        if keyed is not None:
            self.plain = KeyedDecode(keyed)
        elif schema is not None and not isinstance(schema, BytesSchema):
            self.plain = schema.decode
        self._own = schema.info if schema is not None else None
        # Versions only matter when the consumer has a schema of its own to resolve against (a
        # KeyValue SEPARATED value is rebuilt from its parts whatever the version).
        self.versioned = self._own is not None and not self._own.raw and keyed is None
        self._by_version: dict[int, Decode | None] = {}

    def needs(self, version: int | None) -> bool:
        """Whether a message of this version waits for the version's schema to be fetched."""
        return self.versioned and version is not None and version not in self._by_version

    def decoder(self, version: int | None) -> Decode | None:
        """The decode for a message of this version (after `needs` said no)."""
        if version is None or not self.versioned:
            return self.plain
        return self._by_version.get(version, self.plain)

    def learned(self, version: int, writer: SchemaInfo) -> None:
        own = self._own
        if own is not None and writer.same_as(own):
            self._by_version[version] = self.plain
            return
        assert self._schema is not None  # versioned: it has one
        try:
            reader = self._schema.reader_for(writer)
        except Exception as exc:  # the reader cannot read this writer's data at all
            self.failed(version, exc if isinstance(exc, HeraldError) else SchemaError(f"{exc!r}"))
            return
        self._by_version[version] = _Resolved(reader, version, self.topic)

    def failed(self, version: int, error: HeraldError) -> None:
        self._by_version[version] = _Failed(SchemaError(
            f"message written with schema version {version} of {self.topic}, which this consumer cannot decode "
            f"with: {error}"))

    def forget_failures(self) -> None:
        """A reconnect: versions that failed are fetched again when their messages come again."""
        for version, decode in list(self._by_version.items()):
            if isinstance(decode, _Failed):
                del self._by_version[version]
