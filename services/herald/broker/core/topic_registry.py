"""The topics this broker serves: each loaded once, on first use (after ownership says the topic is
ours; concurrent callers share the load), and unloaded on request (releasing its ownership, so the
topic moves), on fencing, when its ownership record vanished or names another broker, or when the
broker loses its lease. Policies are applied at load and again, live, when an admin changes them.
Names are validated here, at the edge of the core."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from herald.broker.core.nonpersistent_topic import registration_key
from herald.broker.core.policies import PoliciesWatcher, PolicyResolver, check_topic_limit
from herald.broker.core.topic_base import Topic
from herald.broker.core.topic_loader import TopicLoader
from herald.common.bounded import map_bounded
from herald.common.codec.names import TopicName
from herald.common.errors import NotAllowedError, NotOwnerError, ServiceNotReadyError
from herald.metadata.policies import Policies
from herald.metadata.resources import Resources, managed_ledger_key
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)


class TopicOwnership(Protocol):
    async def acquire(self, topic: str) -> None:
        """Return when this broker may serve the topic; NotOwnerError otherwise."""

    async def release(self, topic: str) -> bool:
        """Give up the topic's ownership (so the next lookup assigns it anew); False when it had
        no owner, NotOwnerError when another broker owns it."""


@dataclass(slots=True)
class BrokerLoad:
    topics: int
    producers: int
    consumers: int
    msg_rate_in: float
    msg_rate_out: float


class TopicRegistry:
    def __init__(
        self, store: MetadataStore, ownership: TopicOwnership, loader: TopicLoader, resources: Resources,
        policy_resolver: PolicyResolver,
    ) -> None:
        self.store = store
        self.ownership = ownership
        self.resources = resources
        self.policy_resolver = policy_resolver
        self._loader = loader
        self._topics: dict[str, Topic[Any]] = {}
        self._loading: dict[str, asyncio.Task[Topic[Any]]] = {}
        # Topics being closed here: refused meanwhile (the client looks them up again).
        self._unloading: dict[str, asyncio.Task[None]] = {}
        self._deleting: set[str] = set()  # topics being deleted here: refused meanwhile
        self._policies_watcher = PoliciesWatcher(store, self.served_topics, self._refresh_policies)
        self._bootstrapped = False
        self._rate_sample = (time.monotonic(), 0, 0)

    async def bootstrap(self) -> None:
        """Make sure the default namespace exists (idempotent; topic loads make sure too)."""
        if not self._bootstrapped:
            await self.resources.ensure_default_namespace()
            self._bootstrapped = True

    # ---- serving ----

    async def get_topic(self, topic: str) -> Topic[Any]:
        """The loaded topic; loads it (once, however many ask at the same time) when it is not."""
        name = TopicName.parse(topic)
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

    async def _load(self, name: TopicName) -> Topic[Any]:
        key = str(name)
        await self.bootstrap()
        self._policies_watcher.start()
        seen = self._policies_watcher.generation
        # NotFoundError "Tenant x does not exist" / "Namespace t/n does not exist" refuses the topic.
        policies = await self.policy_resolver.effective(name)
        await self._check_not_partitioned(name)
        if await self._is_new_topic(name):
            await self.check_room_for_topics(name, 1, policies)
        await self.ownership.acquire(key)
        topic = await self._loader.create(name, policies, self._topic_fenced)
        try:
            await topic.apply_policies(policies)
            if self._policies_watcher.generation != seen:  # changed while loading: not refreshed
                await topic.apply_policies(await self.policy_resolver.effective(name))
            await topic.load()
        except BaseException:
            with contextlib.suppress(Exception):
                await topic.close()
            raise
        self._topics[key] = topic
        log.info("%stopic %s loaded", "" if topic.persistent else "non-persistent ", key)
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

    async def exists(self, name: TopicName) -> bool:
        """Whether the topic is served here, loading, or recorded in the metadata store."""
        key = str(name)
        if key in self._topics or key in self._loading:
            return True
        record = managed_ledger_key(name) if name.persistent else registration_key(name)
        return await self.store.get(record) is not None

    async def _is_new_topic(self, name: TopicName) -> bool:
        """Whether loading `name` creates a topic (auto-creation): it has no record yet and is not
        a partition of a partitioned topic (those count when their topic is made)."""
        record = managed_ledger_key(name) if name.persistent else registration_key(name)
        if await self.store.get(record) is not None:
            return False
        return not (name.partition_index >= 0 and await self.resources.get_partitions(str(name.base)) > 0)

    async def check_room_for_topics(self, name: TopicName, adding: int, policies: Policies | None = None) -> None:
        """NotAllowedError when `name`'s namespace cannot take `adding` more topics (max_topics).
        Brokers creating topics of one namespace at the same moment may overshoot it (as Pulsar's)."""
        if policies is None:
            policies = await self.policy_resolver.effective(name)
        if policies.max_topics:
            namespace = name.namespace_name
            check_topic_limit(namespace, policies, await self.resources.count_topics(namespace), adding)

    def _load_done(self, key: str) -> Callable[[asyncio.Task[Topic[Any]]], None]:
        def done(task: asyncio.Task[Topic[Any]]) -> None:
            if self._loading.get(key) is task:
                del self._loading[key]
            if not task.cancelled():
                task.exception()  # retrieved: a load nobody awaits any more must not warn

        return done

    def served(self, key: str) -> Topic[Any] | None:
        """The topic if it is loaded here (no load)."""
        return self._topics.get(key)

    def topic_names(self) -> list[str]:
        return list(self._topics)

    def loaded_topics(self) -> list[Topic[Any]]:
        """The topics loaded here (for metrics: read them on the event loop)."""
        return list(self._topics.values())

    def served_topics(self) -> Collection[str]:
        """Topics loaded here (not those still loading: their ownership is being checked), as a
        live view: asking whether one topic is served costs O(1), not a copy of them all."""
        return self._topics.keys()

    async def _refresh_policies(self, key: str) -> None:
        """Policies of a served topic changed (PoliciesWatcher): apply them again, live."""
        topic = self._topics.get(key)
        if topic is None:
            return
        policies = await self.policy_resolver.effective(TopicName.parse(key))
        if self._topics.get(key) is topic and not topic.closed:
            await topic.apply_policies(policies)
            log.info("topic %s: policies applied again", key)

    # ---- deleting (broker.core.topic_admin) ----

    @contextlib.asynccontextmanager
    async def deleting(self, key: str) -> AsyncIterator[None]:
        """While a topic is being deleted here, it is refused (ServiceNotReadyError) to anyone
        else; loads and unloads under way settle first."""
        if key in self._deleting:
            raise ServiceNotReadyError(f"topic {key} is already being deleted: retry")
        self._deleting.add(key)
        try:
            for task in (self._loading.get(key), self._unloading.get(key)):
                if task is not None:
                    await asyncio.wait([task])  # settled, whichever way
            yield
        finally:
            self._deleting.discard(key)

    def forget(self, topic: Topic[Any]) -> None:
        """A deleted topic is served here no more (the caller closes it)."""
        if self._topics.get(topic.name) is topic:
            del self._topics[topic.name]

    # ---- unloading ----

    async def unload_topic(self, topic: str) -> None:
        """Move the topic off this broker: close it here (producers and consumers are told to
        reconnect; cursors, the dedup snapshot and the managed ledger are persisted), then release
        its ownership, so that the next lookup assigns it anew (to another broker, if one is
        live). NotOwnerError when another broker owns it and it was not served here."""
        key = str(TopicName.parse(topic))
        while (running := self._unloading.get(key)) is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)  # a local close in progress: release after it
        await asyncio.shield(self._start_unload(key, release=True, owned=True))

    def ownership_lost(self, topic: str) -> None:
        """The topic's ownership record vanished or names another broker: close the topic here
        without writing anything (another broker may serve it already) or touching the record."""
        if topic in self._topics or topic in self._loading:
            self._start_unload(topic, release=False, owned=False)

    def _topic_fenced(self, topic: Topic[Any]) -> None:
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
        """Unload every topic (at stop, or when the broker lost its lease). The registry stays
        usable: topics load again on demand."""
        await self._policies_watcher.stop()  # started again by the next load
        loading = list(self._loading.values())
        for task in loading:
            task.cancel()
        for task in loading:
            with contextlib.suppress(BaseException):
                await task
        topics, self._topics = list(self._topics.values()), {}

        async def close(topic: Topic[Any]) -> None:
            try:
                await topic.close()
            except Exception as exc:
                log.warning("closing topic %s failed: %r", topic.name, exc)

        # IN_FLIGHT at a time: thousands of partitions closing at once would hold the loop (and the
        # heartbeat that registers the broker again) for seconds.
        await map_bounded(close, topics)
        if self._unloading:
            await asyncio.gather(*list(self._unloading.values()), return_exceptions=True)

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
