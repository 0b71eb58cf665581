"""A schema as the broker, the registry and both clients' wires see it: a type name (Pulsar's schema
type names, upper case: STRING, JSON, AVRO, PROTOBUF_NATIVE, KEY_VALUE...), the definition's bytes
and string properties. Protocol-neutral: each front end translates its own wire form to this one.

The bytes schema (NONE / BYTES) means raw payloads: no structure to agree on. Two schemas are the
same when their type and data are (Pulsar identifies a schema by the hash of those; properties are
kept and returned but not compared).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

_RAW_TYPES = frozenset({"NONE", "BYTES"})


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    type: str  # upper case: STRING, JSON, AVRO...
    data: bytes = b""
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def raw(self) -> bool:
        """The bytes schema: no structure to agree on."""
        return self.type.upper() in _RAW_TYPES

    def same_as(self, other: SchemaInfo) -> bool:
        return self.type.upper() == other.type.upper() and self.data == other.data

    def to_json(self) -> bytes:
        return json.dumps({"type": self.type.upper(), "data": base64.b64encode(self.data).decode(),
                           "properties": dict(self.properties)}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, value: bytes) -> SchemaInfo:
        doc = json.loads(value)
        return cls(str(doc["type"]), base64.b64decode(doc["data"]), dict(doc.get("properties", {})))
