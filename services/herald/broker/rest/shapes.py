"""Herald's stats and policies in Pulsar's JSON shapes (field names as Pulsar's admin API answers
them: TopicStats, PartitionedTopicStats, PersistentTopicInternalStats, RetentionPolicies,
BacklogQuota, Policies, MessageId)."""

from __future__ import annotations

from typing import Any

from herald.broker.core.ledger_list import Position
from herald.broker.core.stats import ConsumerStats, InternalStats, SubscriptionStats, TopicStats
from herald.broker.rest.paths import typed
from herald.common.errors import InvalidArgumentError
from herald.metadata.policies import BacklogQuota, BacklogQuotaPolicy, Policies, RetentionPolicy

MB = 1024 * 1024
# Pulsar's backlog quota types: the size limit and the age limit of one Herald BacklogQuota.
DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"


def _average(total_bytes: int, count: int) -> float:
    return total_bytes / count if count else 0.0


def _consumer(stats: ConsumerStats) -> dict[str, Any]:
    return {
        "consumerName": stats.consumer_name, "msgRateOut": stats.msg_rate_out,
        "msgThroughputOut": stats.msg_throughput_out, "bytesOutCounter": stats.bytes_out_counter,
        "msgOutCounter": stats.msg_out_counter, "availablePermits": stats.available_permits,
        "unackedMessages": stats.unacked_messages, "priorityLevel": stats.priority_level,
        "keyHashRanges": [f"[{start}, {end}]" for start, end in stats.key_hash_ranges],
        "metadata": dict(stats.properties),
    }


def _subscription(stats: SubscriptionStats) -> dict[str, Any]:
    return {
        "msgRateOut": stats.msg_rate_out, "msgThroughputOut": stats.msg_throughput_out,
        "bytesOutCounter": stats.bytes_out_counter, "msgOutCounter": stats.msg_out_counter,
        "msgBacklog": stats.msg_backlog, "backlogSize": stats.backlog_size,
        "unackedMessages": stats.unacked_messages, "type": stats.type, "isDurable": stats.durable,
        "msgDelayed": stats.delayed_messages, "msgRateExpired": 0.0,
        "totalMsgExpired": stats.msg_expired_counter, "msgDropRate": 0.0,
        "consumers": [_consumer(c) for c in stats.consumer_stats],
        "isReplicated": False,
    }


def topic_stats(stats: TopicStats) -> dict[str, Any]:
    """Pulsar's TopicStats (and, with partitions, PartitionedTopicStats's metadata and partitions)."""
    doc: dict[str, Any] = {
        "msgRateIn": stats.msg_rate_in, "msgThroughputIn": stats.msg_throughput_in,
        "msgRateOut": stats.msg_rate_out, "msgThroughputOut": stats.msg_throughput_out,
        "bytesInCounter": stats.bytes_in_counter, "msgInCounter": stats.msg_in_counter,
        "bytesOutCounter": stats.bytes_out_counter, "msgOutCounter": stats.msg_out_counter,
        "averageMsgSize": _average(stats.bytes_in_counter, stats.msg_in_counter),
        "storageSize": stats.storage_size, "backlogSize": stats.backlog_size,
        "msgChunkPublished": False, "offloadedStorageSize": 0,
        "publishers": [{
            "producerName": p.producer_name, "msgRateIn": p.msg_rate_in, "msgThroughputIn": p.msg_throughput_in,
            "averageMsgSize": _average(p.bytes_in_counter, p.msg_in_counter), "metadata": dict(p.properties),
        } for p in stats.producers],
        "subscriptions": {s.name: _subscription(s) for s in stats.subscriptions},
        "replication": {},
        "deduplicationStatus": "Disabled",
    }
    if stats.partitions:
        doc["metadata"] = {"partitions": stats.partitions}
        doc["partitions"] = {p.topic: topic_stats(p) for p in stats.partition_stats}
    return doc


def position_text(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


def internal_stats(stats: InternalStats) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats."""
    current = [ledger for ledger in stats.ledgers if ledger.ledger_id == stats.current_ledger_id]
    return {
        "entriesAddedCounter": stats.number_of_entries, "numberOfEntries": stats.number_of_entries,
        "totalSize": stats.total_size,
        "currentLedgerEntries": current[0].entries if current else 0,
        "currentLedgerSize": current[0].size if current else 0,
        "lastConfirmedEntry": position_text(stats.last_confirmed_entry), "state": stats.state,
        "waitingCursorsCount": 0, "pendingAddEntriesCount": 0,
        "ledgers": [{"ledgerId": ledger.ledger_id, "entries": ledger.entries, "size": ledger.size,
                     "offloaded": False} for ledger in stats.ledgers],
        "cursors": {cursor.name: {
            "markDeletePosition": position_text(cursor.mark_delete_position),
            "readPosition": position_text(cursor.read_position),
            "messagesConsumedCounter": 0, "numberOfEntriesSinceFirstNotAckedMessage": cursor.backlog_entries,
            "individuallyDeletedMessages": "[" + ", ".join(
                f"({position_text(start)}..{position_text(end)}]" for start, end in cursor.individually_acked_ranges
            ) + "]",
            "state": "Open", "active": True, "properties": dict(cursor.properties),
        } for cursor in stats.cursors},
    }


# ---- policies ----

def retention_to_json(policy: RetentionPolicy | None) -> dict[str, int]:
    """RetentionPolicies: minutes and MB (-1: no limit)."""
    if policy is None:
        return {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    minutes = -1 if policy.time_seconds < 0 else policy.time_seconds // 60
    size = -1 if policy.size_bytes < 0 else policy.size_bytes // MB
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}


def retention_from_json(doc: Any) -> RetentionPolicy:
    doc = typed(doc, dict, "the retention policies")
    minutes = typed(doc.get("retentionTimeInMinutes", 0), int, "retentionTimeInMinutes")
    size = typed(doc.get("retentionSizeInMB", 0), int, "retentionSizeInMB")
    if minutes < -1 or size < -1:
        raise InvalidArgumentError(
            f"retention {minutes} minutes / {size} MB is invalid: use 0 or more, or -1 for no limit")
    return RetentionPolicy(time_seconds=-1 if minutes < 0 else minutes * 60, size_bytes=-1 if size < 0 else size * MB)


def _quota_type(text: str | None) -> str:
    kind = (text or DESTINATION_STORAGE).lower()
    if kind not in (DESTINATION_STORAGE, MESSAGE_AGE):
        raise InvalidArgumentError(
            f"backlogQuotaType {text!r} is invalid: use {DESTINATION_STORAGE} or {MESSAGE_AGE}")
    return kind


def backlog_quota_map(quota: BacklogQuota | None) -> dict[str, Any]:
    """Pulsar's backlog quota map: the size limit as destination_storage, the age one as message_age."""
    if quota is None:
        return {}
    doc: dict[str, Any] = {}
    policy = quota.policy.value
    if quota.limits_size:
        doc[DESTINATION_STORAGE] = {"limitSize": quota.limit_bytes, "limitTime": -1, "policy": policy}
    if quota.limits_age:
        doc[MESSAGE_AGE] = {"limitSize": -1, "limitTime": quota.limit_seconds, "policy": policy}
    return doc


def set_backlog_quota(current: BacklogQuota | None, kind: str | None, doc: Any) -> BacklogQuota:
    """`current` with Pulsar's BacklogQuota of `kind` (its policy applies to both limits: Herald keeps one)."""
    kind = _quota_type(kind)
    doc = typed(doc, dict, "the backlog quota")
    base = current or BacklogQuota()
    policy = BacklogQuotaPolicy.parse(typed(doc.get("policy", base.policy.value), str, "policy"))
    if kind == DESTINATION_STORAGE:
        limit = typed(doc.get("limitSize", doc.get("limit", -1)), int, "limitSize")
        return BacklogQuota(limit_bytes=limit, limit_seconds=base.limit_seconds, policy=policy)
    limit = typed(doc.get("limitTime", -1), int, "limitTime")
    return BacklogQuota(limit_bytes=base.limit_bytes, limit_seconds=limit, policy=policy)


def remove_backlog_quota(current: BacklogQuota | None, kind: str | None) -> BacklogQuota | None:
    kind = _quota_type(kind)
    if current is None:
        return None
    left = BacklogQuota(limit_bytes=-1 if kind == DESTINATION_STORAGE else current.limit_bytes,
                        limit_seconds=-1 if kind == MESSAGE_AGE else current.limit_seconds, policy=current.policy)
    return None if not left.limits_size and not left.limits_age else left


def policies_to_json(policies: Policies) -> dict[str, Any]:
    """The namespace Policies fields Herald keeps, by Pulsar's names."""
    return {
        "retention_policies": retention_to_json(policies.retention) if policies.retention else None,
        "message_ttl_in_seconds": policies.message_ttl_seconds,
        "backlog_quota_map": backlog_quota_map(policies.backlog_quota),
        "deduplicationEnabled": policies.deduplication_enabled,
        "encryption_required": bool(policies.encryption_required),
        "max_producers_per_topic": policies.max_producers_per_topic,
        "max_consumers_per_topic": policies.max_consumers_per_topic,
        "max_consumers_per_subscription": policies.max_consumers_per_subscription,
        "max_topics_per_namespace": policies.max_topics,
        "schema_compatibility_strategy": policies.schema_compatibility_strategy or "UNDEFINED",
        "replication_clusters": [], "bundles": {"numBundles": 1, "boundaries": ["0x00000000", "0xffffffff"]},
    }


def policies_from_json(doc: Any) -> Policies:
    """A namespace's Policies from the JSON body of a namespace creation (the fields Herald keeps)."""
    if doc is None:
        return Policies()
    doc = typed(doc, dict, "the namespace policies")
    retention = doc.get("retention_policies")
    ttl = doc.get("message_ttl_in_seconds")
    dedup = doc.get("deduplicationEnabled")
    strategy = doc.get("schema_compatibility_strategy")
    strategy = None if strategy is None else typed(strategy, str, "schema_compatibility_strategy")
    quota = None
    for kind, value in (typed(doc.get("backlog_quota_map") or {}, dict, "backlog_quota_map")).items():
        quota = set_backlog_quota(quota, kind, value)
    return Policies(
        retention=None if retention is None else retention_from_json(retention),
        message_ttl_seconds=None if ttl is None else typed(ttl, int, "message_ttl_in_seconds"),
        deduplication_enabled=None if dedup is None else typed(dedup, bool, "deduplicationEnabled"),
        schema_compatibility_strategy=strategy,
        backlog_quota=quota,
    )


def message_id_json(position: Position, partition: int = -1) -> dict[str, int]:
    return {"ledgerId": position.ledger_id, "entryId": position.entry_id, "partitionIndex": partition}


def position_from_json(doc: Any) -> Position:
    """A Position from Pulsar's MessageIdImpl JSON ({"ledgerId": .., "entryId": ..})."""
    doc = typed(doc, dict, "the message id")
    ledger = typed(doc.get("ledgerId"), int, "ledgerId")
    entry = typed(doc.get("entryId"), int, "entryId")
    return Position(ledger, entry)
