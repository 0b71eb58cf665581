"""The nemesis's checker on synthetic histories: each kind of violation is caught (a checker that
always passed would fail these), and a clean history passes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.chaos.nemesis.checker import Stored, check

TOPIC = "t"


Row = tuple[str, tuple[int, ...]]


def _history(acked: Sequence[Row], deliveries: dict[str, list[str]] | None = None,
             failed: Sequence[str] = ()) -> dict[str, Any]:
    sends = [{"producer": p.split(":")[0], "topic": TOPIC, "seq": int(p.split(":")[1]), "payload": p,
              "acked": True, "id": list(i)} for p, i in acked]
    sends += [{"producer": p.split(":")[0], "topic": TOPIC, "seq": int(p.split(":")[1]), "payload": p,
               "acked": False, "id": None} for p in failed]
    every = [p for p, _ in acked]
    subscriptions = deliveries if deliveries is not None else {"shared": every, "failover": every}
    return {"topics": {TOPIC: 0}, "subscriptions": sorted(subscriptions), "sends": sends,
            "deliveries": {TOPIC: {name: [[p, [0, 0, -1, -1]] for p in got] for name, got in subscriptions.items()}}}


ACKED: list[Row] = [("a:0", (1, 0, -1, -1)), ("a:1", (1, 1, -1, -1)), ("b:0", (1, 2, -1, -1)), ("a:2", (1, 3, -1, -1))]


def _stored(rows: Sequence[Row]) -> Stored:
    return {TOPIC: list(rows)}


def test_a_clean_history_passes() -> None:
    report = check(_history(ACKED), _stored(ACKED))
    assert report.ok, report.render()
    assert (report.acked, report.stored) == (4, 4)


def test_a_failed_send_may_be_stored_once() -> None:
    stored = [*ACKED, ("a:3", (1, 4, -1, -1))]
    assert check(_history(ACKED, failed=["a:3"]), _stored(stored)).ok


def test_a_lost_message_is_counted() -> None:
    report = check(_history(ACKED), _stored([row for row in ACKED if row[0] != "a:1"]))
    assert report.counts["lost"] == 1 and not report.ok
    assert "a:1" in report.render()


def test_a_stored_duplicate_is_counted() -> None:
    report = check(_history(ACKED), _stored([*ACKED, ("a:2", (1, 4, -1, -1))]))
    assert report.counts["duplicate"] == 1 and not report.ok


def test_a_reordering_is_counted() -> None:
    """a:1 stored (and acknowledged) at entry 0, before a:0 at entry 1."""
    swapped: list[Row] = [("a:1", (1, 0, -1, -1)), ("a:0", (1, 1, -1, -1)), *ACKED[2:]]
    acked: list[Row] = [("a:0", (1, 1, -1, -1)), ("a:1", (1, 0, -1, -1)), *ACKED[2:]]
    report = check(_history(acked), _stored(swapped))
    assert report.counts["reordered"] == 1 and not report.ok


def test_ids_that_do_not_increase_are_counted() -> None:
    stored = [ACKED[0], ACKED[2], ACKED[1], ACKED[3]]  # b:0 (entry 2) read before a:1 (entry 1)
    report = check(_history(ACKED), _stored(stored))
    assert report.counts["id-order"] == 1 and not report.ok


def test_a_message_stored_under_another_id_than_its_receipt_is_counted() -> None:
    stored = [*ACKED[:3], ("a:2", (2, 0, -1, -1))]
    report = check(_history(ACKED), _stored(stored))
    assert report.counts["wrong-id"] == 1 and not report.ok


def test_a_missing_delivery_is_counted() -> None:
    every = [p for p, _ in ACKED]
    report = check(_history(ACKED, {"shared": every, "failover": every[:-1]}), _stored(ACKED))
    assert report.counts["undelivered"] == 1 and not report.ok
    assert "failover" in report.render()


def test_a_message_nobody_sent_is_counted() -> None:
    report = check(_history(ACKED), _stored([*ACKED, ("z:0", (1, 9, -1, -1))]))
    assert report.counts["unknown"] == 1 and not report.ok


def test_a_duplicate_receipt_without_an_id_is_no_violation() -> None:
    """A resend that dedup recognised is answered with ledger -1 (Pulsar's way): the message is
    stored once, under the first send's id, which the producer never learnt."""
    acked: list[Row] = [*ACKED[:3], ("a:2", (-1, -1, -1, -1))]
    report = check(_history(acked), _stored(ACKED))
    assert report.ok, report.render()
    assert report.duplicate_receipts == 1


def test_a_copy_read_twice_under_one_id_is_a_redelivery_not_a_duplicate() -> None:
    """The read-back's consumer reconnected and got a range again: each stored copy counts once."""
    report = check(_history(ACKED), _stored([*ACKED[:3], *ACKED[1:3], ACKED[3]]))
    assert report.ok, report.render()
    assert (report.stored, report.redelivered) == (4, 2)
