"""Topic administration: creating and deleting topics and partitioned topics, partition counts,
subscriptions made and moved by an admin (create, delete, reset, skip, peek, dead-letter policies),
stats, the last message id, termination and reads by offset (pull). Topics come from the registry
(broker.core.topic_registry), loaded on first use like any client's; what only a stored topic can do is
asked of its persistent_ops capability."""

from __future__ import annotations

import contextlib
import logging
from typing import Protocol

from herald.broker.core.access_modes import EPOCHS_PREFIX
from herald.broker.core.compaction.topic_compaction import CompactionInfo
from herald.broker.core.consumer import Consumer
from herald.broker.core.cursor import InitialPosition, ResetTarget
from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.broker.core.managed_ledger import LedgerStorage, Position
from herald.broker.core.message_lookup import entry_at, position_at_offset
from herald.broker.core.nonpersistent_topic import registration_key
from herald.broker.core.policies import PolicyResolver
from herald.broker.core.pull import PullResult, pull, resolve_queue
from herald.broker.core.pull import check_limits as check_pull_limits
from herald.broker.core.schemas import SchemaStorage
from herald.broker.core.stats import InternalStats, LastMessageId, TopicStats
from herald.broker.core.topic_base import PersistentOps
from herald.broker.core.topic_deletion import delete_topic_data
from herald.broker.core.topic_loader import ledger_name
from herald.broker.core.topic_registry import TopicRegistry
from herald.broker.settings import BrokerSettings
from herald.common.bounded import Pacer, map_bounded
from herald.common.codec.names import PARTITION_SUFFIX, TopicName
from herald.common.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    NotOwnerError,
)
from herald.metadata.policies import Policies
from herald.metadata.resources import Resources, StoredDeadLetterPolicy, managed_ledger_key
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)


class RemoteTopics(Protocol):
    """Topic operations on the broker that owns a topic, when it is not this one (the admin front
    end forwards them; lookup assigns an owner to a topic that has none)."""

    async def delete_topic(self, topic: str, force: bool) -> None: ...


class TopicAdmin:
    def __init__(
        self, registry: TopicRegistry, settings: BrokerSettings, store: MetadataStore, storage: LedgerStorage,
    ) -> None:
        self.topics = registry
        self.settings = settings
        self.store = store
        self.storage = storage
        # Tenants, namespaces, policies and partitions; effective policies, followed live.
        self.resources: Resources = registry.resources
        self.policy_resolver: PolicyResolver = registry.policy_resolver
        # Deletes partitions another broker owns (set by the admin front end; None: NotOwnerError).
        self.remote: RemoteTopics | None = None
        self._schema_storage = SchemaStorage(store)

    @staticmethod
    def parse_topic(topic: str) -> TopicName:
        return TopicName.parse(topic)

    async def _persistent(self, topic: str, operation: str) -> PersistentOps:
        """The loaded persistent topic, for operations only a stored topic supports (seek, skip,
        peek, terminate, pull, internal stats...); NotAllowedError on a non-persistent topic, before
        anything is loaded."""
        name = self.parse_topic(topic)
        if not name.persistent:
            raise NotAllowedError(f"{operation} is not supported on non-persistent topics ({name})")
        return (await self.topics.get_topic(topic)).persistent_ops(operation)

    async def check_topic_exists(self, topic: str) -> TopicName:
        """NotFoundError when `topic` names no topic (nor its namespace or tenant exists): an admin's
        reads and the subscription calls an admin makes act on what exists and never create it
        (loading a topic creates it, as a producer's first use does). A partitioned topic's base name
        and each of its partitions (made on first use) exist."""
        name = self.parse_topic(topic)
        await self.topics.bootstrap()  # the default namespace exists before any topic is loaded
        await self.resources.check_namespace(name.namespace_name)
        if name.partition_index >= 0:
            await self.resources.check_partition(str(name))
            if await self.resources.get_partitions(str(name.base)) > name.partition_index:
                return name
        elif await self.resources.get_partitions(str(name)) > 0:
            return name
        if not await self.topics.exists(name):
            raise NotFoundError(f"topic {name} does not exist: check its name, or create it first")
        return name

    async def _existing(self, topic: str, operation: str) -> PersistentOps:
        """The loaded persistent topic, NotFoundError when it does not exist (nothing is created)."""
        await self.check_topic_exists(topic)
        return await self._persistent(topic, operation)

    async def topic_policies(self, topic: str) -> Policies:
        """A topic's own policy overrides: of an existing topic, or set ahead of it (its first producer
        makes it with them); NotFoundError when there is neither."""
        await self.topics.bootstrap()
        policies = await self.resources.get_topic_policies(topic)
        if policies == Policies():
            await self.check_topic_exists(topic)
        return policies

    async def existing_topic_partitions(self, topic: str) -> int:
        """An existing topic's partition count (0: not partitioned); NotFoundError when it does not exist."""
        await self.check_topic_exists(topic)
        return await self.get_partitions(topic)

    async def list_topics(self, namespace: str) -> list[str]:
        """Every topic of a namespace ("tenant/namespace"), served here or not: partitioned topics
        by their base name, persistent and non-persistent ones (Resources.list_topics)."""
        return await self.resources.list_topics(namespace)

    async def effective_policies(self, topic: str) -> Policies:
        """The policies an existing topic runs with: its own > its namespace's > this broker's settings."""
        await self.check_topic_exists(topic)
        return await self.policy_resolver.effective(self.parse_topic(topic))

    # ---- creating and deleting topics, partitions ----

    async def create_topic(self, topic: str, partitions: int = 0) -> None:
        """Create a topic: partitions 0 makes a non-partitioned topic now (its managed ledger, on
        this broker: it must own it), n > 0 records a partitioned topic (its partitions are made on
        first use). AlreadyExistsError when it exists, partitioned or not."""
        name = self.parse_topic(topic)
        if partitions < 0:
            raise InvalidArgumentError(f"partitions {partitions} is invalid: use 0 (not partitioned) or more")
        if partitions > 0:
            policies = await self.policy_resolver.check_partitions(name, partitions)
            await self.topics.check_room_for_topics(name, partitions, policies)
            await self.resources.create_partitioned_topic(str(name), partitions)
            return
        key = str(name)
        await self.resources.check_namespace(name.namespace_name)
        if await self.resources.get_partitions(key) > 0:
            raise AlreadyExistsError(f"Topic {key} already exists (it is partitioned)")
        if await self.topics.exists(name):
            raise AlreadyExistsError(f"Topic {key} already exists")
        await self.topics.get_topic(key)

    async def get_partitions(self, topic: str) -> int:
        """How many partitions the topic has; 0 when it is not partitioned."""
        return await self.resources.get_partitions(str(self.parse_topic(topic)))

    async def update_partitions(self, topic: str, partitions: int) -> int:
        """Grow a partitioned topic (NotAllowedError when asked to shrink, past the namespace's
        max_topics or past its max_partitions_per_topic); returns the count. A topic made with more
        partitions than today's limit keeps them (asking for its own count changes nothing)."""
        name = self.parse_topic(topic)
        if partitions < 1:
            raise InvalidArgumentError(
                f"partitions {partitions} is invalid: a partitioned topic has 1 or more, and can only grow")
        current = await self.resources.get_partitions(str(name))
        if partitions > current > 0:
            policies = await self.policy_resolver.check_partitions(name, partitions)
            await self.topics.check_room_for_topics(name, partitions - current, policies)
        return await self.resources.update_partitions(str(name), partitions)

    async def delete_topic(self, topic: str, force: bool = False, *, delete_schema: bool = True) -> None:
        """Delete a topic: refused (PreconditionFailedError) while producers or consumers are
        connected unless `force`, which disconnects them; then its ledgers, cursors, dedup state,
        ledger list, policies and ownership record go, and its schema history unless not
        `delete_schema` (Pulsar's deleteSchema). A partitioned topic goes with all its partitions
        (those another broker owns through `remote`). NotFoundError when it does not exist."""
        name = self.parse_topic(topic)
        key = str(name)
        partitions = await self.resources.get_partitions(key)
        if partitions == 0:
            await self._delete_one(name, force, must_exist=True)
            if delete_schema and name.partition_index < 0:
                await self._schema_storage.remove(key)
            return
        if not force:
            # Its partitions among those served here, without making a name per partition.
            prefix, pacer = key + PARTITION_SUFFIX, Pacer()
            for served in self.topics.loaded_topics():
                served_key = served.name
                if served_key.startswith(prefix) and served_key[len(prefix):].isdigit():
                    served.check_no_clients()
                await pacer.pace()

        async def delete_partition(index: int) -> None:
            partition = name.partition(index)
            try:
                await self._delete_one(partition, force, must_exist=False)
            except NotOwnerError:
                if self.remote is None:
                    raise
                with contextlib.suppress(NotFoundError):
                    await self.remote.delete_topic(str(partition), force)

        # IN_FLIGHT at a time, the loop given back; a failure lets the deletes under way finish.
        await map_bounded(delete_partition, range(partitions), cancel_on_error=False)
        await self.resources.delete_partitioned_topic(key)
        await self.resources.delete_topic_policies(key)
        if delete_schema:
            await self._schema_storage.remove(key)
        log.info("partitioned topic %s deleted with its %d partitions", key, partitions)

    async def _delete_one(self, name: TopicName, force: bool, *, must_exist: bool) -> None:
        key = str(name)
        if not name.persistent:
            try:
                await self._delete_non_persistent(name, force)
            except NotFoundError:
                if must_exist:
                    raise
            await self.resources.delete_topic_policies(key)
            await self._forget_producer_state(name)
            return
        async with self.topics.deleting(key):
            topic = self.topics.served(key)
            if topic is not None:
                if not force:
                    topic.check_no_clients()
            elif await self.store.get(managed_ledger_key(name)) is None:
                if must_exist:
                    await self.resources.check_namespace(name.namespace_name)
                    raise NotFoundError(f"Topic {key} does not exist")
                await self.resources.delete_topic_policies(key)
                return
            else:
                await self.topics.ownership.acquire(key)  # nobody else may serve it while it goes
            if topic is not None:
                self.topics.forget(topic)
                await topic.close(owned=False)  # disconnects everyone; persists nothing
            await delete_topic_data(self.store, self.storage, ledger_name(name))
            await self.resources.delete_topic_policies(key)
            await self._forget_producer_state(name)
            with contextlib.suppress(NotOwnerError):
                await self.topics.ownership.release(key)
        log.info("topic %s deleted", key)

    async def _forget_producer_state(self, name: TopicName) -> None:
        """A deleted topic's epoch goes: a topic made again under the name starts afresh, as in
        Pulsar. (Its schema history goes in delete_topic, unless asked to keep it; a partition's is
        its partitioned topic's.)"""
        await self.store.delete(EPOCHS_PREFIX + str(name))

    async def _delete_non_persistent(self, name: TopicName, force: bool) -> None:
        """Delete a non-persistent topic (delete_topic routes here): NotFoundError when it is neither
        served here nor recorded in its namespace; PreconditionFailedError while producers or
        consumers are connected, unless force (which disconnects them); then it is forgotten here and
        its ownership released. Clients that come back later make it anew, as on any first use."""
        key = str(name)
        if not await self.topics.exists(name):
            raise NotFoundError(f"Topic {key} does not exist")
        topic = await self.topics.get_topic(key)
        if not force:
            topic.check_no_clients()
        await topic.close(reason="the topic was deleted")
        await self.store.delete(registration_key(name))
        self.topics.forget(topic)
        with contextlib.suppress(NotOwnerError):
            await self.topics.ownership.release(key)
        log.info("topic %s deleted", key)

    # ---- stats ----

    async def topic_stats(self, topic: str) -> TopicStats:
        """The stats of a topic served here (a partitioned topic's sum is the admin front end's to
        make: its partitions may be served by other brokers)."""
        await self.check_topic_exists(topic)
        return (await self.topics.get_topic(topic)).stats()

    async def internal_stats(self, topic: str) -> InternalStats:
        """The managed ledger and cursors of a persistent topic served here."""
        return (await self._existing(topic, "internal stats")).internal_stats()

    # ---- subscriptions ----

    async def list_subscriptions(self, topic: str) -> list[str]:
        await self.check_topic_exists(topic)
        return (await self.topics.get_topic(topic)).list_subscriptions()

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
        loaded = await self.topics.get_topic(topic)  # NotOwnerError: the admin call goes to its owner
        loaded.set_dead_letter_policies(subscription, admin=policy, keep_subscriber=True)

    async def unsubscribe(
        self, topic: str, subscription: str, force: bool = False, *, requester: Consumer | None = None,
    ) -> None:
        loaded = await self.topics.get_topic(topic)
        await loaded.unsubscribe(subscription, force, requester=requester)

    async def reset_cursor(self, topic: str, subscription: str, target: ResetTarget) -> None:
        await (await self._existing(topic, "resetting a cursor")).reset_cursor(subscription, target)

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> int:
        return await (await self._existing(topic, "skipping messages")).skip_messages(subscription, count)

    async def peek_messages(
        self, topic: str, subscription: str, count: int, skip: int = 0,
    ) -> list[tuple[Position, bytes, int]]:
        """The oldest `count` unacknowledged entries after the oldest `skip` (Pulsar's peek of the
        n-th message reads that one entry only)."""
        return await (await self._existing(topic, "peeking messages")).peek_messages(subscription, count, skip)

    async def expire_messages(self, topic: str, subscription: str | None, seconds: int) -> int:
        """Acknowledge what was published more than `seconds` ago on a subscription (None: every
        durable one) of an existing topic served here; returns the messages expired."""
        loaded = await self._existing(topic, "expiring messages")
        return await loaded.expiry.expire_older_than(seconds, subscription)

    # ---- reading and ending a topic ----

    async def message_by_id(self, topic: str, position: Position) -> bytes:
        """The entry at `position` of an existing topic served here (NotFoundError: none there)."""
        loaded = await self._existing(topic, "getting a message by id")
        return await entry_at(loaded.ledger, str(self.parse_topic(topic)), position)

    async def examine_message(self, topic: str, offset: int, *, latest: bool) -> tuple[Position, bytes]:
        """The entry `offset` entries from the earliest (1: the first) or latest (1: the last) one."""
        loaded = await self._existing(topic, "examining a message")
        name = str(self.parse_topic(topic))
        position = position_at_offset(loaded.ledger, name, offset, latest=latest)
        return position, await entry_at(loaded.ledger, name, position)

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

    async def compact(self, topic: str) -> None:
        """Start compacting the topic (its owner runs it); CompactionInProgressError while it runs."""
        (await self._persistent(topic, "compaction")).compaction.trigger()

    async def compaction_status(self, topic: str) -> CompactionInfo:
        return (await self._existing(topic, "compaction")).compaction.info()

    async def pull(
        self, topic: str, queue: int = -1, start: Position | None = None, max_entries: int = 0, max_bytes: int = 0,
        max_wait: float = 0.0, subscription: str | None = None, *, read_compacted: bool = False,
    ) -> PullResult:
        """Read queue `queue` of `topic` (-1: the topic as named) by offset, long polling up to
        max_wait seconds (see broker.core.pull); read_compacted: the compacted view up to its
        horizon, then the log. INVALID_ARGUMENT "queue id out of range" for a queue the topic does
        not have, NOT_FOUND for a named subscription that does not exist."""
        check_pull_limits(max_entries, max_bytes, max_wait)
        name = await resolve_queue(self.store, self.parse_topic(topic), queue)
        loaded = await self._persistent(str(name), "pull")
        if subscription:
            loaded.mark_delete_position(subscription)  # NotFoundError when it does not exist
        return await pull(loaded, start, max_entries, max_bytes, max_wait,
                          compacted=loaded.compaction if read_compacted else None)
