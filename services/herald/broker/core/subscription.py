"""A durable subscription: a cursor in the topic's managed ledger, the consumers attached to it and
the dispatcher (chosen by subscription type) that feeds them. Acks and redelivery requests arrive
here from consumers; the redelivery count of each entry is kept here, per subscription, and so is
the dead-letter policy: entries that reached its limit are lent to the broker's dead-letter queue."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable

from herald.broker.core.batch_acks import BatchAcks
from herald.broker.core.compacted_reads import NO_COMPACTION, CompactedSource, check_read_compacted
from herald.broker.core.consumer import Consumer, EndOfTopic
from herald.broker.core.cursor import InitialPosition, ManagedCursor
from herald.broker.core.dead_letters import DeadLetterPolicy, DeadLetterQueue
from herald.broker.core.dispatcher import Dispatcher
from herald.broker.core.hash_ranges import KeySharedMeta
from herald.broker.core.key_shared import KeySharedDispatcher
from herald.broker.core.managed_ledger import ManagedLedger, Position
from herald.broker.core.shared import SharedDispatcher
from herald.broker.core.single_active import ExclusiveDispatcher, FailoverDispatcher
from herald.broker.core.subscription_type import SubscriptionType, check_can_join, validate_priority_level
from herald.broker.settings import BrokerSettings
from herald.common.errors import ConsumerBusyError, NotAllowedError

__all__ = ["InitialPosition", "Subscription", "SubscriptionType", "validate_priority_level"]

_DISPATCHERS: dict[SubscriptionType, type[Dispatcher]] = {
    SubscriptionType.EXCLUSIVE: ExclusiveDispatcher,
    SubscriptionType.SHARED: SharedDispatcher,
    SubscriptionType.FAILOVER: FailoverDispatcher,
    SubscriptionType.KEY_SHARED: KeySharedDispatcher,
}
_NO_CUMULATIVE = (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)


class Subscription:
    """A stored topic's subscription (its cursor is durable unless it is a reader's)."""

    def __init__(
        self, topic_name: str, cursor: ManagedCursor, ledger: ManagedLedger, settings: BrokerSettings,
        *, dead_letters: DeadLetterQueue | None = None,
        compaction: Callable[[], CompactedSource] = lambda: NO_COMPACTION,
    ) -> None:
        self.topic_name = topic_name
        self.name = cursor.name
        self.cursor = cursor
        self.ledger = ledger
        self._settings = settings
        self.type = SubscriptionType.EXCLUSIVE
        self.dispatcher: Dispatcher | None = None
        self.redelivery_counts: dict[Position, int] = {}
        self.batch_acks = BatchAcks()  # messages of batches acknowledged by index (in memory only)
        self.redelivered_counter = 0  # entries put back for delivery again (each counts once per time)
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        # The broker's dead-letter queue (None: dead-letter policies are not applied here) and the
        # policy in force: the one an admin set for the subscription (kept in the metadata store),
        # else the latest subscriber's (clients send theirs on every subscribe).
        self.dead_letters = dead_letters
        self.dead_letter_policy: DeadLetterPolicy | None = None
        self._admin_dead_letter_policy: DeadLetterPolicy | None = None
        self._subscriber_dead_letter_policy: DeadLetterPolicy | None = None
        self.dead_lettered_counter = 0  # entries moved to the dead-letter topic, then acknowledged
        # A reader's subscription (non-durable): in memory only, gone when its last consumer leaves.
        self.durable = cursor.durable
        self.msg_expired_counter = 0  # messages acknowledged by the message TTL
        # Called when the last consumer left (the topic drops non-durable subscriptions then).
        self.on_idle: Callable[[Subscription], None] | None = None
        self._told_end_of_topic: set[int] = set()  # consumer ids told ReachedEndOfTopic
        self.closed = False
        self._consumer_ids = itertools.count(1)
        self._compaction = compaction  # the topic's, looked up on each read: it is loaded with the topic

    @property
    def compaction(self) -> CompactedSource:
        """The topic's compacted view, for read_compacted consumers (broker.core.compacted_reads)."""
        return self._compaction()

    @property
    def reads_compacted(self) -> bool:
        """Whether a consumer reads it compacted (Exclusive and Failover only: one consumer at a
        time reads, so a seek from any of them moves a read_compacted subscription)."""
        return any(consumer.read_compacted for consumer in self.consumers)

    def set_dead_letter_policies(
        self, *, admin: DeadLetterPolicy | None, subscriber: DeadLetterPolicy | None = None,
        keep_subscriber: bool = False,
    ) -> None:
        """The admin's policy (None: none set) wins over the subscriber's; `keep_subscriber` keeps the
        latest subscriber's (an admin change, no subscribe)."""
        self._admin_dead_letter_policy = admin
        if not keep_subscriber:
            self._subscriber_dead_letter_policy = subscriber
        self.dead_letter_policy = admin if admin is not None else self._subscriber_dead_letter_policy

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher is not None else []

    async def add_consumer(
        self, sub_type: SubscriptionType, consumer_name: str | None, priority_level: int = 0,
        key_shared: KeySharedMeta | None = None, *, read_compacted: bool = False,
    ) -> Consumer:
        if self.closed:
            raise NotAllowedError(f"subscription {self.name} on {self.topic_name} is closed")
        validate_priority_level(priority_level)
        if read_compacted:
            check_read_compacted(sub_type, persistent=True)
        dispatcher_class = _DISPATCHERS[sub_type]
        has_consumers = self.dispatcher is not None and bool(self.dispatcher.consumers)
        check_can_join(self.name, self.type, has_consumers, sub_type)
        if not has_consumers and (self.dispatcher is None or sub_type is not self.type):
            if self.dispatcher is not None:
                await self.dispatcher.close()
                # The old dispatcher's replay set dies with it: read everything unacked again.
                self.cursor.rewind()
            self.type = sub_type
            self.dispatcher = dispatcher_class(self, self._settings)
            self.dispatcher.start()
        consumer = Consumer(self, next(self._consumer_ids), consumer_name or secrets.token_hex(5),
                            priority_level, self._settings.consumer_max_buffered_entries)
        consumer.key_shared = key_shared
        consumer.read_compacted = read_compacted  # before it joins: the dispatcher reads for it at once
        assert self.dispatcher is not None
        self.dispatcher.add_consumer(consumer)
        if self.ledger.terminated:
            self.check_end_of_topic()
        return consumer

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        if self.on_idle is not None and not self.consumers:
            self.on_idle(self)

    def notify(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.notify()

    def ack(self, consumer: Consumer, positions: list[Position], cumulative: bool,
            ack_sets: dict[Position, int] | None = None) -> None:
        """Acknowledge entries, or (ack_sets: position -> the bitmask of its batch's messages still
        unacknowledged, Pulsar's ack_set) some messages of their batches: an entry is acknowledged
        once all its messages are (broker.core.batch_acks). A cumulative ack with an ack set
        acknowledges every entry before its position and the messages the set leaves out."""
        if not positions:
            return
        counts = self.redelivery_counts
        pending = consumer.pending
        if cumulative:
            if self.type in _NO_CUMULATIVE:
                raise NotAllowedError(f"Cumulative ack is not allowed on a {self.type.label} subscription")
            position = max(positions)
            unacked = ack_sets.get(position) if ack_sets else None
            if unacked is not None and not self._acks_whole_batch(pending, position, unacked):
                # Up to a message inside a batch: the entries before it whole, that batch in part.
                position = Position(position.ledger_id, position.entry_id - 1)
            self.cursor.ack_cumulative(position)
            self.batch_acks.forget_up_to(position)
            # Pending is in dispatch order, which is position order on these subscription types.
            while pending:
                first = next(iter(pending))
                if first > position:
                    break
                pending.popitem(last=False)
            if counts:
                for done in [p for p in counts if p <= position]:
                    del counts[done]
        else:
            if ack_sets:
                positions = [p for p in dict.fromkeys(positions)
                             if p not in ack_sets or self._acks_whole_batch(pending, p, ack_sets[p])]
            self.cursor.ack(positions)
            self.batch_acks.forget(positions)
            for position in positions:
                pending.pop(position, None)
                if counts:
                    counts.pop(position, None)
        if self.dead_letters is not None:
            self.dead_letters.forget_acknowledged(self, self.cursor.is_acked)
        if self.dispatcher is not None:
            self.dispatcher.acked()
        if self.ledger.terminated:
            self.check_end_of_topic()

    def _acks_whole_batch(self, pending: dict[Position, int], position: Position, unacked: int) -> bool:
        """Record a batch-index ack; True when it leaves the entry acknowledged whole. Only an
        entry dispatched to the consumer (its size known) keeps a partial ack: of any other, the
        ack is dropped and the whole entry comes again (at-least-once)."""
        size = pending.get(position)
        if size is None:
            return False
        return self.batch_acks.ack(position, unacked, size)

    def hash_ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]:
        """Key_Shared: the slices of the key hash range the consumer owns (for stats); [] elsewhere."""
        return self.dispatcher.hash_ranges_of(consumer) if self.dispatcher is not None else []

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, positions)

    def negative_ack(self, consumer: Consumer, positions: list[Position], delay_ms: int) -> None:
        if self.dispatcher is not None and positions:
            self.dispatcher.negative_ack(consumer, positions, delay_ms)

    # ---- delayed delivery and dead letters ----

    @property
    def delayed_count(self) -> int:
        """Entries held until their deliver-at time (Shared and Key_Shared)."""
        return self.dispatcher.delayed_count if self.dispatcher is not None else 0

    @property
    def dead_letter_count(self) -> int:
        """Entries lent to the dead-letter queue and not moved yet (they stay unacknowledged)."""
        return self.dead_letters.count_for(self) if self.dead_letters is not None else 0

    def holds_dead_letter(self, position: Position) -> bool:
        return self.dead_letters is not None and self.dead_letters.holds(self, position)

    def hand_to_dead_letters(self, position: Position, data: bytes, redelivery_count: int) -> None:
        """The dispatcher's: an entry that reached the policy's limit goes to dead-letter processing."""
        if self.dead_letters is not None and self.dead_letter_policy is not None:
            self.dead_letters.hand_over(self, position, data, redelivery_count, self.dead_letter_policy)

    def dead_letter_moved(self, position: Position) -> None:
        """A dead-letter worker published the entry to its dead-letter topic: acknowledge it."""
        self.dead_lettered_counter += 1
        self.cursor.ack([position])
        self.redelivery_counts.pop(position, None)
        self.batch_acks.forget([position])
        if self.dispatcher is not None:
            self.dispatcher.acked()
        if self.ledger.terminated:
            self.check_end_of_topic()

    @property
    def backlog(self) -> int:
        return self.cursor.backlog

    async def close(self, reason: str = "the topic was unloaded", persist: bool = True) -> None:
        """Disconnect every consumer (their clients reconnect) and persist the cursor (not when
        another broker owns the topic now: its cursor is no longer ours to write)."""
        if self.closed:
            return
        self.closed = True
        for consumer in self.consumers:
            consumer._mark_closed(reason)
        if self.dead_letters is not None:
            self.dead_letters.withdraw(self)  # unacknowledged: the next owner hands them out again
        if self.dispatcher is not None:
            await self.dispatcher.close()
        if persist:
            await self.cursor.close()

    async def delete(self) -> None:
        """Unsubscribe: drop the cursor for good (only without consumers)."""
        if self.consumers:
            raise ConsumerBusyError(f"subscription {self.name} has consumers connected: close them first")
        self.closed = True
        if self.dead_letters is not None:
            self.dead_letters.withdraw(self)
        if self.dispatcher is not None:
            await self.dispatcher.close()
        await self.cursor.delete()

    # ---- moved by the broker: seek, reset, skip, expiry, termination ----

    def disconnect_consumers(self, reason: str) -> None:
        """Detach every consumer and close it (their clients reconnect), keeping the subscription."""
        for consumer in self.consumers:
            self.remove_consumer(consumer)
            consumer._mark_closed(reason)

    def reset_cursor(self, read_from: Position) -> None:
        """Move the cursor so that `read_from` is read next (seek / reset, like Pulsar): consumers
        are disconnected, the dispatcher forgets what it held, redelivery counts start again."""
        self.disconnect_consumers("the subscription was reset: reconnect")
        self.cursor.reset(read_from)
        self.redelivery_counts.clear()
        self.batch_acks.clear()
        if self.dead_letters is not None:
            self.dead_letters.forget_acknowledged(self, self.cursor.is_acked)
        if self.dispatcher is not None:
            self.dispatcher.reset()
        self._told_end_of_topic.clear()

    def cursor_moved(self) -> None:
        """The broker acknowledged entries itself (skip, message TTL): forget their redelivery
        counts, let the dispatcher move on, and tell consumers when a terminated topic is done."""
        counts = self.redelivery_counts
        if counts:
            for position in [p for p in counts if self.cursor.is_acked(p)]:
                del counts[position]
        self.batch_acks.forget_acknowledged(self.cursor.is_acked)
        if self.dead_letters is not None:
            self.dead_letters.forget_acknowledged(self, self.cursor.is_acked)
        self.notify()
        if self.ledger.terminated:
            self.check_end_of_topic()

    def check_end_of_topic(self) -> None:
        """Terminated topic and everything acknowledged: tell each consumer, once (Pulsar's
        reachedEndOfTopic)."""
        if not self.ledger.terminated or self.cursor.backlog > 0:
            return
        for consumer in self.consumers:
            if consumer.consumer_id not in self._told_end_of_topic:
                self._told_end_of_topic.add(consumer.consumer_id)
                consumer.notify_event(EndOfTopic())
