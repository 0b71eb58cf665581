"""Conversions between the admin contract's messages and the broker core's types (stats, internal
stats, positions, reset targets), so that the admin servicer stays a thin adapter. Stats convert
both ways: a partitioned topic's stats sum partitions that other brokers report over the wire."""

from __future__ import annotations

from herald.api.v1 import admin_pb2, broker_pb2, common_pb2
from herald.broker.core.compaction.topic_compaction import CompactionInfo
from herald.broker.core.cursor import InitialPosition, PublishTime, ResetTarget
from herald.broker.core.ledger_list import Position
from herald.broker.core.stats import (
    ConsumerStats,
    CursorStats,
    InternalStats,
    LedgerStats,
    ProducerStats,
    SubscriptionStats,
    TopicStats,
)
from herald.common.errors import InvalidArgumentError
from herald.metadata.resources import StoredDeadLetterPolicy

_EDGES = {broker_pb2.EARLIEST: InitialPosition.EARLIEST, broker_pb2.LATEST: InitialPosition.LATEST}


def position_to_proto(position: Position) -> common_pb2.Position:
    return common_pb2.Position(ledger_id=position.ledger_id, entry_id=position.entry_id)


def position_from_proto(position: common_pb2.Position) -> Position:
    return Position(position.ledger_id, position.entry_id)


def edge_from_proto(edge: int) -> InitialPosition:
    try:
        return _EDGES[edge]  # type: ignore[index]
    except KeyError:
        raise InvalidArgumentError(f"unknown initial position {edge}: use EARLIEST or LATEST") from None


def subscription_start(request: admin_pb2.CreateSubscriptionRequest) -> Position | InitialPosition:
    """Where a subscription created by the admin API starts (default: latest)."""
    if request.WhichOneof("start") == "position":
        return position_from_proto(request.position)
    return edge_from_proto(request.edge)


def reset_target(request: admin_pb2.ResetCursorRequest) -> ResetTarget:
    which = request.WhichOneof("target")
    if which == "position":
        return position_from_proto(request.position)
    if which == "publish_time":
        return PublishTime(request.publish_time)
    if which == "edge":
        return edge_from_proto(request.edge)
    raise InvalidArgumentError("reset cursor needs a target: a position, a publish time or an edge")


# ---- stats ----

def topic_stats_to_proto(stats: TopicStats) -> admin_pb2.TopicStats:
    return admin_pb2.TopicStats(
        topic=stats.topic, msg_in_counter=stats.msg_in_counter, bytes_in_counter=stats.bytes_in_counter,
        entries=stats.entries, storage_size=stats.storage_size,
        producers=[admin_pb2.ProducerStats(
            producer_name=p.producer_name, msg_in_counter=p.msg_in_counter, bytes_in_counter=p.bytes_in_counter,
            msg_rate_in=p.msg_rate_in, msg_throughput_in=p.msg_throughput_in, properties=p.properties,
        ) for p in stats.producers],
        subscriptions=[_subscription_to_proto(s) for s in stats.subscriptions],
        msg_rate_in=stats.msg_rate_in, msg_throughput_in=stats.msg_throughput_in,
        msg_rate_out=stats.msg_rate_out, msg_throughput_out=stats.msg_throughput_out,
        msg_out_counter=stats.msg_out_counter, bytes_out_counter=stats.bytes_out_counter,
        backlog_size=stats.backlog_size, terminated=stats.terminated, persistent=stats.persistent,
        msg_dropped_counter=stats.msg_dropped_counter, partitions=stats.partitions,
        partition_stats=[topic_stats_to_proto(p) for p in stats.partition_stats],
    )


def _subscription_to_proto(stats: SubscriptionStats) -> admin_pb2.SubscriptionStats:
    return admin_pb2.SubscriptionStats(
        name=stats.name, type=stats.type, consumers=stats.consumers, msg_out_counter=stats.msg_out_counter,
        bytes_out_counter=stats.bytes_out_counter, backlog_entries=stats.backlog_entries,
        msg_backlog=stats.msg_backlog, backlog_size=stats.backlog_size,
        unacked_messages=stats.unacked_messages, msg_rate_out=stats.msg_rate_out,
        msg_throughput_out=stats.msg_throughput_out, dead_letters=stats.dead_letters,
        delayed_messages=stats.delayed_messages, durable=stats.durable,
        msg_expired_counter=stats.msg_expired_counter, msg_dropped_counter=stats.msg_dropped_counter,
        consumer_stats=[admin_pb2.ConsumerStats(
            consumer_name=c.consumer_name, msg_out_counter=c.msg_out_counter, bytes_out_counter=c.bytes_out_counter,
            msg_rate_out=c.msg_rate_out, msg_throughput_out=c.msg_throughput_out,
            unacked_messages=c.unacked_messages, available_permits=c.available_permits,
            priority_level=c.priority_level, is_active=c.is_active,
            key_hash_ranges=[admin_pb2.KeyHashRange(start=start, end=end) for start, end in c.key_hash_ranges],
            properties=c.properties,
        ) for c in stats.consumer_stats],
    )


def topic_stats_from_proto(stats: admin_pb2.TopicStats) -> TopicStats:
    return TopicStats(
        topic=stats.topic, msg_in_counter=stats.msg_in_counter, bytes_in_counter=stats.bytes_in_counter,
        entries=stats.entries, storage_size=stats.storage_size,
        producers=[ProducerStats(p.producer_name, p.msg_in_counter, p.bytes_in_counter, p.msg_rate_in,
                                 p.msg_throughput_in, dict(p.properties)) for p in stats.producers],
        subscriptions=[_subscription_from_proto(s) for s in stats.subscriptions],
        msg_rate_in=stats.msg_rate_in, msg_throughput_in=stats.msg_throughput_in,
        msg_rate_out=stats.msg_rate_out, msg_throughput_out=stats.msg_throughput_out,
        msg_out_counter=stats.msg_out_counter, bytes_out_counter=stats.bytes_out_counter,
        backlog_size=stats.backlog_size, terminated=stats.terminated, persistent=stats.persistent,
        msg_dropped_counter=stats.msg_dropped_counter, partitions=stats.partitions,
        partition_stats=[topic_stats_from_proto(p) for p in stats.partition_stats],
    )


def _subscription_from_proto(stats: admin_pb2.SubscriptionStats) -> SubscriptionStats:
    return SubscriptionStats(
        name=stats.name, type=stats.type, consumers=stats.consumers, msg_out_counter=stats.msg_out_counter,
        bytes_out_counter=stats.bytes_out_counter, backlog_entries=stats.backlog_entries,
        msg_backlog=stats.msg_backlog, backlog_size=stats.backlog_size,
        unacked_messages=stats.unacked_messages, msg_rate_out=stats.msg_rate_out,
        msg_throughput_out=stats.msg_throughput_out, dead_letters=stats.dead_letters,
        delayed_messages=stats.delayed_messages, durable=stats.durable,
        msg_expired_counter=stats.msg_expired_counter, msg_dropped_counter=stats.msg_dropped_counter,
        consumer_stats=[ConsumerStats(
            c.consumer_name, c.msg_out_counter, c.bytes_out_counter, c.msg_rate_out, c.msg_throughput_out,
            c.unacked_messages, c.available_permits, c.priority_level, c.is_active,
            [(r.start, r.end) for r in c.key_hash_ranges], dict(c.properties),
        ) for c in stats.consumer_stats],
    )


def internal_stats_to_proto(stats: InternalStats) -> admin_pb2.InternalStats:
    return admin_pb2.InternalStats(
        topic=stats.topic, state=stats.state, number_of_entries=stats.number_of_entries,
        total_size=stats.total_size, current_ledger_id=stats.current_ledger_id,
        last_confirmed_entry=position_to_proto(stats.last_confirmed_entry),
        ledgers=[_ledger_to_proto(ledger) for ledger in stats.ledgers],
        cursors=[_cursor_to_proto(cursor) for cursor in stats.cursors],
    )


def _ledger_to_proto(ledger: LedgerStats) -> admin_pb2.LedgerStats:
    return admin_pb2.LedgerStats(ledger_id=ledger.ledger_id, entries=ledger.entries, size=ledger.size)


def _cursor_to_proto(cursor: CursorStats) -> admin_pb2.CursorStats:
    return admin_pb2.CursorStats(
        name=cursor.name,
        mark_delete_position=position_to_proto(cursor.mark_delete_position),
        read_position=position_to_proto(cursor.read_position),
        individually_acked_ranges=[
            position_to_proto(end) for pair in cursor.individually_acked_ranges for end in pair
        ],
        backlog_entries=cursor.backlog_entries, durable=cursor.durable, properties=cursor.properties,
    )


def dead_letter_policy_to_proto(stored: StoredDeadLetterPolicy | None) -> broker_pb2.DeadLetterPolicy:
    """A subscription's stored dead-letter policy; none is max_redeliver_count 0."""
    if stored is None:
        return broker_pb2.DeadLetterPolicy()
    return broker_pb2.DeadLetterPolicy(max_redeliver_count=stored.max_redeliver_count,
                                       dead_letter_topic=stored.dead_letter_topic,
                                       retry_letter_topic=stored.retry_letter_topic)


def dead_letter_policy_from_proto(
    policy: broker_pb2.DeadLetterPolicy, role: str = "",
) -> StoredDeadLetterPolicy | None:
    """None (remove the policy) for max_redeliver_count 0; `role`: the admin's who sets it.
    InvalidArgumentError for a removal that names topics: nothing would use them, so nothing
    authorizes them (broker.authorization checks a policy's topics only when it sets one), and a
    request may not name a resource it does not act on."""
    if policy.max_redeliver_count == 0:
        for name in ("dead_letter_topic", "retry_letter_topic"):
            if value := getattr(policy, name):
                raise InvalidArgumentError(
                    f"max_redeliver_count 0 removes the subscription's dead-letter policy: leave {name} empty "
                    f"(it is {value!r}), or give a max_redeliver_count of 1 or more to set a policy")
        return None
    return StoredDeadLetterPolicy(policy.max_redeliver_count, policy.dead_letter_topic, policy.retry_letter_topic,
                                  role)


def compaction_status_to_proto(info: CompactionInfo) -> admin_pb2.CompactionStatus:
    return admin_pb2.CompactionStatus(
        status=info.status.value, last_error=info.error, compacted_ledger_id=info.ledger_id,
        horizon=position_to_proto(info.horizon), compacted_entries=info.entries, started_at=info.started_at,
        finished_at=info.finished_at, pending_ledger_id=info.pending_ledger_id)
