"""Which resource owns a Herald object when several name it (Strimzi's ResourceConflict).

Two Topic resources naming the same Herald topic (same persistence, tenant, namespace and name,
from the same or different Kubernetes namespaces) would revert each other's policies at every
resync, and deleting either would delete the topic under the other. So exactly one of them owns
it: the one created first (creationTimestamp, then uid, so that every operator replica picks the
same one). The others are never applied: their status says Ready=False, reason ResourceConflict,
naming the owner, and deleting them leaves Herald alone. When the owner goes, the next one in that
order takes over on its next reconcile. Subscriptions likewise, by (topic, subscription name).

Pure code: the claims come from kopf indexes kept by herald_operator.handlers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Claim:
    """A resource naming a Herald object; claims order by age (the owner sorts first)."""

    created: str  # metadata.creationTimestamp, RFC 3339 in UTC: sorts as text
    uid: str
    kind: str
    namespace: str
    name: str

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} (uid {self.uid}, created {self.created or 'unknown'})"


def claim_of(kind: str, body: Mapping[str, Any]) -> Claim:
    metadata = body.get("metadata") or {}
    return Claim(str(metadata.get("creationTimestamp") or ""), str(metadata.get("uid") or ""), kind,
                 str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


def owner(mine: Claim, others: Iterable[Claim]) -> Claim:
    """The claim that owns the object among `mine` and `others` (which may include `mine`)."""
    return min([mine, *others])


def conflict_with(mine: Claim, others: Iterable[Claim]) -> Claim | None:
    """The resource owning what `mine` names, when it is another one; None when `mine` owns it."""
    first = owner(mine, others)
    return None if first.uid == mine.uid else first


def conflict_message(what: str, first: Claim) -> str:
    return (f"{what} is already managed by {first.describe()}, created before this one: this resource is not "
            f"applied (nothing in Herald is changed, created or deleted for it); delete it, or point it at "
            f"another name. It takes over when {first.kind} {first.namespace}/{first.name} is deleted")
