"""Schemas on Pulsar's wire: the Schema a PRODUCER or SUBSCRIBE carries as the core's (a type name as
Pulsar's SchemaType spells it, data, properties: broker.core.schema_registry), schema versions as
Pulsar encodes them (8 bytes, big-endian), GET_SCHEMA answered with GET_SCHEMA_RESPONSE (an unknown
topic or version as Pulsar's broker answers it: error_code TopicNotFound, "Topic not found or
no-schema") and GET_OR_CREATE_SCHEMA with GET_OR_CREATE_SCHEMA_RESPONSE (IncompatibleSchema when the
topic cannot take it)."""

from __future__ import annotations

import re

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.pulsar.frontend import FrontEnd
from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import HeraldError, InvalidArgumentError, NotFoundError
from herald.common.pulsar.errors import server_error

Command = pulsar.BaseCommand


def _type_name(wire_name: str) -> str:
    """The wire enum's CamelCase (ProtobufNative, KeyValue, LocalDateTime) as Pulsar's SchemaType
    names it (PROTOBUF_NATIVE, KEY_VALUE, LOCAL_DATE_TIME): the names SchemaInfo uses."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", wire_name).upper()


_TYPE_NAMES = {number: _type_name(name) for name, number in pulsar.Schema.Type.items()}
_TYPE_NUMBERS = {name: number for number, name in _TYPE_NAMES.items()}


def from_wire(schema: pulsar.Schema) -> SchemaInfo:
    name = _TYPE_NAMES.get(schema.type, str(schema.type))
    return SchemaInfo(name, schema.schema_data, {kv.key: kv.value for kv in schema.properties})


def to_wire(schema: SchemaInfo, name: str) -> pulsar.Schema:
    number = _TYPE_NUMBERS.get(schema.type.upper())
    answer = pulsar.Schema(name=name, schema_data=schema.data,
                           type=number if number is not None else pulsar.Schema.Type.Value("None"))  # type: ignore[arg-type]
    for key, value in sorted(schema.properties.items()):
        answer.properties.add(key=key, value=value)
    return answer


def version_bytes(version: int) -> bytes:
    """Pulsar's schema version: a long, 8 bytes big-endian."""
    return version.to_bytes(8, "big", signed=True)


def version_from_bytes(data: bytes) -> int:
    if len(data) != 8:
        raise InvalidArgumentError(f"a schema version is 8 bytes (a big-endian long), not {len(data)}")
    return int.from_bytes(data, "big", signed=True)


async def _authorize_lookup(frontend: FrontEnd, role: str | None, topic: str) -> TopicName:
    name = TopicName.parse(topic)
    authorizer = frontend.admission.authorizer
    if authorizer is not None:
        await authorizer.check_lookup(role, str(name))
    return name


async def get_schema(frontend: FrontEnd, role: str | None, request: pulsar.CommandGetSchema) -> Command:
    answer = pulsar.CommandGetSchemaResponse(request_id=request.request_id)
    try:
        name = await _authorize_lookup(frontend, role, request.topic)
        version = version_from_bytes(request.schema_version) if request.schema_version else None
        try:
            found, schema = await frontend.service.schemas.get(str(name), version)
        except NotFoundError:
            answer.error_code = pulsar.TopicNotFound
            answer.error_message = f"Topic not found or no-schema {request.topic}"
            return Command(type=Command.GET_SCHEMA_RESPONSE, getSchemaResponse=answer)
        answer.schema.CopyFrom(to_wire(schema, name.local_name))
        answer.schema_version = version_bytes(found)
    except HeraldError as error:
        answer.error_code = server_error(error)  # type: ignore[assignment]
        answer.error_message = str(error)
    return Command(type=Command.GET_SCHEMA_RESPONSE, getSchemaResponse=answer)


async def get_or_create_schema(
    frontend: FrontEnd, role: str | None, request: pulsar.CommandGetOrCreateSchema,
) -> Command:
    """A client about to produce with this schema (Pulsar's Java client asks before a message of a new
    schema, for AUTO_PRODUCE and multi-schema producers): its version, added as a producer's would be,
    so the asker needs the rights to produce."""
    answer = pulsar.CommandGetOrCreateSchemaResponse(request_id=request.request_id)
    try:
        name = TopicName.parse(request.topic)
        authorizer = frontend.admission.authorizer
        if authorizer is not None:
            await authorizer.check(role, str(name), "produce")
        version = await frontend.service.schemas.get_or_create(str(name), from_wire(request.schema))
        answer.schema_version = version_bytes(version)
    except HeraldError as error:
        answer.error_code = server_error(error)  # type: ignore[assignment]
        answer.error_message = str(error)
    return Command(type=Command.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=answer)
