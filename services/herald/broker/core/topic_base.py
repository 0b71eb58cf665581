"""The Topic interface: what every topic is, stored (broker.core.topic.PersistentTopic) or not
(broker.nonpersistent_topic.NonPersistentTopic), with what they share written once: producers (name
allocation, the busy and limit checks), the in-counters, the checks before a subscription is touched,
unsubscribing, the limits policies set, the stats (counters and rates of the topic, its producers,
subscriptions and consumers) and the guard before deletion.

What only a stored topic can do (seek, skip, peek, terminate, pull, internal stats...) is a
capability: `persistent_ops(operation)` gives it, or refuses with NotAllowedError on a non-persistent
topic. Nothing in the broker asks a topic for its concrete class.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import ClassVar, Generic, Protocol, TypeVar

from herald.broker.core.access_modes import ProducerAccess, ProducerAccessMode
from herald.broker.core.compaction.topic_compaction import TopicCompaction
from herald.broker.core.consumer import Consumer
from herald.broker.core.cursor import InitialPosition, ResetTarget
from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.broker.core.expiry import MessageExpiry
from herald.broker.core.hash_ranges import KeySharedMeta
from herald.broker.core.ledger_list import Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.broker.core.policies import broker_defaults, check_consumer_limits, check_producer_limit
from herald.broker.core.producer import Producer
from herald.broker.core.publication import FuturePublication, Publication
from herald.broker.core.pull import AddWaiters
from herald.broker.core.rates import Counters, RateMeters, Rates
from herald.broker.core.stats import (
    ConsumerStats,
    InternalStats,
    LastMessageId,
    ProducerStats,
    SubscriptionStats,
    TopicStats,
)
from herald.broker.core.subscription_type import SubscriptionType, validate_priority_level
from herald.broker.settings import BrokerSettings
from herald.common.codec.names import TopicName, validate_subscription_name
from herald.common.errors import (
    NotAllowedError,
    NotFoundError,
    PreconditionFailedError,
    ProducerBusyError,
    ServiceNotReadyError,
)
from herald.metadata.policies import Policies
from herald.metadata.store import MetadataStore

PRODUCER_NAME_COUNTER = "/counters/producer-name"


class TopicSubscription(Protocol):
    """What a topic needs of its subscriptions, whatever their kind."""

    name: str
    type: SubscriptionType
    durable: bool
    msg_out_counter: int
    bytes_out_counter: int
    redelivered_counter: int

    @property
    def consumers(self) -> Sequence[Consumer]: ...
    def hash_ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]: ...


class PersistentOps(Protocol):
    """The operations only a stored topic supports, as Topic.persistent_ops gives them."""

    name: str
    ledger: ManagedLedger
    add_waiters: AddWaiters
    closed: bool

    @property
    def terminated(self) -> bool: ...
    async def create_subscription(
        self, subscription: str, start: Position | InitialPosition = InitialPosition.LATEST,
    ) -> None: ...
    async def reset_cursor(self, subscription: str, target: ResetTarget) -> None: ...
    async def skip_messages(self, subscription: str, count: int | None) -> int: ...
    async def peek_messages(
        self, subscription: str, count: int, skip: int = 0,
    ) -> list[tuple[Position, bytes, int]]: ...
    def mark_delete_position(self, subscription: str) -> Position: ...
    async def get_last_message_id(self) -> LastMessageId: ...
    async def terminate(self) -> Position: ...
    def internal_stats(self) -> InternalStats: ...
    @property
    def compaction(self) -> TopicCompaction: ...
    expiry: MessageExpiry


S = TypeVar("S", bound=TopicSubscription)


class Topic(abc.ABC, Generic[S]):
    persistent: ClassVar[bool]
    subscriptions: dict[str, S]

    def __init__(self, name: str, settings: BrokerSettings, store: MetadataStore) -> None:
        self.name = name
        self.topic_name = TopicName.parse(name)
        self.partition_index = self.topic_name.partition_index
        self.settings = settings
        self._store = store
        # Effective policies (applied at load and whenever they change: apply_policies).
        self.policies: Policies = broker_defaults(settings)
        self.encryption_required = False
        self.max_message_size = settings.max_message_size
        self.producers: dict[str, Producer] = {}
        self.subscriptions = {}
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.entries_in_counter = 0  # with msg_in_counter: the messages per entry stats report
        self.closed = False
        self._producer_ids = itertools.count(1)
        self.access = ProducerAccess(name, store)  # exclusive producers and the topic epoch
        self._rates = RateMeters(settings.stats_rate_window_seconds)

    def _check_open(self) -> None:
        if self.closed:
            raise ServiceNotReadyError(f"topic {self.name} is being unloaded: look it up again")

    # ---- capabilities ----

    def persistent_ops(self, operation: str) -> PersistentOps:
        """The stored topic's own operations; NotAllowedError naming `operation` on a topic that
        stores nothing."""
        raise NotAllowedError(f"{operation} is not supported on non-persistent topics ({self.name})")

    @property
    def dedup_rejections(self) -> int:
        """Sends answered as duplicates without being stored."""
        return 0

    # ---- policies ----

    async def apply_policies(self, policies: Policies) -> None:
        """Give the topic its effective (complete) policies: the limits every topic checks. A stored
        topic applies retention, TTL, deduplication, backlog quota and quorums too."""
        assert policies.is_complete(), "apply effective policies, not overrides"
        self.policies = policies
        self.encryption_required = bool(policies.encryption_required)
        self.max_message_size = int(policies.max_message_size or 0)

    # ---- producers ----

    async def add_producer(
        self, name: str | None, access_mode: ProducerAccessMode = ProducerAccessMode.SHARED,
        topic_epoch: int | None = None, on_queued: Callable[[], None] | None = None,
    ) -> tuple[Producer, int]:
        """Register a producer (a unique name is assigned when none is given); returns it and the
        last sequence id persisted under its name (-1 if none, or where nothing is deduplicated).
        `access_mode` and `topic_epoch` (the epoch a reconnecting exclusive producer had):
        broker.core.access_modes; a WAIT_FOR_EXCLUSIVE registration calls `on_queued` and waits
        while others hold the topic. The producer's topic_epoch is the topic's then."""
        self._check_open()
        self._check_may_produce()
        if not name:
            number = await self._store.allocate_id(PRODUCER_NAME_COUNTER)
            name = f"{self.settings.cluster}-{number}"
            self._check_open()
        self._check_name_free(name)
        access = self.access
        if not access_mode.exclusive:
            access.check_shared(name)
            return self._register_producer(name, access_mode, access.epoch)
        # An exclusive claim awaits (a queue, the stored epoch): checked again once it holds the topic.
        check_producer_limit(self.name, self.policies, len(self.producers))
        await access.claim(name, access_mode, topic_epoch, self.producers, self._fence_producers, on_queued)
        try:
            epoch = await access.epoch_for(topic_epoch)
            access.check_holder(name)
            self._check_open()
            self._check_name_free(name)
            return self._register_producer(name, access_mode, epoch)
        except BaseException:
            if access.holder == name:  # not when a fencing taker has it now
                access.released(name, self.producers)
            raise

    def _check_name_free(self, name: str) -> None:
        if name in self.producers:
            raise ProducerBusyError(f"producer {name!r} is already connected to {self.name}")

    def _register_producer(self, name: str, access_mode: ProducerAccessMode, epoch: int | None) -> tuple[Producer, int]:
        # No await from here on: registrations racing through the name allocation are counted.
        check_producer_limit(self.name, self.policies, len(self.producers))
        self._admit_producer()
        producer = Producer(self, name, next(self._producer_ids))
        producer.access_mode, producer.topic_epoch = access_mode, epoch
        self.producers[name] = producer
        return producer, self._producer_added(name)

    def _fence_producers(self) -> None:
        """ExclusiveWithFencing: every connected producer is closed (its client reconnects and is
        then fenced by the epoch, or refused while the exclusive producer holds the topic)."""
        for producer in list(self.producers.values()):
            del self.producers[producer.name]
            self._producer_removed(producer.name)
            producer.close()

    def _check_may_produce(self) -> None:
        """Before a name is allocated: a topic that takes no more messages refuses producers."""

    def _admit_producer(self) -> None:
        """After the limit: a last check of the topic's own (a stored topic's backlog quota)."""

    def _producer_added(self, name: str) -> int:
        """The last sequence id persisted under `name`."""
        return -1

    def _producer_removed(self, name: str) -> None:
        """A producer of that name left."""

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self._producer_removed(producer.name)
            self.access.released(producer.name, self.producers)
        producer.close()

    def _close_producers(self) -> None:
        self.access.refuse_waiting(ServiceNotReadyError(f"topic {self.name} is being unloaded: look it up again"))
        for producer in list(self.producers.values()):
            producer.close()
        self.producers.clear()

    # ---- publishing ----

    @abc.abstractmethod
    def submit(self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int,
               entry: bytes, publication: Publication) -> None:
        """Check and take an entry; `publication` completes with its position or error. The call
        queues what it takes at once (call order is log order) and never raises."""

    def publish(
        self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes,
    ) -> asyncio.Future[tuple[int, int]]:
        """submit(), with a future for the outcome: (ledger id, entry id), (-1, -1) for a duplicate
        or on a non-persistent topic, or the error."""
        publication = FuturePublication()
        self.submit(producer, sequence_id, highest_sequence_id, num_messages, entry, publication)
        return publication.future

    def _count_in(self, producer: Producer, num_messages: int, size: int) -> None:
        producer.record(num_messages, size)
        self.msg_in_counter += num_messages
        self.bytes_in_counter += size
        self.entries_in_counter += 1

    # ---- subscriptions ----

    @abc.abstractmethod
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
        """Attach a consumer, making the subscription when it does not exist (where it starts,
        and whether it is a reader's, matter on a stored topic only). `key_shared`: a Key_Shared
        consumer's mode and ranges; `read_compacted`: read the compacted view (a stored topic's,
        Exclusive and Failover only: broker.core.compacted_reads)."""

    def _check_subscribe(self, subscription: str, priority_level: int) -> None:
        """The checks before a subscription is touched, so a refused consumer leaves nothing behind."""
        self._check_open()
        validate_subscription_name(subscription)
        validate_priority_level(priority_level)

    def _check_consumer_limits(self, subscription: S | None) -> None:
        check_consumer_limits(self.name, self.policies, self.consumer_count,
                              len(subscription.consumers) if subscription is not None else 0)

    def _subscription(self, subscription: str) -> S:
        sub = self.subscriptions.get(subscription)
        if sub is None:
            raise NotFoundError(f"subscription {subscription!r} does not exist on {self.name}")
        return sub

    def _check_unsubscribe(self, sub: S, force: bool, requester: Consumer | None) -> None:
        """Refused while consumers other than `requester` (a consumer unsubscribing itself) are
        connected, unless forced."""
        others = [c for c in sub.consumers if c is not requester]
        if others and not force:
            raise PreconditionFailedError(
                f"subscription {sub.name!r} on {self.name} has {len(others)} other consumer(s) connected: "
                "close them first, or force the deletion")

    @abc.abstractmethod
    async def unsubscribe(self, subscription: str, force: bool = False, *, requester: Consumer | None = None) -> None:
        """Delete a subscription: NotFoundError when it does not exist; refused
        (PreconditionFailedError) while other consumers are connected, unless `force`."""

    def set_dead_letter_policies(
        self, subscription: str, *, admin: DeadLetterPolicy | None, subscriber: DeadLetterPolicy | None = None,
        keep_subscriber: bool = False,
    ) -> None:
        """Give a subscription its dead-letter policies (the admin's wins over the subscriber's).
        Only a stored topic redelivers, so only it has dead letters: ignored elsewhere."""

    def list_subscriptions(self) -> list[str]:
        """Every subscription's name, readers' included."""
        return sorted(self.subscriptions)

    @property
    def consumer_count(self) -> int:
        return sum(len(s.consumers) for s in self.subscriptions.values())

    @property
    def msg_out_counter(self) -> int:
        return sum(s.msg_out_counter for s in self.subscriptions.values())

    # ---- stats ----

    def stats(self) -> TopicStats:
        """Counters and rates (over the stats window: broker.core.rates) of the topic, its producers,
        subscriptions and consumers; what only one kind has is filled in by _fill_stats."""
        producers = list(self.producers.values())
        subscriptions = list(self.subscriptions.values())
        readings: dict[Hashable, Counters] = {self: (self.msg_in_counter, self.bytes_in_counter)}
        for producer in producers:
            readings[producer] = (producer.msg_in_counter, producer.bytes_in_counter)
        for sub in subscriptions:
            for consumer in sub.consumers:
                readings[consumer] = (consumer.msg_out_counter, consumer.bytes_out_counter)
        rates = self._rates.sample(readings)
        pairs = [(sub, self._subscription_stats(sub, rates)) for sub in subscriptions]
        sub_stats = [stats for _, stats in pairs]
        msg_rate_in, throughput_in = rates[self]
        stats = TopicStats(
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
            persistent=self.persistent,
        )
        self._fill_stats(stats, pairs)
        return stats

    @staticmethod
    def _subscription_stats(sub: S, rates: dict[Hashable, Rates]) -> SubscriptionStats:
        consumers = [
            ConsumerStats(
                consumer_name=c.name, msg_out_counter=c.msg_out_counter, bytes_out_counter=c.bytes_out_counter,
                msg_rate_out=rates[c][0], msg_throughput_out=rates[c][1], unacked_messages=c.unacked_messages,
                available_permits=c.permits, priority_level=c.priority_level, is_active=c.is_active,
                key_hash_ranges=sub.hash_ranges_of(c), properties=c.properties,
            )
            for c in sub.consumers
        ]
        return SubscriptionStats(
            name=sub.name, type=sub.type.label, consumers=len(consumers), msg_out_counter=sub.msg_out_counter,
            bytes_out_counter=sub.bytes_out_counter, unacked_messages=sum(c.unacked_messages for c in consumers),
            msg_rate_out=sum(c.msg_rate_out for c in consumers),
            msg_throughput_out=sum(c.msg_throughput_out for c in consumers),
            durable=sub.durable, consumer_stats=consumers,
        )

    @abc.abstractmethod
    def _fill_stats(self, stats: TopicStats, subscriptions: list[tuple[S, SubscriptionStats]]) -> None:
        """What only this kind of topic reports (storage and backlogs; drops)."""

    # ---- life cycle ----

    def check_no_clients(self) -> None:
        """PreconditionFailedError while producers or consumers are connected (before a delete
        that is not forced)."""
        producers, consumers = len(self.producers), self.consumer_count
        if producers or consumers:
            raise PreconditionFailedError(
                f"Topic has active producers/consumers: {self.name} has {producers} producer(s) and "
                f"{consumers} consumer(s) connected; close them first, or delete with force")

    @abc.abstractmethod
    async def load(self) -> None:
        """Start serving: attach what already exists, start the topic's background work."""

    @abc.abstractmethod
    async def close(self, *, owned: bool = True, reason: str = "the topic was unloaded") -> None:
        """Disconnect producers and consumers (telling them `reason`) and persist what is the
        topic's to persist (nothing when owned is False: another broker may serve it already).
        Idempotent."""
