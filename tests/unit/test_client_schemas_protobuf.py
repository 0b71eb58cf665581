"""ProtobufSchema: messages of a generated class in protobuf's binary form, registered as Pulsar's
PROTOBUF_NATIVE definition (the descriptors of the message's file and of every file it imports),
from which a reader without the class rebuilds the type."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from herald.api.v1 import broker_pb2, common_pb2
from herald.client import AutoConsumeSchema, ProtobufSchema
from herald.client.schemas.protobuf import message_class_of
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError


def person_class() -> type[Message]:
    """A message class made at run time, in a pool of its own (as protoc's output would be)."""
    file = descriptor_pb2.FileDescriptorProto(name="people/person.proto", package="people", syntax="proto3")
    person = file.message_type.add(name="Person")
    person.field.add(name="name", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                     label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    person.field.add(name="id", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                     label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    person.field.add(name="emails", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                     label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("people.Person"))


def test_the_definition_is_pulsars_native_protobuf_document() -> None:
    info = ProtobufSchema(broker_pb2.RegisterProducer).info
    assert info is not None and info.type == "PROTOBUF_NATIVE"
    definition = json.loads(info.data)
    assert set(definition) == {"fileDescriptorSet", "rootMessageTypeName", "rootFileDescriptorName"}
    assert definition["rootMessageTypeName"] == "herald.v1.RegisterProducer"
    assert definition["rootFileDescriptorName"] == "herald/v1/broker.proto"
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(definition["fileDescriptorSet"]))
    names = [file.name for file in files.file]
    assert names[-1] == "herald/v1/broker.proto" and "herald/v1/common.proto" in names
    assert names.index("herald/v1/common.proto") < names.index("herald/v1/broker.proto")  # dependencies first


def test_messages_round_trip_and_others_are_refused() -> None:
    schema = ProtobufSchema(common_pb2.Position)
    position = common_pb2.Position(ledger_id=3, entry_id=4)
    assert schema.decode(schema.encode(position)) == position
    with pytest.raises(SchemaError, match=r"ProtobufSchema\(Position\) sends herald.v1.Position messages, got str"):
        schema.encode("x")  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match=r"not a herald.v1.Position in protobuf's binary form"):
        schema.decode(b"\xff\xff\xff")
    with pytest.raises(SchemaError, match="takes a protobuf message class"):
        ProtobufSchema(dict)  # type: ignore[type-var]


def test_a_reader_without_the_class_rebuilds_it_from_the_definition() -> None:
    person = person_class()
    schema = ProtobufSchema(person)
    data = schema.encode(person(name="ada", id=7, emails=["a@x"]))
    assert schema.info is not None
    rebuilt = message_class_of(schema.info)
    assert rebuilt is not person and rebuilt.DESCRIPTOR.full_name == "people.Person"
    read = AutoConsumeSchema().reader_for(schema.info)(data)
    assert (read.name, read.id, list(read.emails)) == ("ada", 7, ["a@x"])


def test_a_damaged_definition_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="does not describe a message type"):
        message_class_of(SchemaInfo("PROTOBUF_NATIVE", b'{"fileDescriptorSet": "", "rootMessageTypeName": "x.Y"}'))
