"""Ledger metadata kept in the metadata store at /ledgers/<id>: ensemble history, quorums, state and
last entry, changed only by compare-and-set so that two writers can never both close or recover one
ledger differently.

The ensemble is a history, as BookKeeper's `ensembles: {first entry id: nodes}`: when a node fails
the writer records a new ensemble from the first entry not yet acknowledged, so each entry's write
set comes from the ensemble in force for it. JSON form:

    {"ledger_id": 7, "ensembles": [[0, ["a:1", "b:1", "c:1"]], [120, ["a:1", "d:1", "c:1"]]],
     "write_quorum": 2, "ack_quorum": 2, "state": "OPEN", "last_entry_id": -1, "length": 0, ...}

`length` is the ledger's size in bytes once closed by its writer; while it is OPEN it is the size of
the entries before the last ensemble's first entry (the writer records it at each ensemble change).
A ledger closed by recovery records its exact size too (the writer piggybacks the length with each
add, and the nodes report it with their last entry); only for entries written without it (by an
older writer) is it a lower bound: that plus the entries recovered after the LAC (see
storage.client.recovery).
"""

from __future__ import annotations

import bisect
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from herald.common.errors import InvalidArgumentError, LedgerNotFoundError, MetadataError
from herald.metadata.store import MetadataStore, Versioned

LEDGER_ID_COUNTER = "/counters/ledger-id"
LedgerState = Literal["OPEN", "IN_RECOVERY", "CLOSED"]


def ledger_key(ledger_id: int) -> str:
    return f"/ledgers/{ledger_id:020d}"


@dataclass
class LedgerMetadata:
    ledger_id: int
    # [first entry id, nodes] in increasing first entry id; the last one is the current ensemble.
    ensembles: list[tuple[int, list[str]]]
    write_quorum: int
    ack_quorum: int
    state: LedgerState = "OPEN"
    last_entry_id: int = -1
    length: int = 0
    created_at: float = field(default_factory=time.time)
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def ensemble(self) -> list[str]:
        """The current ensemble: where new entries go."""
        return self.ensembles[-1][1]

    @property
    def ensemble_start(self) -> int:
        """The first entry id of the current ensemble."""
        return self.ensembles[-1][0]

    @property
    def ensemble_size(self) -> int:
        return len(self.ensemble)

    def ensemble_for(self, entry_id: int) -> list[str]:
        """The ensemble in force for an entry: the last one starting at or before it."""
        ensembles = self.ensembles
        if len(ensembles) == 1 or entry_id >= ensembles[-1][0]:
            return ensembles[-1][1]
        at = bisect.bisect_right(ensembles, entry_id, key=lambda item: item[0]) - 1
        return ensembles[max(at, 0)][1]

    def write_set(self, entry_id: int) -> list[str]:
        """The Qw nodes that hold an entry: BookKeeper's round-robin striping over its ensemble."""
        ensemble = self.ensemble_for(entry_id)
        size = len(ensemble)
        if size == self.write_quorum:
            return ensemble
        return [ensemble[(entry_id + i) % size] for i in range(self.write_quorum)]

    def all_nodes(self) -> list[str]:
        """Every node that any ensemble of the history names, each once."""
        return list(dict.fromkeys(node for _, nodes in self.ensembles for node in nodes))

    def with_ensemble(self, first_entry_id: int, nodes: list[str], length_before: int) -> LedgerMetadata:
        """A copy with a new ensemble from first_entry_id on (replacing one that starts there)."""
        kept = [(first, list(ens)) for first, ens in self.ensembles if first < first_entry_id]
        copy = LedgerMetadata.from_bytes(self.to_bytes())
        copy.ensembles = [*kept, (first_entry_id, list(nodes))]
        copy.length = length_before
        return copy

    def to_bytes(self) -> bytes:
        doc = asdict(self)
        doc["ensembles"] = [[first, list(nodes)] for first, nodes in self.ensembles]
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> LedgerMetadata:
        doc: dict[str, Any] = json.loads(raw)
        if "ensemble" in doc:  # written before ensemble changes existed: one ensemble from entry 0
            doc["ensembles"] = [[0, doc.pop("ensemble")]]
        ensembles = [(int(first), [str(n) for n in nodes]) for first, nodes in doc.pop("ensembles")]
        if not ensembles:
            raise MetadataError(f"ledger metadata {doc.get('ledger_id')} has no ensemble")
        return cls(ensembles=ensembles, **doc)


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
