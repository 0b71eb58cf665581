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

import asyncio
import itertools
import logging
import secrets
from collections.abc import Hashable, Iterable
from typing import Any

from herald.broker.core.consumer import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_ENTRIES,
    ActiveConsumerChanged,
    Consumer,
    Delivery,
)
from herald.broker.core.key_shared import HashRanges, key_hash, sticky_key
from herald.broker.core.managed_ledger import Position
from herald.broker.core.producer import Producer
from herald.broker.core.rates import Counters, RateMeters
from herald.broker.core.stats import ConsumerStats, ProducerStats, SubscriptionStats, TopicStats
from herald.broker.core.subscription import SubscriptionType, validate_priority_level
from herald.broker.core.topic import PRODUCER_NAME_COUNTER
from herald.broker.settings import BrokerSettings
from herald.common.codec.entry import EntryMetadata
from herald.common.codec.names import TopicName, validate_subscription_name
from herald.common.errors import (
    BadVersionError,
    ConsumerBusyError,
    HeraldError,
    NotFoundError,
    PreconditionFailedError,
    ProducerBusyError,
    ServiceNotReadyError,
)
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
             span: Any = None) -> None:
        super().push(position, data, num_messages, redelivery_count, span)
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
    first), Key_Shared the consumer owning the key's slice of the hash range (broker.key_shared's
    auto-split, as on persistent topics; with nothing kept, there is no per-key order to guard
    across consumer changes)."""

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
        self.closed = False
        self._consumer_ids = itertools.count(1)
        self._next = 0  # Shared: where the round robin resumes
        self._active: NonPersistentConsumer | None = None  # Failover
        self.hash_ranges: HashRanges[NonPersistentConsumer] = HashRanges()  # Key_Shared

    # ---- consumers ----

    def add_consumer(self, sub_type: SubscriptionType, consumer_name: str | None, priority_level: int) -> Consumer:
        if self.closed:
            raise ServiceNotReadyError(f"subscription {self.name} on {self.topic_name} is closed: subscribe again")
        if self.consumers and sub_type is not self.type:
            raise ConsumerBusyError(
                f"Subscription is of a different type: {self.name} is {self.type.label} and has "
                f"consumers; close them or subscribe as {self.type.label}")
        if self.consumers and sub_type is SubscriptionType.EXCLUSIVE:
            raise ConsumerBusyError("Exclusive consumer is already connected")
        self.type = sub_type
        settings = self.topic.settings
        consumer = NonPersistentConsumer(
            self, next(self._consumer_ids), consumer_name or secrets.token_hex(5), priority_level,
            settings.consumer_max_buffered_entries, self.topic.pending)
        if sub_type is SubscriptionType.KEY_SHARED:
            self.hash_ranges.add(consumer)
        self.consumers.append(consumer)
        if sub_type is SubscriptionType.FAILOVER:
            self._elect(joined=consumer)
        return consumer

    def remove_consumer(self, consumer: Consumer) -> None:
        if not isinstance(consumer, NonPersistentConsumer) or consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        consumer.release_buffered()
        self.hash_ranges.remove(consumer)
        if self.type is SubscriptionType.FAILOVER:
            self._elect(joined=None)
        if not self.consumers:
            self.topic.subscription_emptied(self)

    def _elect(self, joined: NonPersistentConsumer | None) -> None:
        """Failover: the active consumer is the first by (priority level, name); on a partition,
        the (partition index mod n)-th of the highest-priority ones, as Pulsar spreads partitions.
        Consumers are told when their status changes, and a joining one its status at once."""
        ranked = sorted(self.consumers, key=lambda c: (c.priority_level, c.name))
        active: NonPersistentConsumer | None = None
        if ranked:
            top = [c for c in ranked if c.priority_level == ranked[0].priority_level]
            index = self.topic.partition_index
            active = top[index % len(top)] if index >= 0 else top[0]
        previous, self._active = self._active, active
        if previous is not active and previous is not None and previous in self.consumers:
            previous.notify_event(ActiveConsumerChanged(is_active=False))
        if active is not None and (previous is not active or active is joined):
            active.notify_event(ActiveConsumerChanged(is_active=True))
        if joined is not None and joined is not active:
            joined.notify_event(ActiveConsumerChanged(is_active=False))

    # ---- what a consumer sends: nothing to act on ----

    def notify(self) -> None:
        """Permits or buffer room arrived: nothing waits for them (nothing is kept to send later)."""

    def ack(self, consumer: Consumer, positions: list[Position], cumulative: bool) -> None:
        """Accepted and ignored: nothing is kept to acknowledge."""

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Accepted and ignored: nothing is kept to redeliver."""

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

    def _choose(self, metadata: EntryMetadata) -> NonPersistentConsumer | None:
        consumers = self.consumers
        if not consumers:
            return None
        if self.type is SubscriptionType.SHARED:
            return self._next_shared()
        if self.type is SubscriptionType.FAILOVER:
            return self._active
        if self.type is SubscriptionType.KEY_SHARED:
            return self.hash_ranges.owner_of(key_hash(sticky_key(metadata)))
        return consumers[0]

    def _next_shared(self) -> NonPersistentConsumer | None:
        consumers = self.consumers
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

    def close(self, reason: str) -> None:
        """Disconnect every consumer (their clients reconnect or stop)."""
        self.closed = True
        for consumer in self.consumers:
            consumer._mark_closed(reason)
        self.consumers.clear()
        self._active = None
        self.hash_ranges = HashRanges()


class NonPersistentTopic:
    persistent = False

    def __init__(
        self, name: str, settings: BrokerSettings, store: MetadataStore, *, encryption_required: bool = False,
    ) -> None:
        self.name = name
        self.topic_name = TopicName.parse(name)
        self.partition_index = self.topic_name.partition_index
        self.settings = settings
        self.encryption_required = encryption_required
        self.max_message_size = settings.max_message_size
        self._store = store
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.pending = PendingDeliveries()
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.entries_in_counter = 0
        self.msg_dropped_counter = 0  # messages refused at the door: over the pending limit
        self.closed = False
        self._producer_ids = itertools.count(1)
        self._entry_ids = itertools.count(0)
        self._rates = RateMeters(settings.stats_rate_window_seconds)

    async def load(self) -> None:
        """Record the topic in its namespace (kept until the topic is deleted)."""
        try:
            await self._store.put(registration_key(self.topic_name), b"{}", expected_version=NOT_EXISTS)
        except BadVersionError:
            pass  # recorded by an earlier load

    def _check_open(self) -> None:
        if self.closed:
            raise ServiceNotReadyError(f"topic {self.name} is being unloaded: look it up again")

    # ---- producers ----

    async def add_producer(self, name: str | None) -> tuple[Producer, int]:
        """Register a producer (a unique name is assigned when none is given); the last sequence id
        is always -1: nothing is deduplicated."""
        self._check_open()
        if not name:
            number = await self._store.allocate_id(PRODUCER_NAME_COUNTER)
            name = f"{self.settings.cluster}-{number}"
            self._check_open()
        if name in self.producers:
            raise ProducerBusyError(f"producer {name!r} is already connected to {self.name}")
        producer = Producer(self, name, next(self._producer_ids))
        self.producers[name] = producer
        return producer, -1

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        producer.close()

    def publish(
        self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes,
    ) -> asyncio.Future[tuple[int, int]]:
        """Check the entry and hand it to the consumers connected now. The future is already done:
        (-1, -1), also when the entry was dropped over the pending limit, or the check's error."""
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        try:
            metadata = producer.check(entry, num_messages, encryption_required=self.encryption_required,
                                      max_message_size=self.max_message_size)
        except HeraldError as exc:
            future.set_exception(exc)
            return future
        messages = num_messages  # checked: at least 1, and what the entry's metadata says
        if len(self.pending) >= self.settings.non_persistent_max_pending:
            self.msg_dropped_counter += messages
        else:
            producer.record(messages, len(entry))
            self.msg_in_counter += messages
            self.bytes_in_counter += len(entry)
            self.entries_in_counter += 1
            if self.subscriptions:
                self._dispatch(entry, metadata, messages)
        future.set_result(NO_POSITION)
        return future

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
        self, subscription: str, sub_type: SubscriptionType, consumer_name: str | None = None,
        priority_level: int = 0,
    ) -> Consumer:
        """Attach a consumer; the subscription is made on first use and lives while it has consumers.
        Where it starts is moot: it gets what is published from now on."""
        self._check_open()
        validate_subscription_name(subscription)
        validate_priority_level(priority_level)
        sub = self.subscriptions.get(subscription)
        created = sub is None
        if sub is None:
            sub = self.subscriptions[subscription] = NonPersistentSubscription(self, subscription, sub_type)
        try:
            return sub.add_consumer(sub_type, consumer_name, priority_level)
        except BaseException:
            if created:
                del self.subscriptions[subscription]
            raise

    def subscription_emptied(self, subscription: NonPersistentSubscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    async def unsubscribe(self, subscription: str, force: bool = False, *, requester: Consumer | None = None) -> None:
        """Drop a subscription, as on a persistent topic: NotFoundError when it does not exist (it
        exists only while it has consumers); refused (PreconditionFailedError) while consumers are
        connected, unless `force` (they are disconnected) or the only one connected is `requester`."""
        sub = self.subscriptions.get(subscription)
        if sub is None:
            raise NotFoundError(f"subscription {subscription!r} does not exist on {self.name}")
        others = [c for c in sub.consumers if c is not requester]
        if others and not force:
            raise PreconditionFailedError(
                f"subscription {subscription!r} on {self.name} has {len(others)} other consumer(s) connected: "
                "close them first, or force the deletion")
        self._close_subscription(sub, "the subscription was deleted")
        log.info("topic %s: subscription %s deleted", self.name, subscription)

    def list_subscriptions(self) -> list[str]:
        return sorted(self.subscriptions)

    def _close_subscription(self, sub: NonPersistentSubscription, reason: str) -> None:
        for consumer in sub.consumers:
            consumer.release_buffered()
        sub.close(reason)
        self.subscription_emptied(sub)

    # ---- state ----

    @property
    def consumer_count(self) -> int:
        return sum(len(s.consumers) for s in self.subscriptions.values())

    @property
    def msg_out_counter(self) -> int:
        return sum(s.msg_out_counter for s in self.subscriptions.values())

    def stats(self) -> TopicStats:
        """The same stats as a persistent topic's, with no storage or backlog, persistent=False and
        the drop counters."""
        producers = list(self.producers.values())
        subscriptions = list(self.subscriptions.values())
        readings: dict[Hashable, Counters] = {self: (self.msg_in_counter, self.bytes_in_counter)}
        for producer in producers:
            readings[producer] = (producer.msg_in_counter, producer.bytes_in_counter)
        for sub in subscriptions:
            for consumer in sub.consumers:
                readings[consumer] = (consumer.msg_out_counter, consumer.bytes_out_counter)
        rates = self._rates.sample(readings)
        sub_stats = []
        for sub in subscriptions:
            consumers = [
                ConsumerStats(
                    consumer_name=c.name, msg_out_counter=c.msg_out_counter, bytes_out_counter=c.bytes_out_counter,
                    msg_rate_out=rates[c][0], msg_throughput_out=rates[c][1], unacked_messages=0,
                    available_permits=c.permits,
                    priority_level=c.priority_level,
                    is_active=c.is_active,
                    key_hash_ranges=(sub.hash_ranges.owned_by(c) if sub.type is SubscriptionType.KEY_SHARED
                                     else []),
                    properties=c.properties,
                )
                for c in sub.consumers
            ]
            sub_stats.append(SubscriptionStats(
                name=sub.name, type=sub.type.label, consumers=len(consumers), msg_out_counter=sub.msg_out_counter,
                bytes_out_counter=sub.bytes_out_counter,
                msg_rate_out=sum(c.msg_rate_out for c in consumers),
                msg_throughput_out=sum(c.msg_throughput_out for c in consumers),
                durable=False, consumer_stats=consumers, msg_dropped_counter=sub.msg_dropped_counter,
            ))
        msg_rate_in, throughput_in = rates[self]
        return TopicStats(
            topic=self.name,
            msg_in_counter=self.msg_in_counter,
            bytes_in_counter=self.bytes_in_counter,
            producers=[ProducerStats(p.name, p.msg_in_counter, p.bytes_in_counter, rates[p][0], rates[p][1],
                                     p.properties) for p in producers],
            subscriptions=sub_stats,
            msg_rate_in=msg_rate_in,
            msg_throughput_in=throughput_in,
            msg_rate_out=sum(s.msg_rate_out for s in sub_stats),
            msg_throughput_out=sum(s.msg_throughput_out for s in sub_stats),
            msg_out_counter=sum(s.msg_out_counter for s in sub_stats),
            bytes_out_counter=sum(s.bytes_out_counter for s in sub_stats),
            persistent=False,
            msg_dropped_counter=self.msg_dropped_counter,
        )

    # ---- life cycle ----

    async def close(self, *, owned: bool = True, reason: str = "the topic was unloaded") -> None:
        """Disconnect producers and consumers; nothing to persist (`owned` is for symmetry with
        persistent topics). Idempotent."""
        if self.closed:
            return
        self.closed = True
        for producer in list(self.producers.values()):
            producer.close()
        self.producers.clear()
        for sub in list(self.subscriptions.values()):
            sub.close(reason)
        self.subscriptions.clear()
        self.pending.clear()
        log.info("non-persistent topic %s closed", self.name)

    async def delete(self, force: bool = False) -> None:
        """Delete the topic: refused (PreconditionFailedError) while producers or consumers are
        connected, unless force, which disconnects them; then its record leaves the namespace."""
        if not force and (self.producers or self.consumer_count):
            raise PreconditionFailedError(
                f"Topic has active producers/consumers: {self.name} has {len(self.producers)} producer(s) and "
                f"{self.consumer_count} consumer(s); close them or delete with force")
        await self.close(reason="the topic was deleted")
        await self._store.delete(registration_key(self.topic_name))
        log.info("non-persistent topic %s deleted", self.name)
