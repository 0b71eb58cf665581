"""Policies <-> admin.proto's Policies message, for the admin servicer and client: unset proto
fields (HasField false) are None (inherited), and the other way round."""

from __future__ import annotations

from typing import Literal

from herald.api.v1 import admin_pb2
from herald.metadata.policies import BacklogQuota, BacklogQuotaPolicy, PersistencePolicy, Policies, RetentionPolicy

_QUOTA_POLICY_TO_PROTO = {
    BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD: admin_pb2.PRODUCER_REQUEST_HOLD,
    BacklogQuotaPolicy.PRODUCER_EXCEPTION: admin_pb2.PRODUCER_EXCEPTION,
    BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION: admin_pb2.CONSUMER_BACKLOG_EVICTION,
}
_QUOTA_POLICY_FROM_PROTO = {number: policy for policy, number in _QUOTA_POLICY_TO_PROTO.items()}
_SCALARS: tuple[Literal["message_ttl_seconds", "max_producers_per_topic", "max_consumers_per_topic",
                        "max_consumers_per_subscription", "deduplication_enabled", "encryption_required",
                        "max_message_size", "max_topics", "max_partitions_per_topic",
                        "schema_compatibility_strategy", "schema_validation_enforced",
                        "is_allow_auto_update_schema", "compaction_threshold"], ...] = (
    "message_ttl_seconds", "max_producers_per_topic", "max_consumers_per_topic",
    "max_consumers_per_subscription", "deduplication_enabled", "encryption_required", "max_message_size",
    "max_topics", "max_partitions_per_topic", "schema_compatibility_strategy", "schema_validation_enforced",
    "is_allow_auto_update_schema", "compaction_threshold")


def policies_from_proto(message: admin_pb2.Policies) -> Policies:
    values: dict[str, object] = {name: getattr(message, name) for name in _SCALARS if message.HasField(name)}
    if message.HasField("retention"):
        values["retention"] = RetentionPolicy(message.retention.time_seconds, message.retention.size_bytes)
    if message.HasField("backlog_quota"):
        quota = message.backlog_quota
        values["backlog_quota"] = BacklogQuota(
            quota.limit_bytes, quota.limit_seconds,
            _QUOTA_POLICY_FROM_PROTO.get(quota.policy, BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD))
    if message.HasField("persistence"):
        p = message.persistence
        values["persistence"] = PersistencePolicy(p.ensemble_size, p.write_quorum, p.ack_quorum)
    return Policies(**values)  # type: ignore[arg-type]


def policies_to_proto(policies: Policies) -> admin_pb2.Policies:
    message = admin_pb2.Policies()
    for name in _SCALARS:
        value = getattr(policies, name)
        if value is not None:
            setattr(message, name, value)
    if (retention := policies.retention) is not None:
        message.retention.CopyFrom(admin_pb2.RetentionPolicy(
            time_seconds=retention.time_seconds, size_bytes=retention.size_bytes))
    if (quota := policies.backlog_quota) is not None:
        message.backlog_quota.CopyFrom(admin_pb2.BacklogQuota(
            limit_bytes=quota.limit_bytes, limit_seconds=quota.limit_seconds,
            policy=_QUOTA_POLICY_TO_PROTO[quota.policy]))
    if (persistence := policies.persistence) is not None:
        message.persistence.CopyFrom(admin_pb2.PersistencePolicy(
            ensemble_size=persistence.ensemble_size, write_quorum=persistence.write_quorum,
            ack_quorum=persistence.ack_quorum))
    return message
