"""The broker core's front door, as every front end sees it: the topics this broker serves
(`topics`, broker.topic_registry: loading, unloading, ownership), their administration (TopicAdmin,
broker.topic_admin, whose calls it answers), and producers and consumers attaching to topics.

Front ends drive producers and consumers through sessions (broker.producer_session,
broker.consumer_session), which call create_producer / subscribe here; the broker-wide parts (the
entry cache's byte budget, the dead-letter queue dlq-workers are served from) are made here once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from herald.broker.core.access_modes import ProducerAccessMode
from herald.broker.core.consumer import Consumer
from herald.broker.core.cursor import InitialPosition
from herald.broker.core.dead_letters import DeadLetterPolicy, DeadLetterQueue
from herald.broker.core.entry_cache import EntryCacheManager
from herald.broker.core.hash_ranges import KeySharedMeta
from herald.broker.core.managed_ledger import LedgerStorage, Position
from herald.broker.core.policies import PolicyResolver
from herald.broker.core.ports import BrokerObserver
from herald.broker.core.producer import Producer
from herald.broker.core.schema_registry import SchemaRegistry
from herald.broker.core.subscription_type import SubscriptionType
from herald.broker.core.topic_admin import RemoteTopics as RemoteTopics  # re-exported: the core's ports
from herald.broker.core.topic_admin import TopicAdmin
from herald.broker.core.topic_base import Topic
from herald.broker.core.topic_loader import TopicLoader
from herald.broker.core.topic_loader import ledger_name as ledger_name
from herald.broker.core.topic_registry import BrokerLoad, TopicRegistry
from herald.broker.core.topic_registry import TopicOwnership as TopicOwnership
from herald.broker.settings import BrokerSettings
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import HeraldError
from herald.metadata.resources import Resources
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)


class BrokerService(TopicAdmin):
    def __init__(
        self, settings: BrokerSettings, store: MetadataStore, storage: LedgerStorage, ownership: TopicOwnership,
        observer: BrokerObserver | None = None,
    ) -> None:
        self.observer = observer  # told of stored entries and throttled producers (None: nobody)
        self.entry_cache = EntryCacheManager(settings.entry_cache_max_bytes, settings.read_ahead_total_max_bytes)
        self.dead_letters = DeadLetterQueue()  # served to dlq-workers by the dead-letter front end
        resources = Resources(store)
        loader = TopicLoader(settings, store, storage, self.entry_cache, self.dead_letters, observer)
        self.topic_jobs = loader.jobs  # periodic work of every persistent topic: one task per job
        registry = TopicRegistry(store, ownership, loader, resources, PolicyResolver(resources, settings))
        super().__init__(registry, settings, store, storage)
        self.ownership = ownership
        # Topics' schema histories and what may join them (broker.core.schema_registry).
        self.schemas = SchemaRegistry(store, self.policy_resolver)

    async def start(self) -> None:
        """Make sure the default namespace exists (idempotent; topic loads make sure too)."""
        await self.topics.bootstrap()

    # ---- the registry's, for front ends and the process ----

    async def get_topic(self, topic: str) -> Topic[Any]:
        return await self.topics.get_topic(topic)

    def topic_names(self) -> list[str]:
        return self.topics.topic_names()

    def loaded_topics(self) -> list[Topic[Any]]:
        return self.topics.loaded_topics()

    def served_topics(self) -> Collection[str]:
        return self.topics.served_topics()

    async def unload_topic(self, topic: str) -> None:
        await self.topics.unload_topic(topic)

    def ownership_lost(self, topic: str) -> None:
        self.topics.ownership_lost(topic)

    async def close_all(self) -> None:
        await self.topics.close_all()

    def load(self) -> BrokerLoad:
        return self.topics.load()

    # ---- producers and consumers ----

    async def create_producer(
        self, topic: str, producer_name: str | None = None, properties: dict[str, str] | None = None, *,
        access_mode: ProducerAccessMode = ProducerAccessMode.SHARED, topic_epoch: int | None = None,
        on_queued: Callable[[], None] | None = None, schema: SchemaInfo | None = None,
    ) -> tuple[Producer, int]:
        """A producer on the topic, and the last sequence id persisted under its name (-1 if none).
        Publish with `producer.topic.publish(producer, ...)` (or submit); close with close_producer().
        `properties` are the application's, shown in the topic's stats. Access modes and epochs:
        broker.core.access_modes (a WAIT_FOR_EXCLUSIVE producer calls on_queued, then waits);
        `schema`: broker.core.schema_registry (the producer's schema_version, the version it writes
        with, is what to tell its client)."""
        loaded = await self.topics.get_topic(topic)
        schema_version = await self.schemas.register_producer(topic, schema)
        producer, last_sequence_id = await loaded.add_producer(producer_name, access_mode, topic_epoch, on_queued)
        producer.properties = dict(properties or {})
        producer.schema_version = schema_version
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
        dead_letter_policy: DeadLetterPolicy | None = None,
        key_shared: KeySharedMeta | None = None,
        schema: SchemaInfo | None = None,
        read_compacted: bool = False,
    ) -> Consumer:
        """Attach a consumer (see Topic.subscribe; non_durable makes a reader's subscription
        starting at start_position; `properties` are the application's, shown in the topic's stats;
        `key_shared` is a Key_Shared consumer's mode and ranges). On a stored topic the subscription's
        dead-letter policy is then the one an admin set, else `dead_letter_policy` (the subscriber's:
        clients send theirs on every subscribe). A consumer's `schema` must read the topic's
        (broker.core.schema_registry). `read_compacted`: it reads the compacted view up to the
        horizon, then the log (Exclusive and Failover only: broker.core.compacted_reads)."""
        loaded = await self.topics.get_topic(topic)
        await self.schemas.check_consumer(topic, schema)
        consumer = await loaded.subscribe(subscription, sub_type, initial_position, consumer_name, priority_level,
                                          non_durable=non_durable, start_position=start_position,
                                          start_inclusive=start_inclusive, key_shared=key_shared,
                                          read_compacted=read_compacted)
        consumer.properties = dict(properties or {})
        if loaded.persistent:  # only a stored topic redelivers, so only it has dead letters
            try:
                admin_policy = await self.admin_dead_letter_policy(topic, subscription)
            except HeraldError as error:
                log.warning("subscription %s on %s: reading its dead-letter policy failed (%s): using the "
                            "subscriber's", subscription, topic, error)
                admin_policy = None
            except BaseException:  # cancelled (the client vanished): the attached consumer must not linger
                await consumer.close()
                raise
            loaded.set_dead_letter_policies(subscription, admin=admin_policy, subscriber=dead_letter_policy)
        return consumer
