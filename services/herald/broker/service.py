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
from typing import Protocol

from herald.broker.consumer import Consumer
from herald.broker.cursor import InitialPosition
from herald.broker.dedup import MessageDeduplication
from herald.broker.entry_cache import EntryCacheManager
from herald.broker.managed_ledger import LedgerStorage, ManagedLedger
from herald.broker.producer import Producer
from herald.broker.settings import BrokerSettings
from herald.broker.subscription import SubscriptionType
from herald.broker.topic import PersistentTopic, TopicStats
from herald.common.errors import InvalidArgumentError, NotAllowedError, NotOwnerError, ServiceNotReadyError
from herald.common.names import TopicName
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


def ledger_name(topic: TopicName) -> str:
    """The managed ledger's name (and metadata path) for a topic, as Pulsar spells it."""
    return f"{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"


class BrokerService:
    def __init__(
        self, settings: BrokerSettings, store: MetadataStore, storage: LedgerStorage, ownership: TopicOwnership,
    ) -> None:
        self.settings = settings
        self.store = store
        self.storage = storage
        self.ownership = ownership
        self.entry_cache = EntryCacheManager(settings.entry_cache_max_bytes)
        self._topics: dict[str, PersistentTopic] = {}
        self._loading: dict[str, asyncio.Task[PersistentTopic]] = {}
        # Topics being closed here: refused meanwhile (the client looks them up again).
        self._unloading: dict[str, asyncio.Task[None]] = {}
        self._rate_sample = (time.monotonic(), 0, 0)

    # ---- topics ----

    @staticmethod
    def parse_topic(topic: str) -> TopicName:
        name = TopicName.parse(topic)
        if not name.persistent:
            raise NotAllowedError(f"topic {name}: non-persistent topics are not supported yet")
        return name

    async def get_topic(self, topic: str) -> PersistentTopic:
        """The loaded topic; loads it (once, however many ask at the same time) when it is not."""
        name = self.parse_topic(topic)
        key = str(name)
        if key in self._unloading:
            raise ServiceNotReadyError(f"topic {key} is being unloaded from this broker: look it up again")
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

    async def _load(self, name: TopicName) -> PersistentTopic:
        key = str(name)
        await self.ownership.acquire(key)
        ml_name = ledger_name(name)
        ledger = ManagedLedger(ml_name, self.store, self.storage, self.settings, self.entry_cache.cache_for(ml_name))
        topic: PersistentTopic | None = None
        try:
            await ledger.open()
            dedup = MessageDeduplication(ml_name, self.store, self.settings.deduplication_enabled,
                                         self.settings.dedup_snapshot_interval)
            await dedup.recover(ledger)
            topic = PersistentTopic(key, ledger, dedup, self.settings, self.store, on_fenced=self._topic_fenced)
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

    def _load_done(self, key: str) -> Callable[[asyncio.Task[PersistentTopic]], None]:
        def done(task: asyncio.Task[PersistentTopic]) -> None:
            if self._loading.get(key) is task:
                del self._loading[key]
            if not task.cancelled():
                task.exception()  # retrieved: a load nobody awaits any more must not warn

        return done

    def topic_names(self) -> list[str]:
        return list(self._topics)

    def served_topics(self) -> set[str]:
        """Topics loaded here (not those still loading: their ownership is being checked)."""
        return set(self._topics)

    async def list_topics(self, namespace: str) -> list[str]:
        """Every persistent topic of a namespace ("tenant/namespace"), served here or not."""
        parts = namespace.split("/")
        if len(parts) != 2 or not all(parts):
            raise InvalidArgumentError(f"namespace {namespace!r} is invalid: expected <tenant>/<namespace>")
        prefix = f"/managed-ledgers/{namespace}/persistent/"
        found = await self.store.list(prefix)
        return sorted(f"persistent://{namespace}/{key[len(prefix):]}" for key in found)

    async def topic_stats(self, topic: str) -> TopicStats:
        return (await self.get_topic(topic)).stats()

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

    async def create_producer(self, topic: str, producer_name: str | None = None) -> tuple[Producer, int]:
        """A producer on the topic, and the last sequence id persisted under its name (-1 if none).
        Publish with `producer.topic.publish(producer, ...)`; close with close_producer()."""
        loaded = await self.get_topic(topic)
        return await loaded.add_producer(producer_name)

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
    ) -> Consumer:
        loaded = await self.get_topic(topic)
        return await loaded.subscribe(subscription, sub_type, initial_position, consumer_name, priority_level)

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
