"""A persistent topic on its owning broker: deduplication, the managed ledger entries are appended
to, and the subscriptions that read it (what every topic shares is broker.topic_base's).

submit() is the hot path: checks, dedup and the add are queued synchronously, so the order of
submit() calls is the order of entries in the log; completion (dedup's persisted mark, counters,
waking dispatchers, the publication) runs in that order too, from the managed ledger's completion
callback. A retention trimmer deletes the ledgers every subscription has consumed (broker.core.retention).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from herald.broker.core.backlog_quota import BacklogQuotaGuard
from herald.broker.core.compacted_reads import VIEW_START, after, compacted_start, wanted_start
from herald.broker.core.compaction.topic_compaction import TopicCompaction
from herald.broker.core.consumer import Consumer
from herald.broker.core.cursor import InitialPosition, ManagedCursor, ResetTarget
from herald.broker.core.dead_letters import DeadLetterPolicy, DeadLetterQueue
from herald.broker.core.dedup import DedupStatus, MessageDeduplication
from herald.broker.core.expiry import MessageExpiry
from herald.broker.core.hash_ranges import KeySharedMeta
from herald.broker.core.managed_ledger import ManagedLedger, PendingAdd, Position
from herald.broker.core.ports import BrokerObserver
from herald.broker.core.producer import Producer
from herald.broker.core.publication import Publication
from herald.broker.core.pull import AddWaiters
from herald.broker.core.retention import RetentionPolicy, RetentionTrimmer
from herald.broker.core.seek import first_after, first_at_or_after, resolve_target
from herald.broker.core.stats import ConsumerStats as ConsumerStats  # the stats types, re-exported
from herald.broker.core.stats import CursorStats, LedgerStats, SubscriptionStats, TopicStats
from herald.broker.core.stats import InternalStats as InternalStats
from herald.broker.core.stats import LastMessageId as LastMessageId
from herald.broker.core.stats import ProducerStats as ProducerStats
from herald.broker.core.subscription import Subscription, SubscriptionType
from herald.broker.core.topic_base import PRODUCER_NAME_COUNTER as PRODUCER_NAME_COUNTER  # re-exported
from herald.broker.core.topic_base import PersistentOps, Topic
from herald.broker.core.topic_jobs import CursorFlush, TopicJobs
from herald.broker.settings import BrokerSettings
from herald.common.codec.entry import is_leading_pulsar_chunk, read_metadata
from herald.common.codec.message_id import check_position
from herald.common.codec.names import validate_subscription_name
from herald.common.errors import (
    AlreadyExistsError,
    DuplicateUnknownError,
    FencedError,
    HeraldError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    PersistenceError,
    TopicTerminatedError,
)
from herald.metadata.policies import Policies
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)

# A reader's subscription whose cursor was just reset stays this long without consumers, so that
# the reader reconnecting after the seek finds it where the seek put it.
READER_RESET_GRACE_SECONDS = 30.0


class PersistentTopic(Topic[Subscription]):
    persistent = True

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
        dead_letters: DeadLetterQueue | None = None,
        observer: BrokerObserver | None = None,
        jobs: TopicJobs | None = None,
    ) -> None:
        super().__init__(name, settings, store)
        self.ledger = ledger
        self.dedup = dedup
        self.encryption_required = encryption_required
        self._on_fenced = on_fenced
        self.dead_letters = dead_letters  # the broker's, lent to subscriptions with a dead-letter policy
        self._observer = observer  # publish latency and entry size, per stored entry
        ledger.on_fenced = self._ledger_fenced
        self.fenced = False  # another broker owns the topic now: write no more metadata
        self._subscribe_lock = asyncio.Lock()
        # Periodic work runs in the broker's jobs, shared by its topics (no task per topic).
        jobs = jobs if jobs is not None else TopicJobs.for_settings(settings)
        self.cursor_flush = CursorFlush(name, jobs.cursor_flush, lambda: self.subscriptions.values(), dedup,
                                        settings.dedup_producer_inactivity_seconds, self._ledger_fenced)
        self.retention = RetentionTrimmer(
            ledger, self._mark_delete_positions, dedup,
            RetentionPolicy(settings.retention_time_seconds, settings.retention_size_bytes),
            settings.retention_check_interval, job=jobs.retention,
        )
        ledger.on_ledger_closed = self.retention.request
        self.backlog_quota = BacklogQuotaGuard(self, settings.backlog_quota_check_interval, job=jobs.backlog_quota)
        # Message TTL in seconds (0: off); policies set it per topic (broker.core.expiry acts on it).
        self.message_ttl_seconds = settings.message_ttl_seconds
        self.expiry = MessageExpiry(self, settings.message_expiry_check_interval, job=jobs.expiry)
        self.add_waiters = AddWaiters()  # long-polling pulls, woken by each add
        self._held_readers: dict[Subscription, asyncio.TimerHandle] = {}  # readers reset, kept a while
        self._background: set[asyncio.Task[None]] = set()
        # Its compacted view and compaction runs; the threshold is checked on retention's passes.
        self.compaction = TopicCompaction(self, ledger, store, settings, observer)
        self.retention.after_pass = self.compaction.check_threshold

    async def load(self) -> None:
        """Attach the subscriptions that already exist and start persisting cursors."""
        for cursor in await ManagedCursor.load_all(self.ledger, self._store, self.ledger.name):
            self._attach(cursor)
        try:
            await self.compaction.load()
        except HeraldError as exc:  # the topic serves on; read_compacted readers see no compacted view
            log.warning("topic %s: loading its compaction state failed: %s", self.name, exc)
        self.cursor_flush.start()
        self.retention.start()
        self.expiry.start()
        self.backlog_quota.start()

    def persistent_ops(self, operation: str) -> PersistentOps:
        return self

    @property
    def dedup_rejections(self) -> int:
        return self.dedup.duplicates

    async def apply_policies(self, policies: Policies) -> None:
        await super().apply_policies(policies)
        retention = policies.retention
        assert retention is not None and policies.persistence is not None and policies.backlog_quota is not None
        self.retention.policy = RetentionPolicy(float(retention.time_seconds), retention.size_bytes)
        self.message_ttl_seconds = int(policies.message_ttl_seconds or 0)
        self.compaction.threshold = int(policies.compaction_threshold or 0)
        persistence = policies.persistence
        self.ledger.persistence = (persistence.ensemble_size, persistence.write_quorum, persistence.ack_quorum)
        self.backlog_quota.update(policies.backlog_quota)
        await self.dedup.set_enabled(bool(policies.deduplication_enabled), self.ledger)

    def _mark_delete_positions(self) -> list[Position]:
        # Readers (non-durable subscriptions) do not hold back retention.
        return [sub.cursor.mark_delete_position for sub in self.subscriptions.values() if sub.durable]

    @property
    def terminated(self) -> bool:
        return self.ledger.terminated

    def _check_not_terminated(self) -> None:
        if self.ledger.terminated:
            raise TopicTerminatedError(f"topic {self.name} was terminated: no more messages are accepted")

    # ---- producers ----

    def _check_may_produce(self) -> None:
        self._check_not_terminated()

    def _admit_producer(self) -> None:
        self.backlog_quota.check_new_producer()

    def _producer_added(self, name: str) -> int:
        self.dedup.producer_connected(name)
        return self.dedup.last_sequence_id(name)

    def _producer_removed(self, name: str) -> None:
        self.dedup.producer_disconnected(name, time.monotonic())
        self.cursor_flush.mark()  # its dedup state is forgotten after inactivity, checked on flushes

    def submit(self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int,
               entry: bytes, publication: Publication) -> None:
        """Check, deduplicate and append an entry. The add is queued at once (call order is log
        order); the publication completes with (ledger id, entry id), (-1, -1) for a duplicate, or
        the error (DuplicateUnknownError: the earlier copy is still being written, retry)."""
        received = time.perf_counter()
        try:
            self._check_not_terminated()
            metadata = producer.check(entry, num_messages, encryption_required=self.encryption_required,
                                      max_message_size=self.max_message_size)
            admitted = self.backlog_quota.admit(len(entry))
        except HeraldError as exc:
            publication.fail(exc)
            return
        # The entry numbers its messages up to its highest sequence id; a Pulsar producer's SEND
        # may not say it (its batch's messages follow its sequence_id), its metadata does.
        highest_sequence_id = max(highest_sequence_id, metadata.highest_sequence_id)
        # Pulsar's clients send every chunk of a message under the message's sequence id: only its
        # last chunk is deduplicated (and marks the message persisted), as Pulsar's broker does.
        deduplicated = not is_leading_pulsar_chunk(entry, metadata)
        if admitted:
            self._append(producer, sequence_id, highest_sequence_id, num_messages, entry, publication, received,
                         deduplicated)
        else:  # producer_request_hold: stored in order once the backlog is back under quota
            self.backlog_quota.hold(len(entry), functools.partial(
                self._append, producer, sequence_id, highest_sequence_id, num_messages, entry, publication,
                received, deduplicated), publication.fail)

    def _append(
        self, producer: Producer, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes,
        publication: Publication, received: float, deduplicated: bool = True,
    ) -> None:
        """Deduplicate and queue the add (the second half of submit; later for a held send)."""
        if publication.done:
            return  # a held send its client gave up on
        if producer.closed:
            publication.fail(PersistenceError("Producer is closed"))
            return
        highest = max(sequence_id, highest_sequence_id)
        if not deduplicated:  # a chunk before its message's last: stored, and marks nothing
            callback = functools.partial(self._added, producer, -1, max(1, num_messages), publication, received)
            self.ledger.add_entry_nowait(entry, callback)
            return
        status = self.dedup.check(producer.name, sequence_id, highest)
        if status is DedupStatus.DUP:
            publication.succeed(-1, -1)
        elif status is DedupStatus.UNKNOWN:
            publication.fail(DuplicateUnknownError(
                f"message {sequence_id} of producer {producer.name} may still be being written: retry"))
        else:
            callback = functools.partial(self._added, producer, highest, max(1, num_messages), publication, received)
            self.ledger.add_entry_nowait(entry, callback)

    def _added(
        self, producer: Producer, highest: int, num_messages: int, publication: Publication, received: float,
        op: PendingAdd,
    ) -> None:
        if op.error is None and op.position is not None:
            position = op.position
            self.dedup.persisted(producer.name, highest, position)
            size = len(op.data)
            if self._observer is not None:
                self._observer.entry_stored(time.perf_counter() - received, size)
            self._count_in(producer, num_messages, size)
            for subscription in self.subscriptions.values():
                subscription.notify()
            self.add_waiters.wake()
            publication.succeed(position.ledger_id, position.entry_id)
            return
        error = op.error if isinstance(op.error, HeraldError) else HeraldError(f"write failed: {op.error!r}")
        self.dedup.write_failed(producer.name)
        if not isinstance(error, FencedError | TopicTerminatedError):
            # Later entries of this producer may already be queued behind the failed one: close the
            # producer so its client reconnects and resends from the failed one, in order.
            self.remove_producer(producer)
        publication.fail(error)

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
        """Attach a consumer, creating the subscription when it does not exist: a durable one at
        initial_position, or with non_durable a reader's, in memory only, starting at
        start_position (inclusive or not; past the end: the end; None: initial_position), that
        holds no data back and is dropped when its last consumer leaves. `key_shared`: a
        Key_Shared consumer's mode and ranges; `read_compacted`: the consumer reads the compacted
        view up to its horizon (Exclusive and Failover only: broker.core.compacted_reads)."""
        self._check_subscribe(subscription, priority_level)
        if start_position is not None:
            check_position(start_position.ledger_id, start_position.entry_id, "reader start")
        async with self._subscribe_lock:
            sub = self.subscriptions.get(subscription)
            if sub is not None and sub.durable == non_durable:
                raise NotAllowedError(
                    f"subscription {subscription!r} on {self.name} is durable: a reader (non-durable subscription) "
                    "needs a name of its own" if sub.durable else
                    f"subscription {subscription!r} on {self.name} is a reader's (non-durable): a durable "
                    "subscription needs a name of its own")
            self._check_consumer_limits(sub)
            if sub is None:
                if non_durable:
                    wanted: Position | None
                    if start_position is None:
                        wanted = wanted_start(initial_position)
                        read_from = await resolve_target(self.ledger, initial_position)
                    elif start_inclusive:
                        wanted = start_position
                        read_from = first_at_or_after(self.ledger, start_position)
                    else:
                        wanted = after(start_position)
                        read_from = first_after(self.ledger, start_position)
                    if read_compacted:  # a start in deleted ledgers reads the view from there
                        read_from = compacted_start(wanted, read_from, self.ledger.first_position)
                    cursor = ManagedCursor.non_durable(
                        self.ledger, self._store, self.ledger.name, subscription, read_from)
                else:
                    # A new read_compacted subscription at EARLIEST reads the whole view, whose
                    # oldest keys may lie in ledgers retention deleted (broker.core.compacted_reads).
                    cursor = await ManagedCursor.open(
                        self.ledger, self._store, self.ledger.name, subscription, initial_position,
                        earliest=VIEW_START if read_compacted else None)
                self._check_open()
                sub = self._attach(cursor)
            try:
                return await sub.add_consumer(sub_type, consumer_name, priority_level, key_shared,
                                              read_compacted=read_compacted)
            except BaseException:
                self._subscription_idle(sub)  # a reader's subscription nobody could join goes
                raise

    def set_dead_letter_policies(
        self, subscription: str, *, admin: DeadLetterPolicy | None, subscriber: DeadLetterPolicy | None = None,
        keep_subscriber: bool = False,
    ) -> None:
        sub = self.subscriptions.get(subscription)
        if sub is not None:
            sub.set_dead_letter_policies(admin=admin, subscriber=subscriber, keep_subscriber=keep_subscriber)

    def _attach(self, cursor: ManagedCursor) -> Subscription:
        sub = self.subscriptions[cursor.name] = Subscription(
            self.name, cursor, self.ledger, self.settings, dead_letters=self.dead_letters,
            compaction=lambda: self.compaction)
        sub.on_idle = self._subscription_idle
        cursor.on_dirty = self.cursor_flush.mark
        if cursor.dirty:
            self.cursor_flush.mark()
        return sub

    def _subscription_idle(self, sub: Subscription) -> None:
        """A reader's subscription without consumers is dropped, unless held after a reset."""
        if (sub.durable or sub.consumers or sub in self._held_readers or self.closed
                or self.subscriptions.get(sub.name) is not sub):
            return
        del self.subscriptions[sub.name]
        self._in_background(sub.close("the reader's subscription was removed", persist=False))

    def _hold_reader(self, sub: Subscription) -> None:
        """Keep a reader's subscription a while without consumers (they reconnect after a reset)."""
        loop = asyncio.get_running_loop()
        old = self._held_readers.pop(sub, None)
        if old is not None:
            old.cancel()

        def release() -> None:
            self._held_readers.pop(sub, None)
            self._subscription_idle(sub)

        self._held_readers[sub] = loop.call_later(READER_RESET_GRACE_SECONDS, release)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def create_subscription(
        self, subscription: str, start: Position | InitialPosition = InitialPosition.LATEST,
    ) -> None:
        """Create a durable subscription whose first entry is `start` (a position: the first
        entry at or after it; or an edge). AlreadyExistsError when it exists."""
        self._check_open()
        validate_subscription_name(subscription)
        async with self._subscribe_lock:
            if subscription in self.subscriptions:
                raise AlreadyExistsError(f"subscription {subscription!r} already exists on {self.name}")
            read_from = await resolve_target(self.ledger, start)
            cursor = await ManagedCursor.create(self.ledger, self._store, self.ledger.name, subscription, read_from)
            self._check_open()
            self._attach(cursor)

    async def unsubscribe(self, subscription: str, force: bool = False, *, requester: Consumer | None = None) -> None:
        """Delete a subscription and its cursor (see Topic.unsubscribe)."""
        async with self._subscribe_lock:
            sub = self._subscription(subscription)
            self._check_unsubscribe(sub, force, requester)
            held = self._held_readers.pop(sub, None)
            if held is not None:
                held.cancel()
            del self.subscriptions[subscription]
            sub.disconnect_consumers("the subscription was deleted")
            await sub.delete()
        log.info("topic %s: subscription %s deleted", self.name, subscription)

    # ---- moving cursors, reading without dispatching ----

    async def reset_cursor(self, subscription: str, target: ResetTarget) -> None:
        """Move a subscription: the next entry it delivers is the one at `target` (a position:
        the first at or after it; a PublishTime: the first published at or after it; an edge).
        Its consumers are disconnected (their clients reconnect, as in Pulsar) and a durable
        cursor is persisted at once."""
        self._check_open()
        sub = self._subscription(subscription)
        read_from = await resolve_target(self.ledger, target)
        if sub.reads_compacted:  # to the earliest, or into deleted ledgers: the view from there
            read_from = compacted_start(wanted_start(target), read_from, self.ledger.first_position)
        if self.subscriptions.get(subscription) is not sub:
            raise NotFoundError(f"subscription {subscription!r} was deleted from {self.name} during the reset")
        if not sub.durable:
            self._hold_reader(sub)
        sub.reset_cursor(read_from)
        log.info("topic %s: subscription %s reset to %s", self.name, subscription, read_from)
        if sub.durable:
            await sub.cursor.flush()

    async def skip_messages(self, subscription: str, count: int | None) -> int:
        """Acknowledge the oldest `count` unacknowledged entries (None: the whole backlog);
        returns how many were skipped."""
        if count is not None and count < 0:
            raise InvalidArgumentError(f"cannot skip {count} messages: give a count >= 0 (or skip all)")
        self._check_open()
        sub = self._subscription(subscription)
        skipped = sub.cursor.skip(count)
        sub.cursor_moved()
        if sub.durable:
            await sub.cursor.flush()
        return skipped

    async def peek_messages(self, subscription: str, count: int, skip: int = 0) -> list[tuple[Position, bytes, int]]:
        """The oldest `count` unacknowledged entries after the oldest `skip` ones (which are not
        read), with their redelivery counts, read without dispatching them."""
        if count < 1 or skip < 0:
            raise InvalidArgumentError(f"cannot peek {count} messages after {skip}: give a count >= 1, a skip >= 0")
        self._check_open()
        sub = self._subscription(subscription)
        positions = sub.cursor.unacked_positions(skip + count)[skip:]
        counts = sub.redelivery_counts
        peeked: list[tuple[Position, bytes, int]] = []
        i = 0
        while i < len(positions):  # one read per run of consecutive entries
            j = i
            while (j + 1 < len(positions) and positions[j + 1].ledger_id == positions[i].ledger_id
                   and positions[j + 1].entry_id == positions[j].entry_id + 1):
                j += 1
            wanted = set(positions[i:j + 1])
            for position, data in await self.ledger.read_entries(positions[i], j - i + 1):
                if position in wanted:
                    peeked.append((position, data, counts.get(position, 0)))
            i = j + 1
        return peeked

    def mark_delete_position(self, subscription: str) -> Position:
        return self._subscription(subscription).cursor.mark_delete_position

    async def get_last_message_id(self) -> LastMessageId:
        """The last stored message: its entry's position and, for a batch, its last index."""
        last = self.ledger.last_confirmed_position
        partition = self.partition_index
        if last.entry_id < 0:
            return LastMessageId(-1, -1, partition, -1)
        batch_index = -1
        entries = await self.ledger.read_entries(last, 1)
        if entries:
            try:
                metadata = read_metadata(entries[0][1], verify=False)
            except HeraldError:
                pass
            else:
                if metadata.batched:
                    batch_index = max(1, metadata.num_messages) - 1
        return LastMessageId(last.ledger_id, last.entry_id, partition, batch_index)

    async def terminate(self) -> Position:
        """No more messages, for good (it survives unload and restart): producers get
        TopicTerminatedError on register and on send, consumers ReachedEndOfTopic once their
        subscription acknowledged everything, pulls end_of_topic. Returns the last entry's position."""
        self._check_open()
        last = await self.ledger.terminate()
        self.add_waiters.wake()
        for sub in list(self.subscriptions.values()):
            sub.check_end_of_topic()
        log.info("topic %s terminated at %s", self.name, last)
        return last

    # ---- stats ----

    def _fill_stats(self, stats: TopicStats, subscriptions: list[tuple[Subscription, SubscriptionStats]]) -> None:
        """Storage, and each subscription's backlog in entries, messages (entries times the topic's
        messages per entry since load) and bytes."""
        ledger = self.ledger
        entries = ledger.number_of_entries_total
        messages_per_entry = self.msg_in_counter / self.entries_in_counter if self.entries_in_counter else 1.0
        average_entry_size = ledger.storage_size / entries if entries else 0.0
        for sub, sub_stats in subscriptions:
            backlog = sub.backlog
            sub_stats.backlog_entries = backlog
            sub_stats.msg_backlog = round(backlog * messages_per_entry)
            sub_stats.backlog_size = self._backlog_size(sub, backlog, average_entry_size)
            sub_stats.dead_letters = sub.dead_letter_count
            sub_stats.delayed_messages = sub.delayed_count
            sub_stats.msg_expired_counter = sub.msg_expired_counter
        stats.entries = entries
        stats.storage_size = ledger.storage_size
        stats.backlog_size = max((s.backlog_size for _, s in subscriptions), default=0)
        stats.terminated = self.terminated

    def _backlog_size(self, sub: Subscription, backlog: int, average_entry_size: float) -> int:
        """Bytes after the mark-delete position, less the individually acknowledged entries
        (counted at the average entry size: their sizes are not kept)."""
        if not backlog:
            return 0
        ledger = self.ledger
        mark_delete = sub.cursor.mark_delete_position
        individually_acked = ledger.number_of_entries(mark_delete, ledger.last_confirmed_position) - backlog
        return max(0, ledger.size_after(mark_delete) - round(individually_acked * average_entry_size))

    def internal_stats(self) -> InternalStats:
        """The managed ledger and its cursors."""
        ledger = self.ledger
        return InternalStats(
            topic=self.name,
            state=ledger.state.value,
            number_of_entries=ledger.number_of_entries_total,
            total_size=ledger.storage_size,
            current_ledger_id=ledger.current_ledger_id,
            last_confirmed_entry=ledger.last_confirmed_position,
            ledgers=[LedgerStats(info.ledger_id, info.entries, info.size) for info in ledger.ledgers],
            cursors=[
                CursorStats(
                    name=sub.name,
                    mark_delete_position=sub.cursor.mark_delete_position,
                    read_position=sub.cursor.read_position,
                    individually_acked_ranges=[
                        (Position(ledger_id, start), Position(ledger_id, end))
                        for ledger_id, start, end in sub.cursor.individually_acked
                    ],
                    backlog_entries=sub.backlog,
                    durable=sub.durable,
                )
                for sub in self.subscriptions.values()
            ],
        )

    # ---- life cycle ----

    def _ledger_fenced(self) -> None:
        if self.fenced:
            return
        self.fenced = True
        log.warning("topic %s: another broker took it over", self.name)
        if self._on_fenced is not None:
            self._on_fenced(self)

    async def close(self, *, owned: bool = True, reason: str = "the topic was unloaded") -> None:
        """Disconnect producers and consumers, let accepted writes finish, persist cursors and the
        dedup snapshot, close the managed ledger. owned=False (ownership was lost: another broker
        may serve the topic already) persists nothing, as when fenced. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if not owned:
            self.fenced = True
        self._close_producers()
        await self.backlog_quota.stop()  # held sends fail: their clients resend after reconnecting
        await self.cursor_flush.stop()  # a flush in flight finishes (never cut off)
        await self.retention.stop()
        await self.compaction.close()
        await self.expiry.stop()
        self.add_waiters.wake()  # long polls see the topic closed
        for timer in self._held_readers.values():
            timer.cancel()
        self._held_readers.clear()
        for sub in list(self.subscriptions.values()):
            await sub.close(reason, persist=not self.fenced)
        if self._background:
            await asyncio.wait(list(self._background))
        await self.ledger.close(owned=not self.fenced)
        if not self.fenced:
            await self.dedup.close()
        log.info("topic %s closed", self.name)
