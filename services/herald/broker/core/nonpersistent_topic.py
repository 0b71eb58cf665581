"""A non-persistent topic (Pulsar's NonPersistentTopic): nothing is stored, deduplicated or kept for
redelivery. Each published entry is handed at once to the consumers connected at that moment that
have permits and buffer room, one per subscription; a subscription whose consumer cannot take it
misses it (its msg_dropped_counter). Receipts are always (-1, -1); deliveries are numbered
(-1, n), n growing per topic, so that clients can tell them apart.

Backpressure is a per-topic limit on entries on their way to consumers (handed to a consumer, not
yet taken by its stream: `non_persistent_max_pending`); a publish beyond it is dropped at the door,
still answered (-1, -1), and counted in the topic's msg_dropped_counter (SEEDS §4).

Subscriptions live only while they have consumers: there is no cursor to come back to.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Iterable
from typing import Any

from herald.broker.core.compacted_reads import check_read_compacted
from herald.broker.core.consumer import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_ENTRIES,
    Consumer,
    Delivery,
)
from herald.broker.core.cursor import InitialPosition
from herald.broker.core.hash_ranges import (
    AUTO_SPLIT,
    HashRanges,
    KeySharedMeta,
    KeySharedMode,
    StickyHashRanges,
    key_hash,
    sticky_key,
)
from herald.broker.core.ledger_list import Position
from herald.broker.core.producer import Producer
from herald.broker.core.publication import Publication
from herald.broker.core.selection import ActiveElection, RoundRobin
from herald.broker.core.stats import SubscriptionStats, TopicStats
from herald.broker.core.subscription_type import SubscriptionType, check_can_join
from herald.broker.core.topic_base import Topic
from herald.broker.settings import BrokerSettings
from herald.common.codec.entry import EntryMetadata
from herald.common.codec.names import TopicName
from herald.common.errors import BadVersionError, ConsumerBusyError, HeraldError, ServiceNotReadyError
from herald.metadata.store import NOT_EXISTS, MetadataStore

log = logging.getLogger(__name__)

NON_PERSISTENT_PREFIX = "/non-persistent-topics/"
NO_POSITION = (-1, -1)  # every receipt of a non-persistent topic
NON_PERSISTENT_LEDGER_ID = -1  # the ledger id of every delivery


def registration_key(topic: TopicName) -> str:
    """Where a non-persistent topic is recorded while it exists (the namespace's topic list reads it)."""
    return f"{NON_PERSISTENT_PREFIX}{topic.tenant}/{topic.namespace}/{topic.local_name}"


class PendingDeliveries:
    """Entries handed to consumers whose streams have not taken them yet, with how many deliveries
    of each are outstanding: their number is the topic's pending count."""

    def __init__(self) -> None:
        self._outstanding: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._outstanding)

    def add(self, entry_id: int, deliveries: int) -> None:
        self._outstanding[entry_id] = deliveries

    def taken(self, entry_ids: Iterable[int]) -> None:
        outstanding = self._outstanding
        for entry_id in entry_ids:
            left = outstanding.get(entry_id)
            if left is None:
                continue
            if left <= 1:
                del outstanding[entry_id]
            else:
                outstanding[entry_id] = left - 1

    def clear(self) -> None:
        self._outstanding.clear()


class NonPersistentConsumer(Consumer):
    """A Consumer (same permits, buffer and adapter side) whose deliveries are not tracked for
    acknowledgement, since nothing can be redelivered, and whose stream taking a delivery releases
    it from the topic's pending count."""

    def __init__(
        self, subscription: NonPersistentSubscription, consumer_id: int, name: str, priority_level: int,
        max_buffered: int, pending: PendingDeliveries,
    ) -> None:
        super().__init__(subscription, consumer_id, name, priority_level, max_buffered)
        self._topic_pending = pending

    def push(self, position: Position, data: bytes, num_messages: int, redelivery_count: int,
             span: Any = None, ack_set: int | None = None) -> None:
        super().push(position, data, num_messages, redelivery_count, span, ack_set)
        del self.pending[position]

    async def next_deliveries(
        self, max_entries: int = DEFAULT_MAX_BATCH_ENTRIES, max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> list[Delivery]:
        taken = await super().next_deliveries(max_entries, max_bytes)
        self._topic_pending.taken(d.entry_id for d in taken)
        return taken

    def release_buffered(self) -> None:
        """The consumer left: what its stream never took is no longer pending."""
        self._topic_pending.taken(p.entry_id for p in self.buffered_positions())


class NonPersistentSubscription:
    """The consumers of one subscription name and who gets each entry: Exclusive and Failover the
    one (active) consumer, Shared round-robin among those that can take it (highest priority level
    first), Key_Shared the consumer owning the key's slice of the hash range (broker.hash_ranges'
    auto-split, as on persistent topics; with nothing kept, there is no per-key order to guard
    across consumer changes). The choices are broker.selection's, as a stored subscription's."""

    durable = False

    def __init__(self, topic: NonPersistentTopic, name: str, sub_type: SubscriptionType) -> None:
        self.topic = topic
        self.topic_name = topic.name
        self.name = name
        self.type = sub_type
        self.consumers: list[NonPersistentConsumer] = []
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_dropped_counter = 0  # messages a consumer could not take (no permits or buffer room)
        self.redelivered_counter = 0  # nothing is kept to deliver again
        self.closed = False
        self._consumer_ids = itertools.count(1)
        self._round_robin = RoundRobin()  # Shared
        self._election = ActiveElection(topic.partition_index)  # Failover
        self.hash_ranges: HashRanges[Consumer] | StickyHashRanges[Consumer] = HashRanges()  # Key_Shared
        self.key_shared = AUTO_SPLIT  # the mode, set by the first Key_Shared consumer

    # ---- consumers ----

    def add_consumer(self, sub_type: SubscriptionType, consumer_name: str | None, priority_level: int,
                     key_shared: KeySharedMeta | None = None) -> Consumer:
        if self.closed:
            raise ServiceNotReadyError(f"subscription {self.name} on {self.topic_name} is closed: subscribe again")
        check_can_join(self.name, self.type, bool(self.consumers), sub_type)
        self.type = sub_type
        settings = self.topic.settings
        consumer = NonPersistentConsumer(
            self, next(self._consumer_ids), consumer_name or secrets.token_hex(5), priority_level,
            settings.consumer_max_buffered_entries, self.topic.pending)
        if sub_type is SubscriptionType.KEY_SHARED:
            self._join_ranges(consumer, key_shared or AUTO_SPLIT)
        self.consumers.append(consumer)
        if sub_type is SubscriptionType.FAILOVER:
            self._election.elect(self.consumers, joined=consumer)
        return consumer

    def _join_ranges(self, consumer: Consumer, meta: KeySharedMeta) -> None:
        """As a stored Key_Shared subscription: the first consumer sets the mode; STICKY consumers
        bring their ranges (a hash nobody owns is dropped here: nothing is kept to wait)."""
        if not self.consumers:
            self.key_shared = meta
            self.hash_ranges = StickyHashRanges() if meta.mode is KeySharedMode.STICKY else HashRanges()
        elif meta.mode is not self.key_shared.mode:
            raise ConsumerBusyError(
                f"Key_Shared subscription {self.name} has consumers in {self.key_shared.mode.name} mode; this "
                f"consumer asks for {meta.mode.name}: subscribe alike, or once they are gone")
        if isinstance(self.hash_ranges, StickyHashRanges):
            self.hash_ranges.add(consumer, meta.ranges)
        else:
            self.hash_ranges.add(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        mine = next((c for c in self.consumers if c is consumer), None)
        if mine is None:
            return
        self.consumers.remove(mine)
        mine.release_buffered()
        self.hash_ranges.remove(mine)
        if self.type is SubscriptionType.FAILOVER:
            self._election.leave(consumer)
            self._election.elect(self.consumers)
        if not self.consumers:
            self.topic.subscription_emptied(self)

    def hash_ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]:
        return self.hash_ranges.owned_by(consumer) if self.type is SubscriptionType.KEY_SHARED else []

    # ---- what a consumer sends: nothing to act on ----

    def notify(self) -> None:
        """Permits or buffer room arrived: nothing waits for them (nothing is kept to send later)."""

    def ack(self, consumer: Consumer, positions: list[Position], cumulative: bool,
            ack_sets: dict[Position, int] | None = None) -> None:
        """Accepted and ignored: nothing is kept to acknowledge."""

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Accepted and ignored: nothing is kept to redeliver."""

    def negative_ack(self, consumer: Consumer, positions: list[Position], delay_ms: int) -> None:
        """Accepted and ignored: nothing is kept to deliver again."""

    # ---- dispatch ----

    def dispatch(self, position: Position, data: bytes, num_messages: int, metadata: EntryMetadata) -> bool:
        """Hand the entry to the consumer whose turn or key it is; False (counted as dropped) when
        that consumer cannot take it now."""
        consumer = self._choose(metadata)
        if consumer is None or not consumer.can_receive:
            self.msg_dropped_counter += num_messages
            return False
        consumer.push(position, data, num_messages, 0)
        return True

    def _choose(self, metadata: EntryMetadata) -> Consumer | None:
        consumers = self.consumers
        if not consumers:
            return None
        if self.type is SubscriptionType.SHARED:
            return self._round_robin.next(consumers)
        if self.type is SubscriptionType.FAILOVER:
            return self._election.active
        if self.type is SubscriptionType.KEY_SHARED:
            return self.hash_ranges.owner_of(key_hash(sticky_key(metadata)))
        return consumers[0]

    def close(self, reason: str) -> None:
        """Disconnect every consumer (their clients reconnect or stop); what their streams never
        took is no longer pending."""
        self.closed = True
        for consumer in self.consumers:
            consumer.release_buffered()
            consumer._mark_closed(reason)
        self.consumers = []
        self._election.clear()
        self.hash_ranges = HashRanges()


class NonPersistentTopic(Topic[NonPersistentSubscription]):
    persistent = False

    def __init__(
        self, name: str, settings: BrokerSettings, store: MetadataStore, *, encryption_required: bool = False,
    ) -> None:
        super().__init__(name, settings, store)
        self.encryption_required = encryption_required
        self.pending = PendingDeliveries()
        self.msg_dropped_counter = 0  # messages refused at the door: over the pending limit
        self._entry_ids = itertools.count(0)

    async def load(self) -> None:
        """Record the topic in its namespace (kept until the topic is deleted)."""
        try:
            await self._store.put(registration_key(self.topic_name), b"{}", expected_version=NOT_EXISTS)
        except BadVersionError:
            pass  # recorded by an earlier load

    # ---- publishing ----

    def submit(self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int,
               entry: bytes, publication: Publication) -> None:
        """Check the entry and hand it to the consumers connected now. The publication completes at
        once: (-1, -1), also when the entry was dropped over the pending limit, or the check's error."""
        try:
            metadata = producer.check(entry, num_messages, encryption_required=self.encryption_required,
                                      max_message_size=self.max_message_size)
        except HeraldError as exc:
            publication.fail(exc)
            return
        messages = num_messages  # checked: at least 1, and what the entry's metadata says
        if len(self.pending) >= self.settings.non_persistent_max_pending:
            self.msg_dropped_counter += messages
        else:
            self._count_in(producer, messages, len(entry))
            if self.subscriptions:
                self._dispatch(entry, metadata, messages)
        publication.succeed(*NO_POSITION)

    def _dispatch(self, entry: bytes, metadata: EntryMetadata, messages: int) -> None:
        position = Position(NON_PERSISTENT_LEDGER_ID, next(self._entry_ids))
        deliveries = 0
        for subscription in self.subscriptions.values():
            if subscription.dispatch(position, entry, messages, metadata):
                deliveries += 1
        if deliveries:
            self.pending.add(position.entry_id, deliveries)

    # ---- subscriptions ----

    async def subscribe(
        self,
        subscription: str,
        sub_type: SubscriptionType,
        initial_position: InitialPosition = InitialPosition.LATEST,
        consumer_name: str | None = None,
        priority_level: int = 0,
        *,
        non_durable: bool = False,
        start_position: Position | None = None,
        start_inclusive: bool = False,
        key_shared: KeySharedMeta | None = None,
        read_compacted: bool = False,
    ) -> Consumer:
        """Attach a consumer; the subscription is made on first use and lives while it has consumers.
        Where it starts is moot: it gets what is published from now on. Nothing is stored, so
        nothing is compacted: read_compacted is refused."""
        self._check_subscribe(subscription, priority_level)
        if read_compacted:
            check_read_compacted(sub_type, persistent=False)
        sub = self.subscriptions.get(subscription)
        self._check_consumer_limits(sub)
        created = sub is None
        if sub is None:
            sub = self.subscriptions[subscription] = NonPersistentSubscription(self, subscription, sub_type)
        try:
            return sub.add_consumer(sub_type, consumer_name, priority_level, key_shared)
        except BaseException:
            if created:
                del self.subscriptions[subscription]
            raise

    def subscription_emptied(self, subscription: NonPersistentSubscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    async def unsubscribe(self, subscription: str, force: bool = False, *, requester: Consumer | None = None) -> None:
        """Drop a subscription, as on a persistent topic (it exists only while it has consumers)."""
        sub = self._subscription(subscription)
        self._check_unsubscribe(sub, force, requester)
        sub.close("the subscription was deleted")
        self.subscription_emptied(sub)
        log.info("topic %s: subscription %s deleted", self.name, subscription)

    # ---- stats ----

    def _fill_stats(
        self, stats: TopicStats, subscriptions: list[tuple[NonPersistentSubscription, SubscriptionStats]],
    ) -> None:
        """No storage or backlog: the drop counters."""
        for sub, sub_stats in subscriptions:
            sub_stats.msg_dropped_counter = sub.msg_dropped_counter
        stats.msg_dropped_counter = self.msg_dropped_counter

    # ---- life cycle ----

    async def close(self, *, owned: bool = True, reason: str = "the topic was unloaded") -> None:
        """Disconnect producers and consumers; nothing to persist (`owned` is for symmetry with
        persistent topics). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._close_producers()
        for sub in list(self.subscriptions.values()):
            sub.close(reason)
        self.subscriptions.clear()
        self.pending.clear()
        log.info("non-persistent topic %s closed", self.name)
