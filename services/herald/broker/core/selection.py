"""Who gets an entry, written once for stored and non-persistent subscriptions alike: Shared's round
robin within the highest priority level that can receive, and Failover's active consumer (Pulsar's
rules: first by priority level then name; on a partition, the partition index modulo the number of
highest-priority consumers, so a group's consumers share a topic's partitions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from herald.broker.core.consumer import ActiveConsumerChanged, Consumer


class RoundRobin:
    """Shared: the next consumer that can receive, at the highest priority (lowest level) among
    those that can; the turn moves on past whoever was chosen."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = 0

    def next(self, consumers: Sequence[Consumer]) -> Consumer | None:
        levels = [c.priority_level for c in consumers if c.can_receive]
        if not levels:
            return None
        level = min(levels)
        n = len(consumers)
        for k in range(n):
            index = (self._next + k) % n
            consumer = consumers[index]
            if consumer.priority_level == level and consumer.can_receive:
                self._next = index + 1
                return consumer
        return None


def choose_active(consumers: Sequence[Consumer], partition_index: int) -> Consumer | None:
    """Failover's active consumer among `consumers` (None without any)."""
    if not consumers:
        return None
    ranked = sorted(consumers, key=lambda c: (c.priority_level, c.name))
    top = [c for c in ranked if c.priority_level == ranked[0].priority_level]
    return top[partition_index % len(top)] if partition_index >= 0 else top[0]


class ActiveElection:
    """Failover's active consumer, elected again whenever consumers come or go. Consumers are told
    their status when it changes, and a joining one its status at once."""

    __slots__ = ("_partition_index", "active")

    def __init__(self, partition_index: int) -> None:
        self._partition_index = partition_index
        self.active: Consumer | None = None

    def leave(self, consumer: Consumer) -> bool:
        """A consumer left; True when it was the active one (elect() then chooses another)."""
        if consumer is self.active:
            self.active = None
            return True
        return False

    def elect(self, consumers: Sequence[Consumer], joined: Consumer | None = None,
              displaced: Callable[[Consumer], None] | None = None) -> None:
        """Choose the active consumer; `displaced` takes back what a replaced active one held."""
        chosen = choose_active(consumers, self._partition_index)
        previous = self.active
        if chosen is not previous:
            if previous is not None:
                if displaced is not None:
                    displaced(previous)
                previous.notify_event(ActiveConsumerChanged(is_active=False))
            self.active = chosen
            if chosen is not None:
                chosen.notify_event(ActiveConsumerChanged(is_active=True))
        if joined is not None and joined is not chosen:
            joined.notify_event(ActiveConsumerChanged(is_active=False))

    def clear(self) -> None:
        self.active = None
