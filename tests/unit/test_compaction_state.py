"""The compaction's record in the metadata store and its metrics, without a broker: the state
round-trips through its JSON (status names as Pulsar spells them), and a run's end is counted in
every family, errors included."""

from __future__ import annotations

import json

from herald.broker.core.compaction.compacted_ledger import decode_compacted, encode_compacted
from herald.broker.core.compaction.metrics import CompactionMetrics
from herald.broker.core.compaction.state import CompactionState, CompactionStatus, state_key
from herald.broker.core.ledger_list import Position
from prometheus_client import CollectorRegistry


def test_the_state_round_trips_through_its_json() -> None:
    state = CompactionState(ledger_id=12, horizon=Position(7, 99), entries=40, pending_ledger_id=13,
                            status=CompactionStatus.ERROR, error="storage said no", started_at=1.5, finished_at=2.5)
    doc = json.loads(state.to_json())
    assert doc["status"] == "ERROR" and doc["horizon"] == [7, 99]
    assert CompactionState.from_json(state.to_json()) == state
    assert CompactionState.from_json(b"{}") == CompactionState()  # NOT_RUN, no ledger, no horizon
    assert state_key("t/ns/persistent/x") == "/compaction/t/ns/persistent/x"


def test_a_compacted_entry_carries_its_original_position() -> None:
    data = encode_compacted(Position(3, 41), b"entry bytes")
    assert decode_compacted(data) == (Position(3, 41), b"entry bytes")


def test_a_runs_end_is_counted_in_every_family() -> None:
    registry = CollectorRegistry()
    metrics = CompactionMetrics(registry)
    assert registry.get_sample_value("herald_broker_compaction_runs_total", {"result": "error"}) == 0
    metrics.finished("success", 1.2, 1000, 90, 10, 40, 4096)
    metrics.finished("error", 0.1, 0, 0, 0, 0, 0)
    value = registry.get_sample_value
    assert value("herald_broker_compaction_runs_total", {"result": "success"}) == 1
    assert value("herald_broker_compaction_runs_total", {"result": "error"}) == 1
    assert value("herald_broker_compaction_duration_seconds_count") == 2
    totals = [value(f"herald_broker_compaction_{name}_total")
              for name in ("messages_read", "keys_kept", "keys_removed", "entries_written", "bytes_written")]
    assert totals == [1000, 90, 10, 40, 4096]
