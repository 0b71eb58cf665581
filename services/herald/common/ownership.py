"""The topic ownership record both lookup (which assigns it) and brokers (which honour it) read:
/ownership/<topic> → the owning broker and the lease the key is bound to."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

OWNERSHIP_PREFIX = "/ownership/"


def ownership_key(topic: str) -> str:
    return OWNERSHIP_PREFIX + topic


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
