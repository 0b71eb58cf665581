"""The policies a broker applies to the topics it serves: a topic's own overrides (a partition's,
then its partitioned topic's) over its namespace's policies over the broker's settings. They are
resolved when a topic loads and again, live, whenever an admin changes namespace or topic policies
(PoliciesWatcher follows /admin/ in the metadata store).

Applying them sets each topic's limits and switches (Topic.apply_policies); the checks that use the
limits are here, so persistent and non-persistent topics word them alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection

from herald.broker.settings import BrokerSettings
from herald.common.bounded import Pacer
from herald.common.codec.names import TopicName
from herald.common.errors import ConsumerBusyError, HeraldError, NotAllowedError, ProducerBusyError
from herald.common.tasks import cancel_and_wait
from herald.metadata.policies import BacklogQuota, BacklogQuotaPolicy, PersistencePolicy, Policies, RetentionPolicy
from herald.metadata.resources import NAMESPACE_POLICIES_PREFIX, TOPIC_POLICIES_PREFIX, Resources
from herald.metadata.store import MetadataStore, WatchEvent

log = logging.getLogger(__name__)

ADMIN_PREFIX = "/admin/"


def broker_defaults(settings: BrokerSettings) -> Policies:
    """The broker's settings as complete policies: what a topic gets when nobody overrides."""
    return Policies(
        retention=RetentionPolicy(int(settings.retention_time_seconds), settings.retention_size_bytes),
        message_ttl_seconds=settings.message_ttl_seconds,
        backlog_quota=BacklogQuota(settings.backlog_quota_limit_bytes, settings.backlog_quota_limit_seconds,
                                   BacklogQuotaPolicy.parse(settings.backlog_quota_policy)),
        max_producers_per_topic=settings.max_producers_per_topic,
        max_consumers_per_topic=settings.max_consumers_per_topic,
        max_consumers_per_subscription=settings.max_consumers_per_subscription,
        deduplication_enabled=settings.deduplication_enabled,
        encryption_required=False,
        persistence=PersistencePolicy(settings.ensemble_size, settings.write_quorum, settings.ack_quorum),
        max_message_size=settings.max_message_size,
        max_topics=settings.max_topics_per_namespace,
        max_partitions_per_topic=settings.max_partitions_per_topic,
        # Pulsar's broker defaults: schemaCompatibilityStrategy=FULL, schemaValidationEnforced=false,
        # isAllowAutoUpdateSchema=true, brokerServiceCompactionThresholdInBytes=0.
        schema_compatibility_strategy="FULL",
        schema_validation_enforced=False,
        is_allow_auto_update_schema=True,
        compaction_threshold=0,
    )


class PolicyResolver:
    """Effective policies of a topic, read from the metadata store on each call."""

    def __init__(self, resources: Resources, settings: BrokerSettings) -> None:
        self.resources = resources
        self.defaults = broker_defaults(settings)

    async def effective(self, topic: TopicName) -> Policies:
        """Topic > namespace > broker settings; NotFoundError for an unknown tenant or namespace."""
        namespace = await self.resources.get_namespace_policies(topic.namespace_name)
        own = await self.resources.get_topic_policies(str(topic))
        if topic.base != topic:
            own = own.merged_over(await self.resources.get_topic_policies(str(topic.base)))
        return own.merged_over(namespace).merged_over(self.defaults)

    async def check_partitions(self, topic: TopicName, partitions: int) -> Policies:
        """NotAllowedError when a partitioned topic may not have `partitions` (its namespace's
        max_partitions_per_topic, else the broker's), checked before any per-partition work;
        returns the namespace's policies over the broker's (max_topics is a namespace policy too)."""
        namespace = await self.resources.get_namespace_policies(topic.namespace_name)  # NotFound: no namespace
        policies = namespace.merged_over(self.defaults)
        from_namespace = namespace.max_partitions_per_topic is not None
        check_partition_limit(topic, policies, partitions, from_namespace=from_namespace)
        return policies


# ---- the limits ----

def check_producer_limit(topic: str, policies: Policies, producers: int) -> None:
    """ProducerBusyError when the topic already has its maximum of producers."""
    limit = policies.max_producers_per_topic or 0
    if 0 < limit <= producers:
        raise ProducerBusyError(f"Topic reached max producers limit ({limit}): {topic} has {producers} producers")


def check_topic_limit(namespace: str, policies: Policies, topics: int, adding: int) -> None:
    """NotAllowedError when `adding` more topics would take the namespace past its max_topics."""
    limit = policies.max_topics or 0
    if 0 < limit < topics + adding:
        more = "one more topic" if adding == 1 else f"{adding} more topics (partitions count one each)"
        raise NotAllowedError(
            f"namespace {namespace} has reached its limit of {limit} topics (max_topics; it holds {topics}): "
            f"cannot create {more}; delete topics or raise the namespace's max_topics policy")


def check_partition_limit(topic: TopicName, policies: Policies, partitions: int, *, from_namespace: bool) -> None:
    """NotAllowedError when a partitioned topic would have more partitions than its namespace's
    max_partitions_per_topic (`from_namespace`: set by the namespace's policy, else the broker's
    setting). O(1): checked before any per-partition work."""
    limit = policies.max_partitions_per_topic or 0
    if 0 < limit < partitions:
        source = (f"namespace {topic.namespace_name}'s policy max_partitions_per_topic" if from_namespace
                  else "the broker setting max_partitions_per_topic")
        raise NotAllowedError(
            f"topic {topic} cannot have {partitions} partitions: the limit is {limit} per topic ({source}); "
            f"use at most {limit}, or ask a super-user to raise the namespace's max_partitions_per_topic policy")


def check_consumer_limits(topic: str, policies: Policies, topic_consumers: int, subscription_consumers: int) -> None:
    """ConsumerBusyError when the topic or the subscription already has its maximum of consumers."""
    limit = policies.max_consumers_per_topic or 0
    if 0 < limit <= topic_consumers:
        raise ConsumerBusyError(
            f"Topic reached max consumers limit ({limit}): {topic} has {topic_consumers} consumers")
    limit = policies.max_consumers_per_subscription or 0
    if 0 < limit <= subscription_consumers:
        raise ConsumerBusyError(
            f"Subscription reached max consumers limit ({limit}): it has {subscription_consumers} consumers")


# ---- following changes ----

def affected_by(key: str) -> Callable[[TopicName], bool] | None:
    """Which topics a change of metadata key `key` concerns (None: no policies changed)."""
    if key.startswith(NAMESPACE_POLICIES_PREFIX):
        namespace = key[len(NAMESPACE_POLICIES_PREFIX):]
        return lambda name: name.namespace_name == namespace
    if key.startswith(TOPIC_POLICIES_PREFIX):
        topic = key[len(TOPIC_POLICIES_PREFIX):]
        return lambda name: str(name) == topic or str(name.base) == topic
    return None


class PoliciesWatcher:
    """Calls `refresh(topic)` for each served topic whose namespace or topic policies changed, and
    for all of them whenever the watch (re)starts (a change may have been missed meanwhile).

    `generation` grows with every change seen, so that a topic loading while one arrives (not yet
    served, so not refreshed) knows to resolve its policies again."""

    def __init__(
        self, store: MetadataStore, served: Callable[[], Collection[str]],
        refresh: Callable[[str], Awaitable[None]], retry_seconds: float = 1.0,
    ) -> None:
        self._store = store
        self._served = served
        self._refresh = refresh
        self._retry_seconds = retry_seconds
        self._task: asyncio.Task[None] | None = None
        self.generation = 0

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            watch = self._store.watch(ADMIN_PREFIX)  # registered now: nothing after start() is missed
            self._task = asyncio.get_running_loop().create_task(self._run(watch), name="policies-watcher")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self, watch: AsyncIterator[WatchEvent]) -> None:
        while True:
            try:
                self.generation += 1
                await self._refresh_matching(lambda name: True)
                async for event in watch:
                    matches = affected_by(event.key)
                    if matches is not None:
                        self.generation += 1
                        await self._refresh_matching(matches)
                return  # the store closed
            except HeraldError as exc:
                log.warning("watching policies failed (%s): watching again in %.1fs", exc, self._retry_seconds)
            finally:
                with contextlib.suppress(Exception):
                    await watch.aclose()  # type: ignore[attr-defined]
            await asyncio.sleep(self._retry_seconds)
            watch = self._store.watch(ADMIN_PREFIX)

    async def _refresh_matching(self, matches: Callable[[TopicName], bool]) -> None:
        pacer = Pacer()  # a namespace's policies may concern thousands of served partitions
        for topic in list(self._served()):
            await pacer.pace()
            if matches(TopicName.parse(topic)):
                try:
                    await self._refresh(topic)
                except HeraldError as exc:
                    log.warning("topic %s: applying changed policies failed: %s", topic, exc)
