"""Ledger metadata kept in the metadata store at /ledgers/<id>: ensemble, quorums, state and last
entry, changed only by compare-and-set so that two writers can never both close or recover one
ledger differently."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Literal

from herald.common.errors import InvalidArgumentError, LedgerNotFoundError
from herald.metadata.store import MetadataStore, Versioned

LEDGER_ID_COUNTER = "/counters/ledger-id"
LedgerState = Literal["OPEN", "IN_RECOVERY", "CLOSED"]


def ledger_key(ledger_id: int) -> str:
    return f"/ledgers/{ledger_id:020d}"


@dataclass
class LedgerMetadata:
    ledger_id: int
    ensemble: list[str]
    write_quorum: int
    ack_quorum: int
    state: LedgerState = "OPEN"
    last_entry_id: int = -1
    length: int = 0
    created_at: float = field(default_factory=time.time)
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def ensemble_size(self) -> int:
        return len(self.ensemble)

    def write_set(self, entry_id: int) -> list[str]:
        """The Qw nodes that hold an entry: BookKeeper's round-robin striping over the ensemble."""
        size = len(self.ensemble)
        return [self.ensemble[(entry_id + i) % size] for i in range(self.write_quorum)]

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> LedgerMetadata:
        return cls(**json.loads(raw))


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    if not ensemble_size >= write_quorum >= ack_quorum >= 1:
        raise InvalidArgumentError(
            f"storage quorums E={ensemble_size} Qw={write_quorum} Qa={ack_quorum} are invalid: "
            "they must satisfy E >= Qw >= Qa >= 1"
        )


async def read_ledger_metadata(store: MetadataStore, ledger_id: int) -> tuple[LedgerMetadata, Versioned]:
    found = await store.get(ledger_key(ledger_id))
    if found is None:
        raise LedgerNotFoundError(f"ledger {ledger_id} does not exist")
    return LedgerMetadata.from_bytes(found.value), found
