"""Where a topic's schema history is kept: one metadata-store key per topic, /schemas/<topic> (a
partition's under its partitioned topic's name: the partitions of a topic share one history), holding
JSON {"next": n, "versions": [{"version", "schema", "timestamp", "deleted"}...]}, changed only by
compare-and-set (SchemaStorage.update retries when another broker wrote first).

Versions are 0, 1, 2... and never reused while the key lives: an admin's delete marks every version
deleted (they stay readable by number, for messages written with them, but the next schema starts a
new lineage, numbered on from `next`); deleting the topic removes the key (a topic made again under
the name starts at 0, as Pulsar's forced schema deletion does). The policy half is
broker.core.schema_registry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import BadVersionError
from herald.metadata.store import MetadataStore

SCHEMAS_PREFIX = "/schemas/"
T = TypeVar("T")



def schema_key(topic: str) -> str:
    """Where a topic's schema history is kept: under its partitioned topic's name."""
    return SCHEMAS_PREFIX + str(TopicName.parse(topic).base)


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    version: int
    schema: SchemaInfo
    timestamp: int  # milliseconds since the epoch, when it was added (Pulsar's GetSchemaResponse has it)
    deleted: bool = False


@dataclass(slots=True)
class SchemaHistory:
    """A topic's versions, oldest first, and the number the next one gets."""

    versions: list[SchemaVersion] = field(default_factory=list)
    next_version: int = 0

    @property
    def live(self) -> list[SchemaVersion]:
        """The current lineage: the versions not deleted."""
        return [v for v in self.versions if not v.deleted]

    def find(self, version: int) -> SchemaVersion | None:
        return next((v for v in self.versions if v.version == version), None)

    def append(self, schema: SchemaInfo) -> SchemaVersion:
        added = SchemaVersion(self.next_version, schema, int(time.time() * 1000))
        self.versions.append(added)
        self.next_version += 1
        return added

    def delete_all(self) -> int | None:
        """Mark the lineage deleted; the last version it had (None: it had none)."""
        live = self.live
        if not live:
            return None
        self.versions = [SchemaVersion(v.version, v.schema, v.timestamp, True) for v in self.versions]
        return live[-1].version

    def to_json(self) -> bytes:
        return json.dumps({"next": self.next_version, "versions": [
            {"version": v.version, "schema": json.loads(v.schema.to_json()), "timestamp": v.timestamp,
             "deleted": v.deleted} for v in self.versions]}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, value: bytes) -> SchemaHistory:
        document: dict[str, Any] = json.loads(value)
        if "versions" not in document:
            # The one schema a topic kept before the registry (type, data, properties): its version 0.
            return cls([SchemaVersion(0, SchemaInfo.from_json(value), 0)], 1)
        versions = [SchemaVersion(int(v["version"]), SchemaInfo.from_json(json.dumps(v["schema"]).encode()),
                                  int(v.get("timestamp", 0)), bool(v.get("deleted", False)))
                    for v in document["versions"]]
        return cls(versions, int(document.get("next", len(versions))))


class SchemaStorage:
    """Reads and compare-and-set updates of topics' schema histories."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def read(self, topic: str) -> SchemaHistory:
        stored = await self._store.get(schema_key(topic))
        return SchemaHistory.from_json(stored.value) if stored is not None else SchemaHistory()

    async def update(self, topic: str, change: Callable[[SchemaHistory], tuple[bool, T]]) -> T:
        """Apply `change` to the topic's history and store it if change says so (its first result),
        again on a fresh read whenever another writer won the compare-and-set; change's second result
        is returned. `change` may raise to refuse (nothing is stored)."""
        key = schema_key(topic)
        while True:
            stored = await self._store.get(key)
            history = SchemaHistory.from_json(stored.value) if stored is not None else SchemaHistory()
            write, answer = change(history)
            if not write:
                return answer
            try:
                await self._store.compare_and_set(key, stored, history.to_json())
            except BadVersionError:
                continue
            return answer

    async def remove(self, topic: str) -> None:
        """Forget the topic's history, its numbering too (the topic is deleted)."""
        await self._store.delete(schema_key(topic))
