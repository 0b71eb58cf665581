"""The topic ownership record both lookup (which assigns it) and brokers (which honour it) read:
/ownership/<topic> → the owning broker and the lease the key is bound to. /unloading/<topic> →
the broker that just unloaded the topic, on a short lease: lookup does not give the topic back
to that broker while another is live, so an unload moves the topic."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

OWNERSHIP_PREFIX = "/ownership/"
UNLOADING_PREFIX = "/unloading/"


def ownership_key(topic: str) -> str:
    return OWNERSHIP_PREFIX + topic


def unloading_key(topic: str) -> str:
    return UNLOADING_PREFIX + topic


@dataclass
class Owner:
    broker_id: str
    address: str
    lease_id: int

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Owner:
        return cls(**json.loads(raw))
