"""ProtobufSchema: values are messages of a generated protobuf class, in protobuf's binary form.
The registered schema is Pulsar's PROTOBUF_NATIVE: a JSON document naming the root message type
and its file, with the FileDescriptorSet of that file and every file it imports (dependencies
first), base64 encoded - what Pulsar's Java and Python clients register for the same class, so a
reader in any language can rebuild the type (AutoConsume does: `message_class_of`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from herald.client.schemas.base import Schema
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

M = TypeVar("M", bound=Message)


def _file_set(root: Any) -> descriptor_pb2.FileDescriptorSet:
    files = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(file: Any) -> None:
        if file.name in seen:
            return
        seen.add(file.name)
        for dependency in file.dependencies:
            add(dependency)
        file.CopyToProto(files.file.add())

    add(root)
    return files


def native_definition(message_class: type[Message]) -> dict[str, str]:
    descriptor = message_class.DESCRIPTOR
    return {
        "fileDescriptorSet": base64.b64encode(_file_set(descriptor.file).SerializeToString()).decode(),
        "rootMessageTypeName": descriptor.full_name,
        "rootFileDescriptorName": descriptor.file.name,
    }


def message_class_of(info: SchemaInfo) -> type[Message]:
    """The message class a PROTOBUF_NATIVE schema describes, built from its descriptors (in a pool
    of its own: two versions of one type do not collide)."""
    try:
        definition = json.loads(info.data)
        files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(definition["fileDescriptorSet"]))
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            pool.Add(file)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(definition["rootMessageTypeName"]))
    except Exception as exc:  # a damaged definition fails in JSON, base64, protobuf or the pool
        raise SchemaError(
            f"the PROTOBUF_NATIVE schema's definition does not describe a message type: {exc!r}") from None


def parse_message(message_class: type[Message], data: bytes) -> Any:
    try:
        return message_class.FromString(data)
    except DecodeError as exc:
        raise SchemaError(f"message is not a {message_class.DESCRIPTOR.full_name} in protobuf's binary form: "
                          f"{exc}") from None


class ProtobufSchema(Schema[M]):
    """Values are `message_class` messages (a class protoc generated, or one built at run time)."""

    def __init__(self, message_class: type[M]) -> None:
        if not (isinstance(message_class, type) and issubclass(message_class, Message)):
            raise SchemaError(f"ProtobufSchema takes a protobuf message class, got {message_class!r}")
        self.message_class = message_class
        # Same bytes as pulsar-client's ProtobufNativeSchema (json.dumps with indent=True).
        self._info = SchemaInfo("PROTOBUF_NATIVE", json.dumps(native_definition(message_class), indent=True).encode())

    @property
    def info(self) -> SchemaInfo | None:
        return self._info

    def encode(self, value: M) -> bytes:
        if not isinstance(value, self.message_class):
            raise SchemaError(f"{self!r} sends {self.message_class.DESCRIPTOR.full_name} messages, "
                              f"got {type(value).__name__}")
        return value.SerializeToString()

    def decode(self, data: bytes) -> M:
        return parse_message(self.message_class, data)  # type: ignore[no-any-return]

    def reader_for(self, writer: SchemaInfo, version: int | None = None) -> Callable[[bytes], M]:
        # Protobuf's binary form resolves by field number: any compatible version reads as this one.
        return self.decode

    def __repr__(self) -> str:
        return f"ProtobufSchema({self.message_class.__name__})"
