"""Topic schemas, until a schema registry: a topic remembers the first schema a producer or consumer
gave it, and refuses a different one (IncompatibleSchemaError). Protocol-neutral: a Schema is a type
name (Pulsar's schema type names: STRING, JSON, AVRO, PROTOBUF...), its definition's bytes and
properties; each front end translates its own.

A producer or consumer bringing no schema, or the bytes schema (NONE / BYTES: raw payloads), is
always accepted, as by Pulsar's broker without schema validation enforced. Two schemas are the same
when their type and data are (Pulsar identifies a schema version by the hash of those; properties are
kept and returned but not compared). The one version there is is 0.

Kept in the metadata store at /schemas/<topic> (a partition's under its partitioned topic's name:
the partitions of a topic share one schema).
"""

from __future__ import annotations

from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import BadVersionError, IncompatibleSchemaError, NotFoundError
from herald.metadata.store import MetadataStore

SCHEMAS_PREFIX = "/schemas/"
SCHEMA_VERSION = 0  # the only one until a registry keeps several


Schema = SchemaInfo  # the core's name for it


def schema_key(topic: str) -> str:
    """Where a topic's schema is kept: under its partitioned topic's name."""
    return SCHEMAS_PREFIX + str(TopicName.parse(topic).base)


class TopicSchemas:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def get(self, topic: str) -> Schema | None:
        stored = await self._store.get(schema_key(topic))
        return Schema.from_json(stored.value) if stored is not None else None

    async def check(self, topic: str, schema: Schema | None) -> int | None:
        """Accept `schema` for the topic (remembering it when the topic has none yet); returns the
        schema version to tell the client (None: it brought no schema). IncompatibleSchemaError when
        the topic has a different one."""
        if schema is None or schema.raw:
            return None
        key = schema_key(topic)
        while True:
            stored = await self._store.get(key)
            if stored is not None:
                existing = Schema.from_json(stored.value)
                if not existing.same_as(schema):
                    raise IncompatibleSchemaError(
                        f"topic {TopicName.parse(topic).base} has schema {existing.type} ({len(existing.data)} "
                        f"bytes of definition); the {schema.type} schema given ({len(schema.data)} bytes) differs: "
                        "use the topic's schema, or another topic for this one")
                return SCHEMA_VERSION
            try:
                await self._store.put(key, schema.to_json(), expected_version=0)
            except BadVersionError:
                continue  # someone gave it one meanwhile: compare with that
            return SCHEMA_VERSION

    async def get_version(self, topic: str, version: int | None) -> Schema:
        """The topic's schema at `version` (None: the latest); NotFoundError when it has none."""
        schema = await self.get(topic)
        if schema is None or (version is not None and version != SCHEMA_VERSION):
            which = "schema" if version is None else f"schema version {version}"
            raise NotFoundError(f"topic {TopicName.parse(topic).base} has no {which}")
        return schema
