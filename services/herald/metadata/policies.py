"""Policies of a namespace or a topic (admin.proto's Policies): every field optional, None meaning
"inherit". A topic's effective policies are its own overrides merged over its namespace's, merged
over the broker's defaults (`merged_over`). Stored as JSON by herald.metadata.resources; nested
policies (retention, backlog quota, persistence) are set and cleared as a whole.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from herald.common.errors import InvalidArgumentError

# Pulsar's SchemaCompatibilityStrategy values (UNDEFINED: the namespace's, else the broker's).
SCHEMA_COMPATIBILITY_STRATEGIES = (
    "UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
    "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
)


class BacklogQuotaPolicy(enum.Enum):
    """What happens once a topic's backlog is over its quota."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"  # sends wait until the backlog shrinks
    PRODUCER_EXCEPTION = "producer_exception"  # sends fail with BacklogQuotaExceededError
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"  # the slowest cursors are moved on

    @classmethod
    def parse(cls, text: str) -> BacklogQuotaPolicy:
        try:
            return cls(text.lower().replace("-", "_"))
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise InvalidArgumentError(f"backlog quota policy {text!r} is invalid: use one of {choices}") from None


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long consumed data is kept: while within both limits (-1: no limit, 0: none)."""

    time_seconds: int = 0
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """Limits on the unacknowledged data of the slowest subscription (0 or -1: no limit)."""

    limit_bytes: int = -1
    limit_seconds: int = -1
    policy: BacklogQuotaPolicy = BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD

    @property
    def limits_size(self) -> bool:
        return self.limit_bytes > 0

    @property
    def limits_age(self) -> bool:
        return self.limit_seconds > 0


@dataclass(frozen=True, slots=True)
class PersistencePolicy:
    """Storage quorums of new ledgers: E nodes, Qw copies of each entry, acknowledged after Qa."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int


@dataclass(frozen=True, slots=True)
class Policies:
    retention: RetentionPolicy | None = None
    message_ttl_seconds: int | None = None  # 0: messages never expire
    backlog_quota: BacklogQuota | None = None
    max_producers_per_topic: int | None = None  # 0: unlimited
    max_consumers_per_topic: int | None = None  # 0: unlimited
    max_consumers_per_subscription: int | None = None  # 0: unlimited
    deduplication_enabled: bool | None = None
    encryption_required: bool | None = None
    persistence: PersistencePolicy | None = None
    max_message_size: int | None = None
    max_topics: int | None = None  # namespace policies only; 0: unlimited
    # Namespace policies only: partitions of one partitioned topic; at least 1 (no unlimited).
    max_partitions_per_topic: int | None = None
    # Pulsar's schema compatibility strategy (SCHEMA_COMPATIBILITY_STRATEGIES): how a topic's new
    # schema versions must relate to its earlier ones.
    schema_compatibility_strategy: str | None = None
    # Refuse producers and consumers without a schema on a topic that has one.
    schema_validation_enforced: bool | None = None
    # Whether producers may add schema versions (false: only admins upload them).
    is_allow_auto_update_schema: bool | None = None
    # Backlog bytes not yet compacted beyond which the broker compacts the topic; 0: never.
    compaction_threshold: int | None = None

    # ---- merging ----

    def merged_over(self, base: Policies) -> Policies:
        """These policies where set, `base`'s elsewhere."""
        return Policies(**{
            name: mine if (mine := getattr(self, name)) is not None else getattr(base, name)
            for name in POLICY_FIELDS
        })

    def without(self, names: Iterable[str]) -> Policies:
        """These policies with the named fields cleared (inherited again)."""
        cleared = {check_field_name(name): None for name in names}
        return dataclasses.replace(self, **cleared)

    def is_complete(self) -> bool:
        """Whether every field is set (effective policies are)."""
        return all(getattr(self, name) is not None for name in POLICY_FIELDS)

    # ---- validation ----

    def validate(self) -> Policies:
        """Raise InvalidArgumentError naming the first invalid field; returns self."""
        if (retention := self.retention) is not None:
            _at_least(retention.time_seconds, -1, "retention time_seconds", "-1 (forever), 0 (none) or seconds")
            _at_least(retention.size_bytes, -1, "retention size_bytes", "-1 (unlimited), 0 (none) or bytes")
        if self.message_ttl_seconds is not None:
            _at_least(self.message_ttl_seconds, 0, "message_ttl_seconds", "0 (never expire) or seconds")
        if (quota := self.backlog_quota) is not None:
            _at_least(quota.limit_bytes, -1, "backlog quota limit_bytes", "-1 or 0 (no limit) or bytes")
            _at_least(quota.limit_seconds, -1, "backlog quota limit_seconds", "-1 or 0 (no limit) or seconds")
        for name in ("max_producers_per_topic", "max_consumers_per_topic", "max_consumers_per_subscription",
                     "max_topics"):
            value = getattr(self, name)
            if value is not None:
                _at_least(value, 0, name, "0 (unlimited) or a positive number")
        if (persistence := self.persistence) is not None:
            e, qw, qa = persistence.ensemble_size, persistence.write_quorum, persistence.ack_quorum
            if not e >= qw >= qa >= 1:
                problem = ("ack quorum must be at least 1" if qa < 1 else
                           f"ack quorum {qa} > write quorum {qw}" if qa > qw else
                           f"write quorum {qw} > ensemble size {e}")
                raise InvalidArgumentError(
                    f"persistence {e}/{qw}/{qa} is invalid: {problem}; "
                    "need ensemble size >= write quorum >= ack quorum >= 1")
        if self.max_partitions_per_topic is not None and self.max_partitions_per_topic < 1:
            raise InvalidArgumentError(
                f"max_partitions_per_topic {self.max_partitions_per_topic} is invalid: use 1 or more (there is no "
                "unlimited), or clear the policy to inherit the broker's setting")
        strategy = self.schema_compatibility_strategy
        if strategy is not None and strategy not in SCHEMA_COMPATIBILITY_STRATEGIES:
            raise InvalidArgumentError(
                f"schema_compatibility_strategy {strategy!r} is invalid: use one of "
                f"{', '.join(SCHEMA_COMPATIBILITY_STRATEGIES)}")
        if self.compaction_threshold is not None:
            _at_least(self.compaction_threshold, 0, "compaction_threshold", "0 (never automatically) or bytes")
        if self.max_message_size is not None and self.max_message_size < 1:
            raise InvalidArgumentError(
                f"max_message_size {self.max_message_size} is invalid: it must be a positive number of bytes")
        return self

    # ---- JSON ----

    def to_json(self) -> dict[str, Any]:
        """The set fields only, nested policies as objects, the quota policy by its name."""
        doc: dict[str, Any] = {}
        for name in POLICY_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if dataclasses.is_dataclass(value):
                value = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
            doc[name] = value
        return doc

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Policies:
        unknown = set(doc) - set(POLICY_FIELDS)
        if unknown:
            raise InvalidArgumentError(f"unknown policies {sorted(unknown)}: known ones are {', '.join(POLICY_FIELDS)}")
        values: dict[str, Any] = dict(doc)
        try:
            if (retention := doc.get("retention")) is not None:
                values["retention"] = RetentionPolicy(int(retention["time_seconds"]), int(retention["size_bytes"]))
            if (quota := doc.get("backlog_quota")) is not None:
                values["backlog_quota"] = BacklogQuota(
                    int(quota["limit_bytes"]), int(quota["limit_seconds"]), BacklogQuotaPolicy.parse(quota["policy"]))
            if (persistence := doc.get("persistence")) is not None:
                values["persistence"] = PersistencePolicy(
                    int(persistence["ensemble_size"]), int(persistence["write_quorum"]),
                    int(persistence["ack_quorum"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"policies {doc!r} are malformed: {exc!r}") from exc
        return cls(**values)

    @classmethod
    def from_bytes(cls, raw: bytes) -> Policies:
        return cls.from_json(json.loads(raw)) if raw else cls()


POLICY_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Policies))


def check_field_name(name: str) -> str:
    if name not in POLICY_FIELDS:
        raise InvalidArgumentError(f"{name!r} is not a policy: use one of {', '.join(POLICY_FIELDS)}")
    return name


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _at_least(value: int, low: int, what: str, meaning: str) -> None:
    if value < low:
        raise InvalidArgumentError(f"{what} {value} is invalid: use {meaning}")
