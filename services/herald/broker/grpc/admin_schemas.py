"""AdminService's schema calls (GetSchema, ListSchemaVersions, UploadSchema, DeleteSchema,
TestSchemaCompatibility), translated to the schema registry's (broker.core.schema_registry). Schemas
live in the metadata store, so any broker answers them (no forwarding to the topic's owner); the
topic's namespace must exist; reading the schemas of a topic that has none and does not exist
answers NOT_FOUND for the topic (schemas kept by a deletion are read without it). Authorization is
the other topic admin calls' (authorization.py: every request names its topic). The compatibility
strategy is a topic / namespace policy (SetTopicPolicies).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc.aio

from herald.api.v1 import admin_pb2, broker_pb2
from herald.broker.core.schema_registry import SchemaRegistry
from herald.broker.core.service import BrokerService
from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.codec.schema_proto import schema_from_proto, schema_to_proto
from herald.common.errors import InvalidArgumentError, NotFoundError
from herald.metadata.resources import Resources

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")


def _uploaded(request: admin_pb2.UploadSchemaRequest) -> SchemaInfo:
    """The schema an upload or test carries, checked at the edge."""
    if not request.HasField("schema") or not request.schema.type:
        raise InvalidArgumentError(
            f"no schema given for {request.topic}: give its type (AVRO, JSON, PROTOBUF_NATIVE, STRING...) "
            "and definition")
    return schema_from_proto(request.schema)


class SchemaAdmin(abc.ABC):
    """The schema calls of AdminServicer (a mixin: it provides `service`, `resources`, `_answer`)."""

    service: BrokerService
    resources: Resources

    @abc.abstractmethod
    async def _answer(self, context: Context, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run `call` as the admin operation `operation`, its errors answered on `context`."""

    async def _registry(self, topic: str) -> SchemaRegistry:
        name = TopicName.parse(topic)
        await self.resources.check_namespace(name.namespace_name)
        return self.service.schemas

    async def GetSchema(self, request: broker_pb2.GetSchemaRequest, context: Context) -> broker_pb2.GetSchemaResponse:
        async def get() -> broker_pb2.GetSchemaResponse:
            registry = await self._registry(request.topic)
            try:
                version, schema = await registry.get(request.topic,
                                                     request.version if request.HasField("version") else None)
            except NotFoundError:
                await self.service.check_topic_exists(request.topic)  # a typo: say the topic is missing
                raise
            reply = broker_pb2.GetSchemaResponse(version=version)
            schema_to_proto(schema, reply.schema)
            return reply

        return await self._answer(context, "GetSchema", get)

    async def ListSchemaVersions(
        self, request: admin_pb2.TopicRequest, context: Context,
    ) -> admin_pb2.ListSchemaVersionsResponse:
        async def history() -> admin_pb2.ListSchemaVersionsResponse:
            registry = await self._registry(request.topic)
            reply = admin_pb2.ListSchemaVersionsResponse()
            for version, schema in await registry.history(request.topic):
                schema_to_proto(schema, reply.versions.add(version=version).schema)
            if not reply.versions:
                await self.service.check_topic_exists(request.topic)  # none, or no such topic?
            return reply

        return await self._answer(context, "ListSchemaVersions", history)

    async def UploadSchema(
        self, request: admin_pb2.UploadSchemaRequest, context: Context,
    ) -> admin_pb2.UploadSchemaResponse:
        async def upload() -> admin_pb2.UploadSchemaResponse:
            schema = _uploaded(request)
            registry = await self._registry(request.topic)
            return admin_pb2.UploadSchemaResponse(version=await registry.upload(request.topic, schema))

        return await self._answer(context, "UploadSchema", upload)

    async def DeleteSchema(self, request: admin_pb2.TopicRequest, context: Context) -> admin_pb2.DeleteSchemaResponse:
        async def delete() -> admin_pb2.DeleteSchemaResponse:
            registry = await self._registry(request.topic)
            return admin_pb2.DeleteSchemaResponse(version=await registry.delete(request.topic))

        return await self._answer(context, "DeleteSchema", delete)

    async def TestSchemaCompatibility(
        self, request: admin_pb2.UploadSchemaRequest, context: Context,
    ) -> admin_pb2.TestSchemaCompatibilityResponse:
        async def test() -> admin_pb2.TestSchemaCompatibilityResponse:
            schema = _uploaded(request)
            registry = await self._registry(request.topic)
            reason = await registry.test(request.topic, schema)
            return admin_pb2.TestSchemaCompatibilityResponse(compatible=reason is None, reason=reason or "")

        return await self._answer(context, "TestSchemaCompatibility", test)

