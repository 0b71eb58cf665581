"""SchemaInfo (herald.common.codec.schema_info) as Herald's gRPC contracts carry it:
common.proto's SchemaDefinition, used by RegisterProducer, Subscribe, GetSchema and the admin's
schema calls, on the client's side and the broker's alike."""

from __future__ import annotations

from herald.api.v1 import common_pb2
from herald.common.codec.schema_info import SchemaInfo


def schema_to_proto(schema: SchemaInfo, into: common_pb2.SchemaDefinition | None = None) -> common_pb2.SchemaDefinition:
    """`schema` as a SchemaDefinition (written into `into` when given: a field of a request)."""
    message = common_pb2.SchemaDefinition() if into is None else into
    message.type = schema.type.upper()
    message.data = schema.data
    message.properties.update(schema.properties)
    return message


def schema_from_proto(message: common_pb2.SchemaDefinition) -> SchemaInfo:
    return SchemaInfo(message.type.upper(), message.data, dict(message.properties))
