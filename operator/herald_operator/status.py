"""The status a resource shows: conditions Ready and Synced (type, status, reason, message,
lastTransitionTime, kept when the status does not change), a phase, observedGeneration and what
the last stats said. Pure code: handlers write what these functions return into `patch.status`.

Ready: the object exists in Herald. Synced: Herald matches the spec as far as it can.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from herald_operator.reconcile import Problem

READY = "Ready"
SYNCED = "Synced"

# Reasons besides the partition ones of herald_operator.reconcile.
RECONCILED = "Reconciled"
EXISTS = "Exists"
ADMIN_UNAVAILABLE = "AdminUnavailable"  # the admin API did not answer: retried with backoff
HERALD_REFUSED = "HeraldRefused"  # the admin API refused a change: fix the spec
INVALID_SPEC = "InvalidSpec"  # the spec asks for something Herald cannot do
TOPIC_NOT_FOUND = "TopicNotFound"  # a Subscription's topic: no such Topic resource, or not in Herald yet
RESOURCE_CONFLICT = "ResourceConflict"  # another resource, created first, owns the same Herald object
PAUSED = "ReconciliationPaused"  # the pause annotation is "true": nothing is reconciled

PERMANENT_REASONS = frozenset({HERALD_REFUSED, INVALID_SPEC, RESOURCE_CONFLICT})


def now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def condition(type_: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None, updates: Sequence[Mapping[str, str]],
) -> list[dict[str, Any]]:
    """`previous` with `updates` applied by type; lastTransitionTime moves only when status does."""
    merged: dict[str, dict[str, Any]] = {str(c.get("type")): dict(c) for c in previous or () if c.get("type")}
    for update in updates:
        old = merged.get(update["type"])
        since = old.get("lastTransitionTime") if old is not None and old.get("status") == update["status"] else None
        merged[update["type"]] = {**update, "lastTransitionTime": since or now()}
    return [merged[key] for key in sorted(merged)]


def find_condition(status: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for item in (status or {}).get("conditions") or ():
        if item.get("type") == type_:
            return item  # type: ignore[no-any-return]
    return None


def synced_conditions(exists: bool, problems: Sequence[Problem], what: str) -> list[dict[str, str]]:
    """Ready and Synced after a pass that reached Herald."""
    ready = (condition(READY, "True", EXISTS, f"{what} exists in Herald") if exists else
             condition(READY, "False", problems[0].reason if problems else "NotCreated", f"{what} does not exist"))
    if problems:
        synced = condition(SYNCED, "False", problems[0].reason, "; ".join(p.message for p in problems))
    else:
        synced = condition(SYNCED, "True", RECONCILED, "Herald matches the spec")
    return [ready, synced]


def failed_conditions(reason: str, message: str) -> list[dict[str, str]]:
    """After a pass that did not finish: Synced False; Ready unknown when Herald did not answer."""
    if reason == ADMIN_UNAVAILABLE:
        return [condition(READY, "Unknown", reason, message), condition(SYNCED, "False", reason, message)]
    return [condition(SYNCED, "False", reason, message)]


def conflict_conditions(message: str) -> list[dict[str, str]]:
    """A resource that is never applied: another one owns what it names (herald_operator.ownership)."""
    return [condition(READY, "False", RESOURCE_CONFLICT, message),
            condition(SYNCED, "False", RESOURCE_CONFLICT, message)]


def paused_conditions(message: str) -> list[dict[str, str]]:
    """Reconciliation paused by the annotation: Ready keeps what the last pass saw."""
    return [condition(SYNCED, "False", PAUSED, message)]


def phase(conditions: Sequence[Mapping[str, Any]]) -> str:
    by_type = {c.get("type"): c for c in conditions}
    synced, ready = by_type.get(SYNCED), by_type.get(READY)
    if synced is not None and synced.get("status") == "False" and synced.get("reason") == PAUSED:
        return "Paused"
    if synced is not None and synced.get("status") == "False" and synced.get("reason") in PERMANENT_REASONS:
        return "Failed"
    if ready is not None and ready.get("status") == "True":
        return "Ready"
    return "Pending"


def status_patch(
    previous: Mapping[str, Any] | None, updates: Sequence[Mapping[str, str]], generation: int | None,
    **fields: Any,
) -> dict[str, Any]:
    """The status to write: merged conditions, phase, observedGeneration and `fields`."""
    conditions = merge_conditions((previous or {}).get("conditions"), updates)
    patch: dict[str, Any] = {"conditions": conditions, "phase": phase(conditions), **fields}
    if generation is not None:
        patch["observedGeneration"] = generation
    return patch


def synced_transition(
    previous: Mapping[str, Any] | None, updates: Sequence[Mapping[str, str]],
) -> Mapping[str, str] | None:
    """The Synced condition in `updates` when it went False or changed its reason (worth an event)."""
    new = next((u for u in updates if u["type"] == SYNCED), None)
    if new is None or new["status"] != "False":
        return None
    old = find_condition(previous, SYNCED)
    if old is not None and old.get("status") == "False" and old.get("reason") == new["reason"]:
        return None
    return new
