"""Typed values: a Schema turns an application's values into message bytes on the producer and back
on the consumer, and says (`info`) what the topic's schema registry records for it. Bytes (the
default, no work at all), str, JSON, Avro, protobuf and key/value pairs are built in; AutoConsume
reads any typed topic, AutoProduceBytes sends bytes already encoded. Users' guide: docs/schemas.md.

    producer = await client.create_producer("orders", schema=AvroSchema(Order))
    await producer.send(Order(id=1, total=9.5))
    consumer = await client.subscribe("orders", "billing", schema=AvroSchema(Order))
    order = (await consumer.receive()).value        # an Order

- base: the Schema contract (encode, decode, info, reader_for), BytesSchema, StringSchema.
- record: Pulsar-style Record classes and their fields (a pulsar-client class works unchanged).
- definition: a dataclass's Avro definition from its type hints; datum: values to and from the forms
  fastavro and JSON write, compiled once per definition; defined: what Avro and JSON share.
- avro, json_schema, protobuf, key_value: the typed schemas; auto and generic: AutoConsume (with
  GenericRecord) and AutoProduceBytes.

This package knows nothing of producers, consumers or the wire: they use `info`, `reader_for`,
KeyValueSchema's `encoding` / `split` / `join` and AutoProduceBytesSchema's `bound_to`.
"""

from herald.client.schemas.auto import AutoConsumeSchema, AutoProduceBytesSchema, reader_of
from herald.client.schemas.avro import AvroSchema
from herald.client.schemas.base import BYTES, BytesSchema, Schema, StringSchema
from herald.client.schemas.generic import GenericRecord
from herald.client.schemas.json_schema import JsonSchema
from herald.client.schemas.key_value import KeyValue, KeyValueSchema
from herald.client.schemas.protobuf import ProtobufSchema
from herald.client.schemas.record import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)

__all__ = [
    "BYTES",
    "Array",
    "AutoConsumeSchema",
    "AutoProduceBytesSchema",
    "AvroSchema",
    "Boolean",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "GenericRecord",
    "Integer",
    "JsonSchema",
    "KeyValue",
    "KeyValueSchema",
    "Long",
    "Map",
    "Null",
    "ProtobufSchema",
    "Record",
    "Schema",
    "String",
    "StringSchema",
    "reader_of",
]
