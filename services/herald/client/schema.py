"""The client's schemas under their first module name: everything lives in herald.client.schemas
(this module re-exports it so that existing imports keep working)."""

from herald.client.schemas import (
    BYTES,
    AutoConsumeSchema,
    AutoProduceBytesSchema,
    AvroSchema,
    BytesSchema,
    GenericRecord,
    JsonSchema,
    KeyValue,
    KeyValueSchema,
    ProtobufSchema,
    Record,
    Schema,
    StringSchema,
)

__all__ = [
    "BYTES",
    "AutoConsumeSchema",
    "AutoProduceBytesSchema",
    "AvroSchema",
    "BytesSchema",
    "GenericRecord",
    "JsonSchema",
    "KeyValue",
    "KeyValueSchema",
    "ProtobufSchema",
    "Record",
    "Schema",
    "StringSchema",
]
