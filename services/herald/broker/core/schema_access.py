"""The schema calls front ends make besides registering producers and consumers (GetSchema by
version, the admin's list / upload / delete / test), through one port: the schema registry's
interface (herald.broker.core.schema_registry.SchemaRegistry, held as `service.schemas`).

Until the registry replaces TopicSchemas (first schema wins, one version, 0), `schema_registry()`
wraps TopicSchemas in the same interface, so that front ends are written once: upload of a first
schema stores it, a different one is refused as TopicSchemas refuses it. Once `service.schemas` is
the registry this module's stand-in is unused and goes (`schema_registry` returns it as it is).
"""

from __future__ import annotations

from typing import Protocol

from herald.broker.core.schemas import SCHEMA_VERSION, TopicSchemas, schema_key
from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import InvalidArgumentError
from herald.metadata.store import MetadataStore


class SchemaRegistryPort(Protocol):
    """What front ends call of the registry (all but producer and consumer registration, which the
    sessions do through BrokerService.create_producer / subscribe)."""

    async def get(self, topic: str, version: int | None = None) -> tuple[int, SchemaInfo]: ...

    async def history(self, topic: str) -> list[tuple[int, SchemaInfo]]: ...

    async def upload(self, topic: str, schema: SchemaInfo) -> int: ...

    async def delete(self, topic: str) -> int | None: ...

    async def test(self, topic: str, schema: SchemaInfo) -> str | None: ...


class _FirstSchemaWins:
    """TopicSchemas seen through the registry's interface (one version: 0)."""

    def __init__(self, schemas: TopicSchemas, store: MetadataStore) -> None:
        self._schemas = schemas
        self._store = store

    async def get(self, topic: str, version: int | None = None) -> tuple[int, SchemaInfo]:
        return SCHEMA_VERSION, await self._schemas.get_version(topic, version)

    async def history(self, topic: str) -> list[tuple[int, SchemaInfo]]:
        schema = await self._schemas.get(topic)
        return [] if schema is None else [(SCHEMA_VERSION, schema)]

    async def upload(self, topic: str, schema: SchemaInfo) -> int:
        version = await self._schemas.check(topic, schema)
        if version is None:
            raise InvalidArgumentError(f"a {schema.type} schema is raw bytes: there is nothing to upload")
        return version

    async def delete(self, topic: str) -> int | None:
        existing = await self._schemas.get(topic)
        await self._store.delete(schema_key(topic))
        return None if existing is None else SCHEMA_VERSION

    async def test(self, topic: str, schema: SchemaInfo) -> str | None:
        existing = await self._schemas.get(topic)
        if existing is None or schema.raw or existing.same_as(schema):
            return None
        return (f"topic {TopicName.parse(topic).base} has schema {existing.type}; the {schema.type} schema "
                "given differs")


class _HasSchemas(Protocol):
    store: MetadataStore

    @property
    def schemas(self) -> object: ...


def schema_registry(service: _HasSchemas) -> SchemaRegistryPort:
    """The service's registry, as front ends call it."""
    schemas = service.schemas
    if isinstance(schemas, TopicSchemas):
        return _FirstSchemaWins(schemas, service.store)
    return schemas  # type: ignore[return-value]  # the registry: it has the interface
