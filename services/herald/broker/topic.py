"""A persistent topic on its owning broker: producers and their checks, deduplication, the managed
ledger entries are appended to, and the subscriptions that read it.

publish() is the hot path: checks, dedup and the add are queued synchronously, so the order of
publish() calls is the order of entries in the log; completion (dedup's persisted mark, counters,
waking dispatchers) runs in that order too, from the managed ledger's completion callback. A
retention trimmer deletes the ledgers every subscription has consumed (broker.retention).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from herald.broker.consumer import Consumer
from herald.broker.cursor import InitialPosition, ManagedCursor
from herald.broker.dedup import DedupStatus, MessageDeduplication
from herald.broker.managed_ledger import ManagedLedger, PendingAdd, Position
from herald.broker.producer import Producer
from herald.broker.retention import RetentionPolicy, RetentionTrimmer
from herald.broker.settings import BrokerSettings
from herald.broker.subscription import Subscription, SubscriptionType
from herald.common.errors import (
    BadVersionError,
    DuplicateUnknownError,
    FencedError,
    HeraldError,
    NotAllowedError,
    ProducerBusyError,
    ServiceNotReadyError,
)
from herald.common.names import validate_subscription_name
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)

PRODUCER_NAME_COUNTER = "/counters/producer-name"


@dataclass(slots=True)
class ProducerStats:
    producer_name: str
    msg_in_counter: int
    bytes_in_counter: int


@dataclass(slots=True)
class SubscriptionStats:
    name: str
    type: str
    consumers: int
    msg_out_counter: int
    backlog_entries: int


@dataclass(slots=True)
class TopicStats:
    topic: str
    msg_in_counter: int
    bytes_in_counter: int
    entries: int
    storage_size: int
    producers: list[ProducerStats] = field(default_factory=list)
    subscriptions: list[SubscriptionStats] = field(default_factory=list)


class PersistentTopic:
    def __init__(
        self,
        name: str,
        ledger: ManagedLedger,
        dedup: MessageDeduplication,
        settings: BrokerSettings,
        store: MetadataStore,
        *,
        encryption_required: bool = False,
        on_fenced: Callable[[PersistentTopic], None] | None = None,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.dedup = dedup
        self.settings = settings
        self.encryption_required = encryption_required
        self._store = store
        self._on_fenced = on_fenced
        ledger.on_fenced = self._ledger_fenced
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.closed = False
        self.fenced = False  # another broker owns the topic now: write no more metadata
        self._producer_ids = itertools.count(1)
        self._subscribe_lock = asyncio.Lock()
        self._flush_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.retention = RetentionTrimmer(
            ledger, self._mark_delete_positions, dedup,
            RetentionPolicy(settings.retention_time_seconds, settings.retention_size_bytes),
            settings.retention_check_interval,
        )
        ledger.on_ledger_closed = self.retention.request

    async def load(self) -> None:
        """Attach the subscriptions that already exist and start persisting cursors."""
        for cursor in await ManagedCursor.load_all(self.ledger, self._store, self.ledger.name):
            self.subscriptions[cursor.name] = Subscription(self.name, cursor, self.ledger, self.settings)
        self._flush_task = asyncio.get_running_loop().create_task(
            self._flush_cursors(), name=f"cursor flush {self.name}")
        self.retention.start()

    def _mark_delete_positions(self) -> list[Position]:
        return [sub.cursor.mark_delete_position for sub in self.subscriptions.values()]

    def _check_open(self) -> None:
        if self.closed:
            raise ServiceNotReadyError(f"topic {self.name} is being unloaded: look it up again")

    # ---- producers ----

    async def add_producer(self, name: str | None) -> tuple[Producer, int]:
        """Register a producer (a unique name is assigned when none is given); returns it and the
        last sequence id persisted under its name (-1 if none)."""
        self._check_open()
        if not name:
            number = await self._store.allocate_id(PRODUCER_NAME_COUNTER)
            name = f"{self.settings.cluster}-{number}"
            self._check_open()
        if name in self.producers:
            raise ProducerBusyError(f"producer {name!r} is already connected to {self.name}")
        producer = Producer(self, name, next(self._producer_ids))
        self.producers[name] = producer
        return producer, self.dedup.last_sequence_id(name)

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        producer.close()

    def publish(
        self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes,
    ) -> asyncio.Future[tuple[int, int]]:
        """Check, deduplicate and append an entry. The call queues the add at once (call order is
        log order); the returned future gives (ledger id, entry id), (-1, -1) for a duplicate, or
        the error (DuplicateUnknownError: the earlier copy is still being written, retry)."""
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        try:
            producer.check(entry, encryption_required=self.encryption_required,
                           max_message_size=self.settings.max_message_size)
        except HeraldError as exc:
            future.set_exception(exc)
            return future
        highest = max(sequence_id, highest_sequence_id)
        status = self.dedup.check(producer.name, sequence_id, highest)
        if status is DedupStatus.DUP:
            future.set_result((-1, -1))
        elif status is DedupStatus.UNKNOWN:
            future.set_exception(DuplicateUnknownError(
                f"message {sequence_id} of producer {producer.name} may still be being written: retry"))
        else:
            callback = functools.partial(self._added, producer, highest, max(1, num_messages), future)
            self.ledger.add_entry_nowait(entry, callback)
        return future

    def _added(
        self, producer: Producer, highest: int, num_messages: int, future: asyncio.Future[tuple[int, int]],
        op: PendingAdd,
    ) -> None:
        if op.error is None and op.position is not None:
            position = op.position
            self.dedup.persisted(producer.name, highest, position)
            size = len(op.data)
            producer.record(num_messages, size)
            self.msg_in_counter += num_messages
            self.bytes_in_counter += size
            for subscription in self.subscriptions.values():
                subscription.notify()
            if not future.done():
                future.set_result((position.ledger_id, position.entry_id))
            return
        error = op.error if op.error is not None else HeraldError("write failed")
        self.dedup.write_failed(producer.name)
        if not isinstance(error, FencedError):
            # Later entries of this producer may already be queued behind the failed one: close the
            # producer so its client reconnects and resends from the failed one, in order.
            self.remove_producer(producer)
        if not future.done():
            future.set_exception(error)

    # ---- subscriptions ----

    async def subscribe(
        self,
        subscription: str,
        sub_type: SubscriptionType,
        initial_position: InitialPosition = InitialPosition.LATEST,
        consumer_name: str | None = None,
        priority_level: int = 0,
    ) -> Consumer:
        self._check_open()
        validate_subscription_name(subscription)
        async with self._subscribe_lock:
            sub = self.subscriptions.get(subscription)
            if sub is None:
                cursor = await ManagedCursor.open(
                    self.ledger, self._store, self.ledger.name, subscription, initial_position)
                self._check_open()
                sub = self.subscriptions[subscription] = Subscription(self.name, cursor, self.ledger, self.settings)
            return await sub.add_consumer(sub_type, consumer_name, priority_level)

    async def unsubscribe(self, subscription: str) -> None:
        async with self._subscribe_lock:
            sub = self.subscriptions.get(subscription)
            if sub is None:
                raise NotAllowedError(f"subscription {subscription!r} does not exist on {self.name}")
            await sub.delete()
            del self.subscriptions[subscription]

    async def _flush_cursors(self) -> None:
        # Stopped by an event, never cancelled: a compare-and-set cut off in flight would leave the
        # cursor's version unknown and its final flush refused.
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), self.settings.cursor_flush_interval)
            except TimeoutError:
                pass
            for sub in list(self.subscriptions.values()):
                if sub.cursor.dirty and not sub.cursor.fenced:
                    try:
                        await sub.cursor.flush()
                    except BadVersionError:
                        # Someone else wrote the cursor: ownership is in doubt. Unloading lets the
                        # rightful owner (maybe us, after ownership is checked again) reload it.
                        self._ledger_fenced()
                        return
                    except HeraldError as exc:
                        log.warning("topic %s: persisting cursor %s failed: %s", self.name, sub.name, exc)

    # ---- state ----

    def stats(self) -> TopicStats:
        return TopicStats(
            topic=self.name,
            msg_in_counter=self.msg_in_counter,
            bytes_in_counter=self.bytes_in_counter,
            entries=self.ledger.number_of_entries_total,
            storage_size=self.ledger.storage_size,
            producers=[ProducerStats(p.name, p.msg_in_counter, p.bytes_in_counter) for p in self.producers.values()],
            subscriptions=[
                SubscriptionStats(s.name, s.type.label, len(s.consumers), s.msg_out_counter, s.backlog)
                for s in self.subscriptions.values()
            ],
        )

    @property
    def consumer_count(self) -> int:
        return sum(len(s.consumers) for s in self.subscriptions.values())

    @property
    def msg_out_counter(self) -> int:
        return sum(s.msg_out_counter for s in self.subscriptions.values())

    def _ledger_fenced(self) -> None:
        if self.fenced:
            return
        self.fenced = True
        log.warning("topic %s: another broker took it over", self.name)
        if self._on_fenced is not None:
            self._on_fenced(self)

    async def close(self, *, owned: bool = True) -> None:
        """Disconnect producers and consumers, let accepted writes finish, persist cursors and the
        dedup snapshot, close the managed ledger. owned=False (ownership was lost: another broker
        may serve the topic already) persists nothing, as when fenced. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if not owned:
            self.fenced = True
        for producer in list(self.producers.values()):
            producer.close()
        self.producers.clear()
        self._stopping.set()
        task, self._flush_task = self._flush_task, None
        if task is not None:
            await task
        await self.retention.stop()
        for sub in list(self.subscriptions.values()):
            await sub.close(persist=not self.fenced)
        await self.ledger.close(owned=not self.fenced)
        if not self.fenced:
            await self.dedup.close()
        log.info("topic %s closed", self.name)
