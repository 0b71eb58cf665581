"""What a topic reports about itself: the stats (counters, rates, backlogs of the topic, its
producers, subscriptions and consumers) and the internal stats (its managed ledger and cursors),
as plain dataclasses, the admin contract's TopicStats and InternalStats without gRPC. A partitioned
topic's stats are the sum of its partitions' (sum_partitions)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from herald.broker.core.ledger_list import Position
from herald.broker.core.rates import Counters, RateMeters, Rates
from herald.common.bounded import Pacer

if TYPE_CHECKING:
    from herald.broker.core.subscription import Subscription
    from herald.broker.core.topic import PersistentTopic


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


class TopicStatsCollector:
    """Takes a persistent topic's stats and internal stats; holds its rate meters (broker.rates)."""

    def __init__(self, topic: PersistentTopic, rate_window: float) -> None:
        self._topic = topic
        self._rates = RateMeters(rate_window)

    def stats(self) -> TopicStats:
        topic = self._topic
        ledger = topic.ledger
        producers = list(topic.producers.values())
        subscriptions = list(topic.subscriptions.values())
        readings: dict[Hashable, Counters] = {topic: (topic.msg_in_counter, topic.bytes_in_counter)}
        for producer in producers:
            readings[producer] = (producer.msg_in_counter, producer.bytes_in_counter)
        for sub in subscriptions:
            for consumer in sub.consumers:
                readings[consumer] = (consumer.msg_out_counter, consumer.bytes_out_counter)
        rates = self._rates.sample(readings)

        entries = ledger.number_of_entries_total
        messages_per_entry = (topic.msg_in_counter / topic.entries_in_counter if topic.entries_in_counter
                              else 1.0)
        average_entry_size = ledger.storage_size / entries if entries else 0.0
        sub_stats = [self._subscription(sub, rates, messages_per_entry, average_entry_size)
                     for sub in subscriptions]
        msg_rate_in, throughput_in = rates[topic]
        return TopicStats(
            topic=topic.name,
            msg_in_counter=topic.msg_in_counter,
            bytes_in_counter=topic.bytes_in_counter,
            entries=entries,
            storage_size=ledger.storage_size,
            producers=[
                ProducerStats(p.name, p.msg_in_counter, p.bytes_in_counter, rates[p][0], rates[p][1], p.properties)
                for p in producers
            ],
            subscriptions=sub_stats,
            msg_rate_in=msg_rate_in,
            msg_throughput_in=throughput_in,
            msg_rate_out=sum(s.msg_rate_out for s in sub_stats),
            msg_throughput_out=sum(s.msg_throughput_out for s in sub_stats),
            msg_out_counter=sum(s.msg_out_counter for s in sub_stats),
            bytes_out_counter=sum(s.bytes_out_counter for s in sub_stats),
            backlog_size=max((s.backlog_size for s in sub_stats), default=0),
            terminated=topic.terminated,
            persistent=True,
        )

    def _subscription(
        self, sub: Subscription, rates: dict[Hashable, Rates], messages_per_entry: float, average_entry_size: float,
    ) -> SubscriptionStats:
        consumers = [
            ConsumerStats(
                consumer_name=c.name, msg_out_counter=c.msg_out_counter, bytes_out_counter=c.bytes_out_counter,
                msg_rate_out=rates[c][0], msg_throughput_out=rates[c][1], unacked_messages=c.unacked_messages,
                available_permits=c.permits, priority_level=c.priority_level, is_active=c.is_active,
                key_hash_ranges=sub.dispatcher.hash_ranges_of(c) if sub.dispatcher is not None else [],
                properties=c.properties,
            )
            for c in sub.consumers
        ]
        backlog = sub.backlog
        return SubscriptionStats(
            name=sub.name,
            type=sub.type.label,
            consumers=len(consumers),
            msg_out_counter=sub.msg_out_counter,
            bytes_out_counter=sub.bytes_out_counter,
            backlog_entries=backlog,
            msg_backlog=round(backlog * messages_per_entry),
            backlog_size=self._backlog_size(sub, backlog, average_entry_size),
            unacked_messages=sum(c.unacked_messages for c in consumers),
            msg_rate_out=sum(c.msg_rate_out for c in consumers),
            msg_throughput_out=sum(c.msg_throughput_out for c in consumers),
            dead_letters=sub.dead_letter_count,
            delayed_messages=sub.delayed_count,
            durable=sub.durable,
            msg_expired_counter=sub.msg_expired_counter,
            consumer_stats=consumers,
        )

    def _backlog_size(self, sub: Subscription, backlog: int, average_entry_size: float) -> int:
        """Bytes after the mark-delete position, less the individually acknowledged entries
        (counted at the average entry size: their sizes are not kept)."""
        if not backlog:
            return 0
        after_mark_delete = self._topic.ledger.size_after(sub.cursor.mark_delete_position)
        individually_acked = self._topic.ledger.number_of_entries(
            sub.cursor.mark_delete_position, self._topic.ledger.last_confirmed_position) - backlog
        return max(0, after_mark_delete - round(individually_acked * average_entry_size))

    def internal_stats(self) -> InternalStats:
        topic = self._topic
        ledger = topic.ledger
        return InternalStats(
            topic=topic.name,
            state=ledger.state.value,
            number_of_entries=ledger.number_of_entries_total,
            total_size=ledger.storage_size,
            current_ledger_id=ledger.current_ledger_id,
            last_confirmed_entry=ledger.last_confirmed_position,
            ledgers=[LedgerStats(info.ledger_id, info.entries, info.size) for info in ledger.ledgers],
            cursors=[
                CursorStats(
                    name=sub.name,
                    mark_delete_position=sub.cursor.mark_delete_position,
                    read_position=sub.cursor.read_position,
                    individually_acked_ranges=[
                        (Position(ledger_id, start), Position(ledger_id, end))
                        for ledger_id, start, end in sub.cursor.individually_acked
                    ],
                    backlog_entries=sub.backlog,
                    durable=sub.durable,
                )
                for sub in topic.subscriptions.values()
            ],
        )
