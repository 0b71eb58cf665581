"""The broker service: the topics this broker serves, loaded on first use (after ownership says the
topic is ours) and unloaded on request (releasing its ownership, so the topic moves), on fencing,
when its ownership record vanished or names another broker, or when the broker loses its lease.

This is the whole surface a protocol adapter needs: create_producer, subscribe, stats, topic lists.
Names are validated here, at the edge of the core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from herald.broker.consumer import Consumer
from herald.broker.cursor import InitialPosition, ResetTarget
from herald.broker.dead_letters import DeadLetterPolicy, DeadLetterQueue
from herald.broker.dedup import MessageDeduplication
from herald.broker.entry_cache import EntryCacheManager
from herald.broker.managed_ledger import LedgerStorage, ManagedLedger, Position
from herald.broker.nonpersistent_topic import NonPersistentTopic, registration_key
from herald.broker.policies import (
    PoliciesWatcher,
    PolicyResolver,
    apply_policies,
    check_consumer_limits,
    check_producer_limit,
    check_topic_limit,
)
from herald.broker.producer import Producer
from herald.broker.pull import PullResult, pull, resolve_queue
from herald.broker.pull import check_limits as check_pull_limits
from herald.broker.settings import BrokerSettings
from herald.broker.subscription import Subscription, SubscriptionType
from herald.broker.topic import InternalStats, LastMessageId, PersistentTopic, TopicStats
from herald.broker.topic_deletion import delete_topic_data
from herald.common.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    NotOwnerError,
    PreconditionFailedError,
    ProducerBusyError,
    ServiceNotReadyError,
)
from herald.common.names import TopicName
from herald.metadata.policies import Policies
from herald.metadata.resources import Resources, StoredDeadLetterPolicy, managed_ledger_key
from herald.metadata.store import MetadataStore

if TYPE_CHECKING:
    from herald.broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

# What get_topic returns: operations only a persistent topic supports go through _persistent().
Topic = PersistentTopic | NonPersistentTopic


class TopicOwnership(Protocol):
    async def acquire(self, topic: str) -> None:
        """Return when this broker may serve the topic; NotOwnerError otherwise."""

    async def release(self, topic: str) -> bool:
        """Give up the topic's ownership (so the next lookup assigns it anew); False when it had
        no owner, NotOwnerError when another broker owns it."""


class RemoteTopics(Protocol):
    """Topic operations on the broker that owns a topic, when it is not this one (the admin layer
    forwards them; lookup assigns an owner to a topic that has none)."""

    async def delete_topic(self, topic: str, force: bool) -> None: ...


@dataclass(slots=True)
class BrokerLoad:
    topics: int
    producers: int
    consumers: int
    msg_rate_in: float
    msg_rate_out: float


def ledger_name(topic: TopicName) -> str:
    """The managed ledger's name (and metadata path) for a topic, as Pulsar spells it."""
    return f"{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"


class BrokerService:
    def __init__(
        self, settings: BrokerSettings, store: MetadataStore, storage: LedgerStorage, ownership: TopicOwnership,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics  # observed by the topics on the publish path (None: no metrics)
        self.store = store
        self.storage = storage
        self.ownership = ownership
        self.entry_cache = EntryCacheManager(settings.entry_cache_max_bytes)
        self.dead_letters = DeadLetterQueue()  # served to dlq-workers by DeadLetterService
        self._topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Task[Topic]] = {}
        # Topics being closed here: refused meanwhile (the client looks them up again).
        self._unloading: dict[str, asyncio.Task[None]] = {}
        self._rate_sample = (time.monotonic(), 0, 0)
        # Tenants, namespaces, policies and partitions; effective policies, followed live.
        self.resources = Resources(store)
        self.policy_resolver = PolicyResolver(self.resources, settings)
        self._policies_watcher = PoliciesWatcher(store, self.served_topics, self._refresh_policies)
        self._non_persistent_policies: dict[str, Policies] = {}  # persistent topics hold theirs
        self._bootstrapped = False
        self._deleting: set[str] = set()  # topics being deleted here: refused meanwhile
        # Deletes partitions another broker owns (set by the admin layer; None: NotOwnerError).
        self.remote: RemoteTopics | None = None

    async def start(self) -> None:
        """Make sure the default namespace exists (idempotent; topic loads make sure too)."""
        await self._bootstrap()

    async def _bootstrap(self) -> None:
        if not self._bootstrapped:
            await self.resources.ensure_default_namespace()
            self._bootstrapped = True

    # ---- topics ----

    @staticmethod
    def parse_topic(topic: str) -> TopicName:
        return TopicName.parse(topic)

    async def _persistent(self, topic: str, operation: str) -> PersistentTopic:
        """The loaded persistent topic, for operations only a stored topic supports (seek, skip,
        peek, terminate, pull, internal stats...); NotAllowedError on a non-persistent topic."""
        name = self.parse_topic(topic)
        if not name.persistent:
            raise NotAllowedError(f"{operation} is not supported on non-persistent topics ({name})")
        loaded = await self.get_topic(topic)
        assert isinstance(loaded, PersistentTopic)
        return loaded

    async def get_topic(self, topic: str) -> Topic:
        """The loaded topic; loads it (once, however many ask at the same time) when it is not."""
        name = self.parse_topic(topic)
        key = str(name)
        if key in self._unloading:
            raise ServiceNotReadyError(f"topic {key} is being unloaded from this broker: look it up again")
        if key in self._deleting:
            raise ServiceNotReadyError(f"topic {key} is being deleted: retry")
        loaded = self._topics.get(key)
        if loaded is not None:
            return loaded
        task = self._loading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(name), name=f"load {key}")
            self._loading[key] = task
            task.add_done_callback(self._load_done(key))
        # Shielded: a caller that gives up must not cancel the load others wait for.
        return await asyncio.shield(task)

    async def _load(self, name: TopicName) -> Topic:
        key = str(name)
        await self._bootstrap()
        self._policies_watcher.start()
        seen = self._policies_watcher.generation
        # NotFoundError "Tenant x does not exist" / "Namespace t/n does not exist" refuses the topic.
        policies = await self.policy_resolver.effective(name)
        await self._check_not_partitioned(name)
        if await self._is_new_topic(name):
            await self._check_room_for_topics(name, 1, policies)
        await self.ownership.acquire(key)
        if not name.persistent:
            np_topic = await self._load_non_persistent(name)
            await self._apply_policies(np_topic, policies)
            return np_topic
        ml_name = ledger_name(name)
        ledger = ManagedLedger(ml_name, self.store, self.storage, self.settings, self.entry_cache.cache_for(ml_name))
        persistence = policies.persistence
        assert persistence is not None
        ledger.persistence = (persistence.ensemble_size, persistence.write_quorum, persistence.ack_quorum)
        topic: PersistentTopic | None = None
        try:
            await ledger.open()
            dedup = MessageDeduplication(ml_name, self.store, bool(policies.deduplication_enabled),
                                         self.settings.dedup_snapshot_interval)
            await dedup.recover(ledger)
            topic = PersistentTopic(key, ledger, dedup, self.settings, self.store, on_fenced=self._topic_fenced,
                                    dead_letters=self.dead_letters, metrics=self.metrics)
            await self._apply_policies(topic, policies)
            if self._policies_watcher.generation != seen:  # changed while loading: not refreshed
                await self._apply_policies(topic, await self.policy_resolver.effective(name))
            await topic.load()
        except BaseException:
            with contextlib.suppress(Exception):
                if topic is not None:
                    await topic.close()
                else:
                    await ledger.close()
            raise
        self._topics[key] = topic
        log.info("topic %s loaded", key)
        return topic

    async def _check_not_partitioned(self, name: TopicName) -> None:
        """A partitioned topic's data lives in its partitions: its base name is no topic to load
        (Pulsar refuses it too), and a partition past its topic's count does not exist."""
        key = str(name)
        await self.resources.check_partition(key)
        if name.partition_index < 0 and (partitions := await self.resources.get_partitions(key)) > 0:
            raise NotAllowedError(
                f"topic {key} is partitioned ({partitions} partitions): producers and consumers use its "
                f"partitions, {key}-partition-0 to -{partitions - 1}")

    async def _is_new_topic(self, name: TopicName) -> bool:
        """Whether loading `name` creates a topic (auto-creation): it has no record yet and is not
        a partition of a partitioned topic (those count when their topic is made)."""
        record = managed_ledger_key(name) if name.persistent else registration_key(name)
        if await self.store.get(record) is not None:
            return False
        return not (name.partition_index >= 0 and await self.resources.get_partitions(str(name.base)) > 0)

    def _check_partition_count(self, name: TopicName, partitions: int) -> None:
        limit = self.settings.max_partitions_per_topic
        if 0 < limit < partitions:
            raise NotAllowedError(
                f"topic {name}: {partitions} partitions are more than the {limit} a topic may have on this cluster "
                "(the brokers' max_partitions_per_topic): use fewer partitions, or ask an operator to raise the limit")

    async def _check_room_for_topics(self, name: TopicName, adding: int, policies: Policies | None = None) -> None:
        """NotAllowedError when `name`'s namespace cannot take `adding` more topics (max_topics).
        Brokers creating topics of one namespace at the same moment may overshoot it (as Pulsar's)."""
        if policies is None:
            policies = await self.policy_resolver.effective(name)
        if policies.max_topics:
            namespace = name.namespace_name
            check_topic_limit(namespace, policies, await self.resources.count_topics(namespace), adding)

    async def _load_non_persistent(self, name: TopicName) -> NonPersistentTopic:
        key = str(name)
        topic = NonPersistentTopic(key, self.settings, self.store)
        await topic.load()
        self._topics[key] = topic
        log.info("non-persistent topic %s loaded", key)
        return topic

    def _load_done(self, key: str) -> Callable[[asyncio.Task[Topic]], None]:
        def done(task: asyncio.Task[Topic]) -> None:
            if self._loading.get(key) is task:
                del self._loading[key]
            if not task.cancelled():
                task.exception()  # retrieved: a load nobody awaits any more must not warn

        return done

    def topic_names(self) -> list[str]:
        return list(self._topics)

    def loaded_topics(self) -> list[Topic]:
        """The topics loaded here (for metrics: read them on the event loop)."""
        return list(self._topics.values())

    def served_topics(self) -> set[str]:
        """Topics loaded here (not those still loading: their ownership is being checked)."""
        return set(self._topics)

    async def list_topics(self, namespace: str) -> list[str]:
        """Every topic of a namespace ("tenant/namespace"), served here or not: partitioned topics
        by their base name, persistent and non-persistent ones (Resources.list_topics)."""
        return await self.resources.list_topics(namespace)

    # ---- policies ----

    async def effective_policies(self, topic: str) -> Policies:
        """The policies a topic runs with: its own > its namespace's > this broker's settings."""
        return await self.policy_resolver.effective(self.parse_topic(topic))

    async def _apply_policies(self, topic: Topic, policies: Policies) -> None:
        await apply_policies(topic, policies)
        if isinstance(topic, NonPersistentTopic):
            self._non_persistent_policies[topic.name] = policies

    async def _refresh_policies(self, key: str) -> None:
        """Policies of a served topic changed (PoliciesWatcher): apply them again, live."""
        topic = self._topics.get(key)
        if topic is None:
            return
        policies = await self.policy_resolver.effective(self.parse_topic(key))
        if self._topics.get(key) is topic and not topic.closed:
            await self._apply_policies(topic, policies)
            log.info("topic %s: policies applied again", key)

    def _topic_policies(self, topic: Topic) -> Policies:
        if isinstance(topic, PersistentTopic):
            return topic.policies
        return self._non_persistent_policies.get(topic.name) or self.policy_resolver.defaults

    # ---- creating and deleting topics, partitions ----

    async def create_topic(self, topic: str, partitions: int = 0) -> None:
        """Create a topic: partitions 0 makes a non-partitioned topic now (its managed ledger, on
        this broker: it must own it), n > 0 records a partitioned topic (its partitions are made on
        first use). AlreadyExistsError when it exists, partitioned or not."""
        name = self.parse_topic(topic)
        if partitions < 0:
            raise InvalidArgumentError(f"partitions {partitions} is invalid: use 0 (not partitioned) or more")
        if partitions > 0:
            self._check_partition_count(name, partitions)
            await self._check_room_for_topics(name, partitions)
            await self.resources.create_partitioned_topic(str(name), partitions)
            return
        key = str(name)
        await self.resources.check_namespace(name.namespace_name)
        if await self.resources.get_partitions(key) > 0:
            raise AlreadyExistsError(f"Topic {key} already exists (it is partitioned)")
        record = managed_ledger_key(name) if name.persistent else registration_key(name)
        if key in self._topics or key in self._loading or await self.store.get(record) is not None:
            raise AlreadyExistsError(f"Topic {key} already exists")
        await self.get_topic(key)

    async def get_partitions(self, topic: str) -> int:
        """How many partitions the topic has; 0 when it is not partitioned."""
        return await self.resources.get_partitions(str(self.parse_topic(topic)))

    async def update_partitions(self, topic: str, partitions: int) -> int:
        """Grow a partitioned topic (NotAllowedError when asked to shrink, past the namespace's
        max_topics or past max_partitions_per_topic); returns the count."""
        name = self.parse_topic(topic)
        current = await self.resources.get_partitions(str(name))
        if partitions > current > 0:
            self._check_partition_count(name, partitions)
            await self._check_room_for_topics(name, partitions - current)
        return await self.resources.update_partitions(str(name), partitions)

    async def delete_topic(self, topic: str, force: bool = False) -> None:
        """Delete a topic: refused (PreconditionFailedError) while producers or consumers are
        connected unless `force`, which disconnects them; then its ledgers, cursors, dedup state,
        ledger list, policies and ownership record go. A partitioned topic goes with all its
        partitions (those another broker owns through `remote`). NotFoundError when it does not exist."""
        name = self.parse_topic(topic)
        key = str(name)
        partitions = await self.resources.get_partitions(key)
        if partitions == 0:
            await self._delete_one(name, force, must_exist=True)
            return
        partition_names = [name.partition(i) for i in range(partitions)]
        if not force:
            for partition in partition_names:
                served = self._topics.get(str(partition))
                if served is not None:
                    self._check_no_clients(served)
        for partition in partition_names:
            try:
                await self._delete_one(partition, force, must_exist=False)
            except NotOwnerError:
                if self.remote is None:
                    raise
                with contextlib.suppress(NotFoundError):
                    await self.remote.delete_topic(str(partition), force)
        await self.resources.delete_partitioned_topic(key)
        await self.resources.delete_topic_policies(key)
        log.info("partitioned topic %s deleted with its %d partitions", key, partitions)

    @staticmethod
    def _check_no_clients(topic: Topic) -> None:
        producers, consumers = len(topic.producers), topic.consumer_count
        if producers or consumers:
            raise PreconditionFailedError(
                f"Topic has active producers/consumers: {topic.name} has {producers} producer(s) and "
                f"{consumers} consumer(s) connected; close them first, or delete with force")

    async def _delete_one(self, name: TopicName, force: bool, *, must_exist: bool) -> None:
        key = str(name)
        if not name.persistent:
            try:
                await self._delete_non_persistent(name, force)
            except NotFoundError:
                if must_exist:
                    raise
            self._non_persistent_policies.pop(key, None)
            await self.resources.delete_topic_policies(key)
            return
        if key in self._deleting:
            raise ServiceNotReadyError(f"topic {key} is already being deleted: retry")
        self._deleting.add(key)
        try:
            for task in (self._loading.get(key), self._unloading.get(key)):
                if task is not None:
                    await asyncio.wait([task])  # settled, whichever way
            topic = self._topics.get(key)
            if topic is not None:
                if not force:
                    self._check_no_clients(topic)
            elif await self.store.get(managed_ledger_key(name)) is None:
                if must_exist:
                    await self.resources.check_namespace(name.namespace_name)
                    raise NotFoundError(f"Topic {key} does not exist")
                await self.resources.delete_topic_policies(key)
                return
            else:
                await self.ownership.acquire(key)  # nobody else may serve it while it goes
            if topic is not None:
                del self._topics[key]
                await topic.close(owned=False)  # disconnects everyone; persists nothing
            await delete_topic_data(self.store, self.storage, ledger_name(name))
            await self.resources.delete_topic_policies(key)
            with contextlib.suppress(NotOwnerError):
                await self.ownership.release(key)
        finally:
            self._deleting.discard(key)
        log.info("topic %s deleted", key)

    async def topic_stats(self, topic: str) -> TopicStats:
        """The stats of a topic served here (a partitioned topic's sum is the admin servicer's
        to make: its partitions may be served by other brokers)."""
        return (await self.get_topic(topic)).stats()

    async def internal_stats(self, topic: str) -> InternalStats:
        """The managed ledger and cursors of a persistent topic served here."""
        return (await self._persistent(topic, "internal stats")).internal_stats()

    async def unload_topic(self, topic: str) -> None:
        """Move the topic off this broker: close it here (producers and consumers are told to
        reconnect; cursors, the dedup snapshot and the managed ledger are persisted), then release
        its ownership, so that the next lookup assigns it anew (to another broker, if one is
        live). NotOwnerError when another broker owns it and it was not served here."""
        key = str(self.parse_topic(topic))
        while (running := self._unloading.get(key)) is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)  # a local close in progress: release after it
        await asyncio.shield(self._start_unload(key, release=True, owned=True))

    async def _delete_non_persistent(self, name: TopicName, force: bool) -> None:
        """Delete a non-persistent topic (delete_topic routes here): NotFoundError when it is neither
        served here nor recorded in its namespace; PreconditionFailedError while producers or
        consumers are connected, unless force (which disconnects them); then it is forgotten here and
        its ownership released. Clients that come back later make it anew, as on any first use."""
        key = str(name)
        if key not in self._topics and key not in self._loading and (
                await self.store.get(registration_key(name)) is None):
            raise NotFoundError(f"Topic {key} does not exist")
        topic = await self.get_topic(key)
        assert isinstance(topic, NonPersistentTopic)
        await topic.delete(force)
        if self._topics.get(key) is topic:
            del self._topics[key]
        with contextlib.suppress(NotOwnerError):
            await self.ownership.release(key)
        log.info("topic %s deleted", key)

    def ownership_lost(self, topic: str) -> None:
        """The topic's ownership record vanished or names another broker: close the topic here
        without writing anything (another broker may serve it already) or touching the record."""
        if topic in self._topics or topic in self._loading:
            self._start_unload(topic, release=False, owned=False)

    def _topic_fenced(self, topic: PersistentTopic) -> None:
        if self._topics.get(topic.name) is topic:
            self._start_unload(topic.name, release=False, owned=False)

    def _start_unload(self, key: str, *, release: bool, owned: bool) -> asyncio.Task[None]:
        task = self._unloading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._unload(key, release=release, owned=owned), name=f"unload {key}")
            self._unloading[key] = task
            task.add_done_callback(self._unload_done(key))
        return task

    def _unload_done(self, key: str) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            if self._unloading.get(key) is task:
                del self._unloading[key]
            if not task.cancelled() and (exc := task.exception()) is not None and not isinstance(exc, NotOwnerError):
                log.warning("unloading topic %s failed: %r", key, exc)

        return done

    async def _unload(self, key: str, *, release: bool, owned: bool) -> None:
        # Runs as its own task: a caller that gives up must not cut a close or release in half.
        loading = self._loading.get(key)
        if loading is not None:
            await asyncio.wait([loading])  # loaded, failed or cancelled: whichever, it is settled
        topic = self._topics.pop(key, None)
        if topic is not None:
            await topic.close(owned=owned)
        if not release:
            return
        try:
            await self.ownership.release(key)
        except NotOwnerError:
            if topic is None:
                raise
        log.info("topic %s unloaded%s", key, " and released" if topic is not None else "")

    async def close_all(self) -> None:
        """Unload every topic (at stop, or when the broker lost its lease). The service stays
        usable: topics load again on demand."""
        await self._policies_watcher.stop()  # started again by the next load
        loading = list(self._loading.values())
        for task in loading:
            task.cancel()
        for task in loading:
            with contextlib.suppress(BaseException):
                await task
        topics, self._topics = list(self._topics.values()), {}
        results = await asyncio.gather(*(topic.close() for topic in topics), return_exceptions=True)
        for topic, result in zip(topics, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("closing topic %s failed: %r", topic.name, result)
        if self._unloading:
            await asyncio.gather(*list(self._unloading.values()), return_exceptions=True)

    # ---- producers and consumers ----

    async def create_producer(
        self, topic: str, producer_name: str | None = None, properties: dict[str, str] | None = None,
    ) -> tuple[Producer, int]:
        """A producer on the topic, and the last sequence id persisted under its name (-1 if none).
        Publish with `producer.topic.publish(producer, ...)`; close with close_producer().
        `properties` are the application's, shown in the topic's stats."""
        loaded = await self.get_topic(topic)
        producer, last_sequence_id = await loaded.add_producer(producer_name)
        producer.properties = dict(properties or {})
        if isinstance(loaded, NonPersistentTopic):  # a persistent topic checks its own limits
            # Checked once added (no await in between): registrations racing through the name
            # allocation in add_producer must not all pass a check made before it.
            try:
                check_producer_limit(loaded.name, self._topic_policies(loaded), len(loaded.producers) - 1)
            except ProducerBusyError:
                loaded.remove_producer(producer)
                raise
        return producer, last_sequence_id

    async def close_producer(self, producer: Producer) -> None:
        producer.topic.remove_producer(producer)

    async def subscribe(
        self,
        topic: str,
        subscription: str,
        sub_type: SubscriptionType = SubscriptionType.EXCLUSIVE,
        initial_position: InitialPosition = InitialPosition.LATEST,
        consumer_name: str | None = None,
        priority_level: int = 0,
        *,
        non_durable: bool = False,
        start_position: Position | None = None,
        start_inclusive: bool = False,
        properties: dict[str, str] | None = None,
    ) -> Consumer:
        """Attach a consumer (see PersistentTopic.subscribe; non_durable makes a reader's
        subscription starting at start_position; `properties` are the application's, shown in
        the topic's stats)."""
        loaded = await self.get_topic(topic)
        if isinstance(loaded, NonPersistentTopic):  # no cursor: where to start is moot
            existing = loaded.subscriptions.get(subscription)
            check_consumer_limits(loaded.name, self._topic_policies(loaded), loaded.consumer_count,
                                  len(existing.consumers) if existing is not None else 0)
            consumer = await loaded.subscribe(subscription, sub_type, consumer_name, priority_level)
        else:
            consumer = await loaded.subscribe(subscription, sub_type, initial_position, consumer_name,
                                              priority_level, non_durable=non_durable,
                                              start_position=start_position, start_inclusive=start_inclusive)
        consumer.properties = dict(properties or {})
        return consumer

    # ---- cursors and reading (see PersistentTopic for each) ----

    async def list_subscriptions(self, topic: str) -> list[str]:
        loaded = await self.get_topic(topic)
        return sorted(loaded.subscriptions)

    async def create_subscription(
        self, topic: str, subscription: str, start: Position | InitialPosition = InitialPosition.LATEST,
    ) -> None:
        await (await self._persistent(topic, "creating a subscription")).create_subscription(subscription, start)

    async def admin_dead_letter_policy(self, topic: str, subscription: str) -> DeadLetterPolicy | None:
        """The dead-letter policy an admin set for the subscription (None: none set)."""
        stored = await self.resources.get_dead_letter_policy(topic, subscription)
        return DeadLetterPolicy.from_stored(topic, subscription, stored)

    async def set_dead_letter_policy(
        self, topic: str, subscription: str, stored: StoredDeadLetterPolicy | None,
    ) -> None:
        """Keep (None: remove) a subscription's dead-letter policy in the metadata store and apply it
        to the subscription here, on the topic's owner (each partition's owner does likewise when
        the admin call reaches it; a broker loading the topic later reads it at subscribe)."""
        policy = DeadLetterPolicy.from_stored(topic, subscription, stored)  # validates before storing
        await self.resources.set_dead_letter_policy(topic, subscription, stored)
        loaded = await self.get_topic(topic)  # NotOwnerError: the admin call goes to its owner
        sub = loaded.subscriptions.get(subscription) if isinstance(loaded, PersistentTopic) else None
        if isinstance(sub, Subscription):
            sub.set_dead_letter_policies(admin=policy, keep_subscriber=True)

    async def unsubscribe(
        self, topic: str, subscription: str, force: bool = False, *, requester: Consumer | None = None,
    ) -> None:
        loaded = await self.get_topic(topic)
        await loaded.unsubscribe(subscription, force, requester=requester)

    async def reset_cursor(self, topic: str, subscription: str, target: ResetTarget) -> None:
        await (await self._persistent(topic, "resetting a cursor")).reset_cursor(subscription, target)

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> int:
        return await (await self._persistent(topic, "skipping messages")).skip_messages(subscription, count)

    async def peek_messages(self, topic: str, subscription: str, count: int) -> list[tuple[Position, bytes, int]]:
        return await (await self._persistent(topic, "peeking messages")).peek_messages(subscription, count)

    async def get_last_message_id(
        self, topic: str, subscription: str | None = None,
    ) -> tuple[LastMessageId, Position | None]:
        """The topic's last message, and the named subscription's mark-delete position (None when
        no subscription was named; NotFoundError when it does not exist)."""
        loaded = await self._persistent(topic, "getting the last message id")
        mark_delete = loaded.mark_delete_position(subscription) if subscription else None
        return await loaded.get_last_message_id(), mark_delete

    async def terminate(self, topic: str) -> Position:
        return await (await self._persistent(topic, "terminating a topic")).terminate()

    async def pull(
        self, topic: str, queue: int = -1, start: Position | None = None, max_entries: int = 0, max_bytes: int = 0,
        max_wait: float = 0.0, subscription: str | None = None,
    ) -> PullResult:
        """Read queue `queue` of `topic` (-1: the topic as named) by offset, long polling up to
        max_wait seconds (see broker.pull). INVALID_ARGUMENT "queue id out of range" for a queue
        the topic does not have, NOT_FOUND for a named subscription that does not exist."""
        check_pull_limits(max_entries, max_bytes, max_wait)
        name = await resolve_queue(self.store, self.parse_topic(topic), queue)
        loaded = await self._persistent(str(name), "pull")
        if subscription:
            loaded.mark_delete_position(subscription)  # NotFoundError when it does not exist
        return await pull(loaded, start, max_entries, max_bytes, max_wait)

    # ---- load report ----

    def load(self) -> BrokerLoad:
        """Counts and message rates since the previous call, for lookup's placement."""
        topics = list(self._topics.values())
        msg_in = sum(t.msg_in_counter for t in topics)
        msg_out = sum(t.msg_out_counter for t in topics)
        now = time.monotonic()
        then, last_in, last_out = self._rate_sample
        self._rate_sample = (now, msg_in, msg_out)
        elapsed = max(now - then, 1e-3)
        return BrokerLoad(
            topics=len(topics),
            producers=sum(len(t.producers) for t in topics),
            consumers=sum(t.consumer_count for t in topics),
            msg_rate_in=max(0, msg_in - last_in) / elapsed,
            msg_rate_out=max(0, msg_out - last_out) / elapsed,
        )
