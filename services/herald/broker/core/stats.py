"""What a topic reports about itself: the stats (counters, rates, backlogs of the topic, its
producers, subscriptions and consumers) and the internal stats (its managed ledger and cursors),
as plain dataclasses, the admin contract's TopicStats and InternalStats without gRPC. A partitioned
topic's stats are the sum of its partitions' (sum_partitions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from herald.broker.core.ledger_list import Position
from herald.common.bounded import Pacer


@dataclass(frozen=True, slots=True)
class LastMessageId:
    """The topic's last stored message (-1, -1 when it has none)."""

    ledger_id: int
    entry_id: int
    partition: int  # -1: not a partition
    batch_index: int  # the entry's last message in a batch; -1 when not batched


@dataclass(slots=True)
class ProducerStats:
    producer_name: str
    msg_in_counter: int = 0
    bytes_in_counter: int = 0
    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0  # bytes/s
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ConsumerStats:
    consumer_name: str
    msg_out_counter: int = 0
    bytes_out_counter: int = 0
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    unacked_messages: int = 0
    available_permits: int = 0
    priority_level: int = 0
    is_active: bool = False  # Failover: the active consumer
    # Key_Shared: the (start, end) slices of the key hash range 0..65535 it owns, inclusive.
    key_hash_ranges: list[tuple[int, int]] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class SubscriptionStats:
    name: str
    type: str
    consumers: int = 0
    msg_out_counter: int = 0
    bytes_out_counter: int = 0
    backlog_entries: int = 0
    msg_backlog: int = 0  # messages: entries times the topic's messages per entry
    backlog_size: int = 0  # bytes
    unacked_messages: int = 0
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    dead_letters: int = 0  # waiting to be moved to the dead-letter topic
    delayed_messages: int = 0  # held back until their deliver-at time
    durable: bool = True
    msg_expired_counter: int = 0  # acknowledged by the message TTL
    consumer_stats: list[ConsumerStats] = field(default_factory=list)
    msg_dropped_counter: int = 0  # non-persistent: not sent for lack of permits


@dataclass(slots=True)
class TopicStats:
    topic: str
    msg_in_counter: int = 0
    bytes_in_counter: int = 0
    entries: int = 0
    storage_size: int = 0
    producers: list[ProducerStats] = field(default_factory=list)
    subscriptions: list[SubscriptionStats] = field(default_factory=list)
    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    msg_out_counter: int = 0
    bytes_out_counter: int = 0
    backlog_size: int = 0  # bytes not yet acknowledged by the slowest subscription
    terminated: bool = False
    persistent: bool = True
    msg_dropped_counter: int = 0  # non-persistent: over the pending limit
    partitions: int = 0  # a partitioned topic: how many, their own stats in partition_stats
    partition_stats: list[TopicStats] = field(default_factory=list)


@dataclass(slots=True)
class LedgerStats:
    ledger_id: int
    entries: int
    size: int


@dataclass(slots=True)
class CursorStats:
    name: str
    mark_delete_position: Position
    read_position: Position
    individually_acked_ranges: list[tuple[Position, Position]]  # closed ranges [start, end]
    backlog_entries: int
    durable: bool = True
    properties: dict[str, str] = field(default_factory=dict)  # none are set by Herald yet


@dataclass(slots=True)
class InternalStats:
    topic: str
    state: str  # the managed ledger's state
    number_of_entries: int
    total_size: int
    current_ledger_id: int
    last_confirmed_entry: Position
    ledgers: list[LedgerStats] = field(default_factory=list)
    cursors: list[CursorStats] = field(default_factory=list)


async def sum_partitions(topic: str, partitions: Sequence[TopicStats]) -> TopicStats:
    """A partitioned topic's stats: counters, rates and sizes summed over its partitions, producers
    and consumers listed together, each subscription (one per partition) summed by name; the
    partitions' own stats kept in partition_stats. Gives the event loop back between partitions
    (a topic may have thousands)."""
    total = TopicStats(topic, partitions=len(partitions), partition_stats=list(partitions),
                       terminated=bool(partitions), persistent=True)
    subscriptions: dict[str, SubscriptionStats] = {}
    pacer = Pacer()
    for part in partitions:
        await pacer.pace()
        total.terminated = total.terminated and part.terminated
        total.persistent = total.persistent and part.persistent
        total.msg_in_counter += part.msg_in_counter
        total.bytes_in_counter += part.bytes_in_counter
        total.entries += part.entries
        total.storage_size += part.storage_size
        total.msg_rate_in += part.msg_rate_in
        total.msg_throughput_in += part.msg_throughput_in
        total.msg_rate_out += part.msg_rate_out
        total.msg_throughput_out += part.msg_throughput_out
        total.msg_out_counter += part.msg_out_counter
        total.bytes_out_counter += part.bytes_out_counter
        total.backlog_size += part.backlog_size
        total.msg_dropped_counter += part.msg_dropped_counter
        total.producers.extend(part.producers)
        for sub in part.subscriptions:
            summed = subscriptions.get(sub.name)
            if summed is None:
                summed = subscriptions[sub.name] = SubscriptionStats(sub.name, sub.type, durable=sub.durable)
            _add_subscription(summed, sub)
    total.subscriptions = list(subscriptions.values())
    return total


def _add_subscription(total: SubscriptionStats, part: SubscriptionStats) -> None:
    total.consumers += part.consumers
    total.msg_out_counter += part.msg_out_counter
    total.bytes_out_counter += part.bytes_out_counter
    total.backlog_entries += part.backlog_entries
    total.msg_backlog += part.msg_backlog
    total.backlog_size += part.backlog_size
    total.unacked_messages += part.unacked_messages
    total.msg_rate_out += part.msg_rate_out
    total.msg_throughput_out += part.msg_throughput_out
    total.dead_letters += part.dead_letters
    total.delayed_messages += part.delayed_messages
    total.durable = total.durable and part.durable
    total.msg_expired_counter += part.msg_expired_counter
    total.msg_dropped_counter += part.msg_dropped_counter
    total.consumer_stats.extend(part.consumer_stats)
