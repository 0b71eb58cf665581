"""A topic's compaction state in the metadata store, one key per topic changed only by
compare-and-set: `/compaction/<managed ledger>` (JSON). It names the published compacted ledger
and its horizon, the ledger a run is writing (pending: deleted on load if the run died), and the
last run's status, error and times."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from herald.broker.core.ledger_list import Position
from herald.metadata.store import NOT_EXISTS, MetadataStore

NO_LEDGER = -1
NO_HORIZON = Position(-1, -1)


class CompactionStatus(enum.Enum):
    """Pulsar's names (LongRunningProcessStatus)."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


def state_key(ledger_name: str) -> str:
    return f"/compaction/{ledger_name}"


@dataclass(frozen=True, slots=True)
class CompactionState:
    ledger_id: int = NO_LEDGER  # the published compacted ledger
    horizon: Position = NO_HORIZON  # the topic's last position it covers
    entries: int = 0  # entries of the compacted ledger
    pending_ledger_id: int = NO_LEDGER  # being written by a run (delete it if the run died)
    status: CompactionStatus = CompactionStatus.NOT_RUN
    error: str = ""
    started_at: float = 0.0  # unix seconds, the last run's start
    finished_at: float = 0.0

    def to_json(self) -> bytes:
        doc: dict[str, Any] = asdict(self)
        doc["horizon"] = list(self.horizon)
        doc["status"] = self.status.value
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CompactionState:
        doc = json.loads(data)
        doc["horizon"] = Position(*doc.get("horizon", (-1, -1)))
        doc["status"] = CompactionStatus(doc.get("status", "NOT_RUN"))
        return cls(**doc)

    def but(self, **changes: Any) -> CompactionState:
        return replace(self, **changes)


class StateRecord:
    """The key and the version last read or written: every write is a compare-and-set on it (a
    lost one means another broker owns the topic now: BadVersionError)."""

    def __init__(self, store: MetadataStore, ledger_name: str) -> None:
        self._store = store
        self.key = state_key(ledger_name)
        self._version = NOT_EXISTS
        self.state = CompactionState()

    async def load(self) -> CompactionState:
        got = await self._store.get(self.key)
        if got is not None:
            self.state = CompactionState.from_json(got.value)
            self._version = got.version
        return self.state

    async def write(self, state: CompactionState) -> None:
        self._version = await self._store.put(self.key, state.to_json(), expected_version=self._version)
        self.state = state

    async def delete(self) -> None:
        await self._store.delete(self.key)
        self._version = NOT_EXISTS
        self.state = CompactionState()
