"""The schema registry: each topic's versioned schema history (broker.core.schemas keeps it in the
metadata store) and what producers, consumers and admins may add to it, by the topic's policies
(schema_compatibility_strategy, is_allow_auto_update_schema, schema_validation_enforced: topic >
namespace > broker) and the compatibility rules of broker.core.schema_compatibility.

Pulsar's semantics: a producer whose schema is one of the topic's versions writes with that version;
a new one is added when auto update is allowed and the strategy accepts it. A producer or consumer
with no schema (or the bytes schema) on a typed topic is accepted unless validation is enforced.
A consumer's schema must read the topic's latest version (every version, under a _TRANSITIVE
strategy); a topic with no schema takes a consumer's as its first. AUTO_CONSUME / AUTO_PRODUCE are
never stored. Protocol-neutral: front ends translate their wire forms to SchemaInfo.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from herald.broker.core import schema_compatibility as compatibility
from herald.broker.core.policies import PolicyResolver
from herald.broker.core.schemas import SchemaHistory, SchemaStorage, SchemaVersion
from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import IncompatibleSchemaError, InvalidArgumentError, NotFoundError
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SchemaPolicies:
    """The schema policies a topic runs with."""

    strategy: str  # never UNDEFINED
    validation_enforced: bool
    auto_update: bool


def _strategy_of(value: str | None) -> str | None:
    return None if value in (None, "UNDEFINED") else value


class SchemaRegistry:
    def __init__(self, store: MetadataStore, policy_resolver: PolicyResolver) -> None:
        self.storage = SchemaStorage(store)
        self._policies = policy_resolver

    async def policies(self, topic: str) -> SchemaPolicies:
        """The topic's effective schema policies. A strategy UNDEFINED (Pulsar's "not set") at the
        topic level falls to the namespace's, UNDEFINED there to the broker's (FULL)."""
        name = TopicName.parse(topic).base
        effective = await self._policies.effective(name)
        strategy = _strategy_of(effective.schema_compatibility_strategy)
        if strategy is None:
            resources = self._policies.resources
            namespace = await resources.get_namespace_policies(name.namespace_name)
            strategy = _strategy_of(namespace.schema_compatibility_strategy) \
                or _strategy_of(self._policies.defaults.schema_compatibility_strategy)
        return SchemaPolicies(compatibility.effective_strategy(strategy), bool(effective.schema_validation_enforced),
                              effective.is_allow_auto_update_schema is not False)

    # ---- producers and consumers ----

    async def register_producer(self, topic: str, schema: SchemaInfo | None) -> int | None:
        """The version a producer with `schema` writes with (None: it writes raw bytes).
        IncompatibleSchemaError when the topic cannot take it."""
        if schema is None or schema.raw or _is_auto(schema):
            await self._check_untyped(topic, "producer")
            return None
        compatibility.validate(schema)
        # Most producers bring a schema the topic has: one read, no policies needed.
        known = _find_same((await self.storage.read(topic)).live, schema)
        if known is not None:
            return known.version
        policies = await self.policies(topic)

        def add(history: SchemaHistory) -> tuple[bool, int]:
            live = history.live
            existing = _find_same(live, schema)
            if existing is not None:
                return False, existing.version
            if not policies.auto_update:
                raise IncompatibleSchemaError(
                    f"topic {_base(topic)} has no schema version like the producer's {schema.type} schema, and "
                    "is_allow_auto_update_schema is off: an admin must upload the schema first (REST POST "
                    ".../schema, `herald admin schemas upload`), or allow auto update on the namespace")
            _refuse_unless(topic, compatibility.check(policies.strategy, schema, _pairs(live)))
            return True, history.append(schema).version

        version = await self.storage.update(topic, add)
        return version

    async def check_consumer(self, topic: str, schema: SchemaInfo | None) -> None:
        """IncompatibleSchemaError when a consumer with `schema` cannot read the topic's data. A topic
        without a schema takes the consumer's as its first version (as Pulsar's broker does)."""
        if schema is not None and _is_auto(schema):
            return  # it reads whatever each message was written with
        if schema is None or schema.raw:
            await self._check_untyped(topic, "consumer")
            return
        compatibility.validate(schema)
        if _find_same((await self.storage.read(topic)).live, schema) is not None:
            return  # the usual case: one read, no policies needed
        policies = await self.policies(topic)

        def check(history: SchemaHistory) -> tuple[bool, None]:
            live = history.live
            if _find_same(live, schema) is not None:
                return False, None
            if live:
                _refuse_unless(topic, compatibility.check_reader(policies.strategy, schema, _pairs(live)))
                return False, None
            if not policies.auto_update:
                raise IncompatibleSchemaError(
                    f"topic {_base(topic)} has no schema, and is_allow_auto_update_schema is off, so the "
                    f"consumer's {schema.type} schema cannot become its first: an admin must upload it "
                    "(REST POST .../schema, `herald admin schemas upload`)")
            history.append(schema)
            return True, None

        await self.storage.update(topic, check)

    async def _check_untyped(self, topic: str, who: str) -> None:
        """A producer or consumer without a schema: refused on a typed topic when validation is enforced."""
        live = (await self.storage.read(topic)).live
        if not live:
            return  # an untyped topic: nothing to enforce (and no policies to read)
        if (await self.policies(topic)).validation_enforced:
            raise IncompatibleSchemaError(
                f"topic {_base(topic)} has a {live[-1].schema.type} schema and schema_validation_enforced is on: "
                f"a {who} without a schema (or with the bytes schema) is refused; give it the topic's schema")

    async def get_or_create(self, topic: str, schema: SchemaInfo) -> int:
        """Pulsar's GET_OR_CREATE_SCHEMA: the schema's version, added as a producer's would be."""
        if schema.raw or _is_auto(schema):
            raise InvalidArgumentError(
                f"a {schema.type} schema has no version: only a typed schema can be got or created")
        version = await self.register_producer(topic, schema)
        assert version is not None  # a typed schema always gets one
        return version

    # ---- reading ----

    async def get(self, topic: str, version: int | None = None) -> tuple[int, SchemaInfo]:
        found = await self.entry(topic, version)
        return found.version, found.schema

    async def entry(self, topic: str, version: int | None = None) -> SchemaVersion:
        """A version (None: the latest) with its timestamp. A deleted lineage's versions stay readable
        by number (messages written with them may remain); NotFoundError when there is none."""
        history = await self.storage.read(topic)
        if version is None:
            live = history.live
            if not live:
                raise NotFoundError(f"topic {_base(topic)} has no schema")
            return live[-1]
        found = history.find(version)
        if found is None:
            raise NotFoundError(f"topic {_base(topic)} has no schema version {version}")
        return found

    async def history(self, topic: str) -> list[tuple[int, SchemaInfo]]:
        """The current lineage's versions, oldest first (empty when the topic has none)."""
        return _pairs((await self.storage.read(topic)).live)

    async def entries(self, topic: str) -> list[SchemaVersion]:
        return (await self.storage.read(topic)).live

    # ---- admin ----

    async def upload(self, topic: str, schema: SchemaInfo) -> int:
        """An admin adds a version (or gets the version of an identical one): checked by the
        strategy even when auto update is off."""
        if schema.raw or _is_auto(schema):
            raise InvalidArgumentError(f"a {schema.type} schema cannot be uploaded: it describes no structure "
                                       "(producers without a schema write raw bytes already)")
        compatibility.validate(schema)
        policies = await self.policies(topic)

        def add(history: SchemaHistory) -> tuple[bool, int]:
            live = history.live
            existing = _find_same(live, schema)
            if existing is not None:
                return False, existing.version
            _refuse_unless(topic, compatibility.check(policies.strategy, schema, _pairs(live)))
            return True, history.append(schema).version

        version = await self.storage.update(topic, add)
        log.info("schema version %d of %s uploaded (%s)", version, _base(topic), schema.type)
        return version

    async def test(self, topic: str, schema: SchemaInfo) -> str | None:
        """None when an admin's upload of `schema` would be accepted now, else why not."""
        if schema.raw or _is_auto(schema):
            return f"a {schema.type} schema cannot be uploaded: it describes no structure"
        try:
            compatibility.validate(schema)
        except InvalidArgumentError as error:
            return str(error)
        policies = await self.policies(topic)
        live = (await self.storage.read(topic)).live
        if _find_same(live, schema) is not None:
            return None
        return compatibility.check(policies.strategy, schema, _pairs(live))

    async def delete(self, topic: str) -> int | None:
        """Delete every version (the next schema starts a new lineage, numbered on); the last version
        it had, None when it had none."""

        def mark(history: SchemaHistory) -> tuple[bool, int | None]:
            last = history.delete_all()
            return last is not None, last

        return await self.storage.update(topic, mark)

    async def remove(self, topic: str) -> None:
        """The topic is deleted: its history goes, numbering too."""
        await self.storage.remove(topic)


def _base(topic: str) -> str:
    return str(TopicName.parse(topic).base)


def _is_auto(schema: SchemaInfo) -> bool:
    return schema.type.upper() in compatibility.AUTO_TYPES


def _pairs(versions: list[SchemaVersion]) -> list[tuple[int, SchemaInfo]]:
    return [(v.version, v.schema) for v in versions]


def _find_same(versions: list[SchemaVersion], schema: SchemaInfo) -> SchemaVersion | None:
    return next((v for v in reversed(versions) if compatibility.same(v.schema, schema)), None)


def _refuse_unless(topic: str, reason: str | None) -> None:
    if reason is not None:
        raise IncompatibleSchemaError(
            f"the schema is incompatible with topic {_base(topic)}'s: {reason}. Evolve it compatibly, change the "
            "topic's schema_compatibility_strategy, or use another topic")
