"""Ledger metadata's ensemble history, read planning over it, and node health bookkeeping: no network."""

from __future__ import annotations

import json

import pytest
from herald.common.errors import MetadataError
from herald.storage.client.ledger_metadata import LedgerMetadata
from herald.storage.client.node_connection import NodePool
from herald.storage.client.replica_read import plan_run


def striped() -> LedgerMetadata:
    return LedgerMetadata(ledger_id=7, ensembles=[(0, ["a", "b", "c"])], write_quorum=2, ack_quorum=2)


def test_write_sets_stripe_round_robin_over_the_ensemble() -> None:
    metadata = striped()
    assert [metadata.write_set(e) for e in range(4)] == [["a", "b"], ["b", "c"], ["c", "a"], ["a", "b"]]


def test_each_entry_uses_the_ensemble_in_force_for_it() -> None:
    metadata = striped().with_ensemble(10, ["a", "d", "c"], length_before=1000)
    metadata = metadata.with_ensemble(20, ["a", "d"], length_before=2000)
    assert metadata.ensembles == [(0, ["a", "b", "c"]), (10, ["a", "d", "c"]), (20, ["a", "d"])]
    assert metadata.write_set(9) == ["a", "b"]
    assert metadata.write_set(10) == ["d", "c"]
    assert metadata.write_set(19) == ["d", "c"]
    assert metadata.write_set(20) == metadata.write_set(500) == ["a", "d"]
    assert (metadata.ensemble, metadata.ensemble_start, metadata.length) == (["a", "d"], 20, 2000)
    assert metadata.all_nodes() == ["a", "b", "c", "d"]


def test_a_new_ensemble_from_the_same_entry_replaces_the_last_one() -> None:
    metadata = striped().with_ensemble(5, ["a", "d", "c"], 0).with_ensemble(5, ["a", "e", "c"], 0)
    assert metadata.ensembles == [(0, ["a", "b", "c"]), (5, ["a", "e", "c"])]
    assert striped().with_ensemble(0, ["x", "y"], 0).ensembles == [(0, ["x", "y"])]


def test_metadata_round_trips_through_json_as_a_list_of_pairs() -> None:
    metadata = striped().with_ensemble(3, ["a", "d", "c"], 30)
    doc = json.loads(metadata.to_bytes())
    assert doc["ensembles"] == [[0, ["a", "b", "c"]], [3, ["a", "d", "c"]]]
    assert LedgerMetadata.from_bytes(metadata.to_bytes()) == metadata


def test_metadata_written_before_ensemble_history_still_reads() -> None:
    old = {"ledger_id": 3, "ensemble": ["a", "b"], "write_quorum": 2, "ack_quorum": 1, "state": "CLOSED",
           "last_entry_id": 9, "length": 90, "created_at": 1.0, "properties": {}}
    metadata = LedgerMetadata.from_bytes(json.dumps(old).encode())
    assert metadata.ensembles == [(0, ["a", "b"])] and metadata.last_entry_id == 9


def test_metadata_without_an_ensemble_is_refused() -> None:
    with pytest.raises(MetadataError, match="has no ensemble"):
        LedgerMetadata.from_bytes(json.dumps({"ledger_id": 1, "ensembles": [], "write_quorum": 1,
                                              "ack_quorum": 1}).encode())


def test_read_runs_follow_what_one_node_holds() -> None:
    full = LedgerMetadata(ledger_id=1, ensembles=[(0, ["a", "b"]), (50, ["a", "c"])], write_quorum=2,
                          ack_quorum=2)
    # E == Qw: a whole ensemble's entries in one read, and on into the next one through a shared node.
    last, candidates = plan_run(full, 0, 99)
    assert (last, candidates) == (99, ["a"])
    assert plan_run(full, 0, 99, excluded={"a"}) == (49, ["b"])
    assert plan_run(full, 0, 30, avoid={"a"}) == (30, ["b"])
    assert plan_run(full, 0, 30, excluded={"a", "b"}) == (0, [])
    # Striped: runs of Qw consecutive entries per node.
    assert plan_run(striped(), 0, 11) == (1, ["b"])
    assert plan_run(striped(), 2, 11) == (3, ["a"])


def test_a_quarantined_node_is_healthy_again_after_its_quarantine() -> None:
    now = [100.0]
    pool = NodePool(["a", "b", "c"], add_timeout=1, read_timeout=1, operation_timeout=1, quarantine_seconds=30,
                    clock=lambda: now[0])
    pool.quarantine("b", RuntimeError("test"))
    assert pool.healthy() == ["a", "c"] and pool.is_quarantined("b")
    assert pool.describe_health() == "2 of 3 storage nodes are healthy (quarantined: b)"
    assert pool.replacement({"a"}) == "c"
    assert pool.replacement({"a", "c"}) is None
    assert pool.new_ensemble(["a", "c"], {"c"}) == ["a"]  # no spare: shrink
    assert pool.read_order(["b", "a"])[-1] == "b"
    now[0] += 30
    assert pool.healthy() == ["a", "b", "c"]
    assert pool.new_ensemble(["a", "c"], {"c"}) == ["a", "b"]  # the spare takes the failed node's place
