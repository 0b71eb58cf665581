"""MultiTopicConsumer: one subscription over several topics, or over every partition of a
partitioned topic (Pulsar's MultiTopicsConsumerImpl). It holds one TopicConsumer per topic
partition (a `_Member`, receiving min(receiver_queue_size, max total / n) at a time) and one shared
receive queue (ReceiveQueue, as a TopicConsumer has). What a member receives moves to the shared
queue at once while it has room; when it is full the member keeps the rest, and so stops getting
permits back, until the shared queue is down to half (SEEDS §3). Acks, nacks and reconsume_later
go to the member whose topic the message came from. Partitions added to a partitioned topic are
picked up every auto_update_partitions_interval; PatternConsumer (pattern_consumer.py) adds and
removes whole topics."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from herald.api.v1 import broker_pb2
from herald.client.config import ClientConfig, ConsumerConfig, ConsumerType
from herald.client.connection import ConnectionPool
from herald.client.consumer import AsyncConsumer
from herald.client.consumer_commands import seek_request
from herald.client.listeners import ConsumerEventListener
from herald.client.lookup import LookupService
from herald.client.members import close_all, start_all
from herald.client.message import Message
from herald.client.message_listener import ListenerTask
from herald.client.receive_queue import ReceiveQueue
from herald.client.retry_letters import RetryLetters, delay_ms
from herald.client.schema import Schema
from herald.client.stats import ConsumerStats
from herald.client.topic_consumer import TopicConsumer
from herald.common.bounded import Pacer
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import ConsumerClosedError, HeraldError, InvalidArgumentError, NotAllowedError

log = logging.getLogger(__name__)

T = TypeVar("T")
Position = tuple[int, int]

_OPEN, _CLOSING, _CLOSED = "open", "closing", "closed"
_EDGES = (MessageId.earliest, MessageId.latest)


def member_queue_size(config: ConsumerConfig, members: int) -> int:
    """Each member's receiver queue: min(receiver_queue_size, max total across partitions / n),
    and at least one, so that a consumer of very many partitions still receives."""
    return max(1, min(config.receiver_queue_size,
                      config.max_total_receiver_queue_size_across_partitions // max(1, members)))


def partition_names(topic: str, partitions: int) -> list[str]:
    """The topics a consumer of `topic` reads: its partitions, or itself when it has none."""
    if partitions <= 0:
        return [topic]
    name = TopicName.parse(topic)
    return [str(name.partition(index)) for index in range(partitions)]


class _Member(TopicConsumer[T]):
    """The consumer of one topic partition inside a MultiTopicConsumer: what it receives moves on
    to the shared queue, and what makes it drop what it holds drops its messages there too."""

    def __init__(
        self, parent: MultiTopicConsumer[T], topic: str, config: ConsumerConfig, client_config: ClientConfig,
        schema: Schema[T] | None,
    ) -> None:
        super().__init__(topic, config, client_config, parent._pool, parent._lookup, parent._member_closed, schema)
        self._parent = parent
        # A persistent topic's ledger ids are unique in the cluster; non-persistent topics share one.
        self._ledger_routes = TopicName.parse(topic).persistent

    def _entries_delivered(self, entries: Iterable[broker_pb2.DeliveredEntry]) -> None:
        super()._entries_delivered(entries)
        parent = self._parent
        if self._ledger_routes:
            ledgers = parent._ledgers
            for delivered in entries:  # a MessageId names its ledger: which member to route it to
                if delivered.ledger_id not in ledgers:
                    ledgers[delivered.ledger_id] = self
        if self._queue:
            parent._collect(self)

    def _dropped(self, since: Position | None) -> None:
        self._parent._forget(self, since)


class _SharedPermits:
    """The shared queue's count of messages taken: once half of it was taken since the last look,
    the members it had no room for move theirs (SEEDS §3)."""

    def __init__(self, parent: MultiTopicConsumer[Any], queue_size: int) -> None:
        self._parent = parent
        self.permits = 0
        self.flow_threshold = max(1, queue_size // 2)

    def send_flow(self) -> None:
        self.permits = 0
        self._parent._unblock()


class _EventRelay(ConsumerEventListener):
    """A member's Failover events, told to the application's listener as the parent's."""

    def __init__(self, parent: MultiTopicConsumer[Any], listener: ConsumerEventListener) -> None:
        self._parent = parent
        self._listener = listener

    def became_active(self, consumer: Any, partition: int) -> None:
        self._listener.became_active(self._parent, partition)

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self._listener.became_inactive(self._parent, partition)


class MultiTopicConsumer(ReceiveQueue[T], AsyncConsumer[T]):
    """Receives from several topics, or from every partition of partitioned ones, through one
    subscription. Made by `AsyncClient.subscribe`; its docstrings are AsyncConsumer's, where the
    methods differ they say how."""

    _member_type: type[_Member[Any]] = _Member

    def __init__(
        self, topics: Sequence[str], config: ConsumerConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[MultiTopicConsumer[Any]], None], schema: Schema[T] | None = None,
        retry: RetryLetters | None = None, partitions: Mapping[str, int] | None = None,
    ) -> None:
        listener = config.message_listener is not None
        ReceiveQueue.__init__(self, deque(), _SharedPermits(self, config.receiver_queue_size),
                              config.batch_receive_policy, listener,
                              plain=not listener and not config.interceptors and not config.ack_timeout)
        self._names = list(topics)
        self._known_partitions = dict(partitions or {})
        self._config = config
        self._client_config = client_config
        self._pool = pool
        self._lookup = lookup
        self._on_closed = on_closed
        self._schema = schema
        self._retry = retry
        # Every member shares one consumer name (the broker orders Failover consumers by it).
        self._name = config.consumer_name or uuid.uuid4().hex[:10]
        events = config.consumer_event_listener
        self._member_config = dataclasses.replace(
            config, consumer_name=self._name, message_listener=None,
            consumer_event_listener=None if events is None else _EventRelay(self, events))
        # The parent logs the stats, added up; members log nothing of their own.
        self._member_client_config = dataclasses.replace(client_config, stats_interval=0)
        self._members: dict[str, _Member[T]] = {}  # by topic partition
        self._partitioned: dict[str, int] = {}  # topic subscribed -> its partitions (0: not partitioned)
        self._ledgers: dict[int, _Member[T]] = {}  # ledger id -> the member that received from it
        self._blocked: dict[_Member[T], None] = {}  # members holding messages the shared queue had no room for
        self._capacity = config.receiver_queue_size
        self._resume_at = config.receiver_queue_size // 2
        self._membership = asyncio.Lock()  # adding and removing members, one change at a time
        self._state = _OPEN
        self._paused = False
        self._epoch = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: ListenerTask | None = None
        self._stats_timer: asyncio.TimerHandle | None = None
        self._last_stats: tuple[ConsumerStats, float] | None = None

    # ---- what it is ------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return ",".join(self._names)

    @property
    def subscription(self) -> str:
        return self._config.subscription_name

    @property
    def consumer_name(self) -> str:
        return self._name

    @property
    def consumer_type(self) -> ConsumerType:
        return self._config.consumer_type

    @property
    def is_connected(self) -> bool:
        """True when every member is connected."""
        return all(member.is_connected for member in self._members.values())

    @property
    def closed(self) -> bool:
        return self._state is not _OPEN

    @property
    def epoch(self) -> int:
        """Moves on a seek (every member's position changed). A member that reconnects drops its
        own messages from the shared queue but does not move it: the sync facade's buffer holds
        the other members' messages too, and those would not come again."""
        return self._epoch

    @property
    def partitions(self) -> Sequence[TopicConsumer[T]]:
        """The members, one per topic partition, in the order they were subscribed."""
        return tuple(self._members.values())

    def has_reached_end_of_topic(self) -> bool:
        members = self._members.values()
        return bool(members) and all(member.has_reached_end_of_topic() for member in members)

    def stats(self) -> ConsumerStats:
        """The members' counters added up; queue_size counts the shared queue too."""
        parts = [member.stats() for member in self._members.values()]
        return ConsumerStats(
            messages_received=sum(s.messages_received for s in parts),
            bytes_received=sum(s.bytes_received for s in parts), acks_sent=sum(s.acks_sent for s in parts),
            nacks_sent=sum(s.nacks_sent for s in parts),
            receive_failures=self._receive_failures + sum(s.receive_failures for s in parts),
            ack_timeouts=sum(s.ack_timeouts for s in parts), dropped_entries=sum(s.dropped_entries for s in parts),
            queue_size=len(self._queue) + sum(s.queue_size for s in parts),
            reconnects=sum(s.reconnects for s in parts),
        )

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(topic={self.topic!r}, subscription={self.subscription!r}, "
                f"partitions={len(self._members)}, state={self._state})")

    # ---- the shared queue (ReceiveQueue) -----------------------------------------------------

    def _receiving(self) -> bool:
        return self._state is _OPEN

    def _handed_out(self, message: Message[T]) -> Message[T]:
        member = self._members.get(message._entry.topic)
        return message if member is None else member._handed_out(message)  # its ack timeout, interceptors

    def _collect(self, member: _Member[T]) -> None:
        """Move what `member` holds to the shared queue, as much as there is room for; the member
        counts it as taken (and asks the broker for more)."""
        source = member._queue
        if not source or self._state is not _OPEN:
            return
        queue = self._queue
        room = self._capacity - len(queue)
        if room <= 0:
            self._blocked[member] = None
            return
        count = len(source)
        if count <= room:
            queue.extend(source)
            source.clear()
        else:
            count = room
            for _ in range(room):
                queue.append(source.popleft())
            self._blocked[member] = None
        member._taken(count)
        if self._waiters or self._batch_waiters:
            self._delivered()

    def _unblock(self) -> None:
        """Members wait while the shared queue is more than half full (SEEDS §3)."""
        if self._blocked and len(self._queue) <= self._resume_at:
            blocked = list(self._blocked)
            self._blocked.clear()
            for member in blocked:
                self._collect(member)

    def _forget(self, member: _Member[T], since: Position | None = None) -> None:
        """Drop the member's messages from the shared queue (those at or after `since` only): the
        broker delivers them again."""
        queue = self._queue
        if queue:
            topic = member._topic
            if since is None:
                kept = [message for message in queue if message._entry.topic != topic]
            else:
                kept = [message for message in queue
                        if message._entry.topic != topic or (message._entry.ledger_id, message._entry.entry_id) < since]
            if len(kept) != len(queue):
                queue.clear()
                queue.extend(kept)
        self._unblock()

    # ---- acknowledging -----------------------------------------------------------------------

    def _member_of(self, message: Message[T] | MessageId, what: str) -> _Member[T]:
        """The member a message (or message id) came through."""
        if self._state is not _OPEN:
            raise ConsumerClosedError("consumer closed")
        if isinstance(message, Message):
            member = self._members.get(message._entry.topic)
            if member is None:
                raise InvalidArgumentError(
                    f"{what}: message {message.message_id} is from {message.topic}, which this consumer does not "
                    "read (any more)")
            return member
        if isinstance(message, MessageId):
            member = self._ledgers.get(message.ledger_id)
            if member is not None:
                return member
            members = list(self._members.values())
            if len(members) == 1:
                return members[0]
            by_partition = [m for m in members if m._partition == message.partition >= 0]
            if len(by_partition) == 1:
                return by_partition[0]
            raise InvalidArgumentError(
                f"{what}: message id {message} is not from a message this consumer received, so its topic is "
                f"unknown: pass the Message itself")
        raise InvalidArgumentError(f"{what} takes a Message or MessageId, got {type(message).__name__}")

    def acknowledge(self, message: Message[T] | MessageId) -> None:
        self._member_of(message, "acknowledge").acknowledge(message)

    def acknowledge_cumulative(self, message: Message[T] | MessageId) -> None:
        """Acknowledge this message and every one before it on its topic partition (Exclusive and
        Failover only)."""
        self.check_cumulative_allowed()
        self._member_of(message, "acknowledge_cumulative").acknowledge_cumulative(message)

    def negative_acknowledge(self, message: Message[T] | MessageId) -> None:
        self._member_of(message, "negative_acknowledge").negative_acknowledge(message)

    def redeliver_unacknowledged_messages(self) -> None:
        self._check_open()
        for member in list(self._members.values()):
            member.redeliver_unacknowledged_messages()

    async def reconsume_later(
        self, message: Message[T], delay: float | datetime.timedelta, properties: dict[str, str] | None = None,
    ) -> None:
        """Send the message to the retry letter topic (or, past the dead letter policy's
        max_redeliver_count rounds, to the dead letter topic) and acknowledge it here; it comes
        back after `delay` with RECONSUMETIMES counting its rounds (retry_letters.py)."""
        self._check_open()
        if self._retry is None:
            raise NotAllowedError(
                "reconsume_later needs retry_enable=True when subscribing (on a Shared or Key_Shared subscription)")
        if not isinstance(message, Message):
            raise InvalidArgumentError(f"reconsume_later takes a received Message, got {type(message).__name__}")
        delay_ms(delay)  # InvalidArgumentError for a bad delay, before anything else
        member = self._member_of(message, "reconsume_later")
        await self._retry.send(message, delay, properties)
        member.acknowledge(message)

    # ---- moving, pausing, leaving ------------------------------------------------------------

    async def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Move every member to the first message published at or after a time (unix
        milliseconds, or an aware datetime), or to MessageId.earliest / .latest. A particular
        MessageId is refused (NotAllowedError): it names a position in one partition only."""
        self._check_open()
        if isinstance(target, MessageId) and target not in _EDGES:
            raise NotAllowedError(
                f"seeking a consumer of several topics or partitions ({self.topic}) to message id {target} is not "
                "supported: a message id is a position in one partition; seek by publish time, to "
                "MessageId.earliest / .latest, or subscribe to that partition alone to seek it")
        seek_request(target)  # InvalidArgumentError for a bad target, before any member moves
        self._epoch += 1
        await _all(member.seek(target) for member in list(self._members.values()))

    def pause(self) -> None:
        self._paused = True
        for member in list(self._members.values()):
            member.pause()

    def resume(self) -> None:
        self._paused = False
        for member in list(self._members.values()):
            member.resume()

    async def unsubscribe(self) -> None:
        """Delete the subscription on every topic partition, then close. If one refuses (other
        consumers are connected to it), the others are still unsubscribed, this consumer closes
        and the refusal is raised."""
        self._check_open()
        try:
            await _all(member.unsubscribe() for member in list(self._members.values()))
        finally:
            await self._finish(graceful=True)

    async def get_last_message_id(self) -> list[MessageId]:
        """One per topic partition, in the order of `partitions`."""
        self._check_open()
        return list(await asyncio.gather(*(member.get_last_message_id() for member in self._members.values())))

    async def close(self) -> None:
        await self._finish(graceful=True)

    async def _shutdown(self) -> None:
        await self._finish(graceful=False)

    async def _finish(self, graceful: bool) -> None:
        if self._state is not _OPEN:
            return
        self._state = _CLOSING
        self._fail_waiters(ConsumerClosedError("consumer closed"))
        self._queue.clear()
        self._blocked.clear()
        if self._stats_timer is not None:
            self._stats_timer.cancel()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        members = list(self._members.values())
        await close_all(members, "consumer", graceful)
        if self._retry is not None:
            await self._retry.close(graceful)
        if self._listener is not None:
            await self._listener.stop()
        self._state = _CLOSED
        self._on_closed(self)

    def _check_open(self) -> None:
        if self._state is not _OPEN:
            raise ConsumerClosedError("consumer closed")

    # ---- members -----------------------------------------------------------------------------

    async def _start(self) -> None:
        async with self._membership:
            await self._add_topics(self._names)
        self._running()

    def _running(self) -> None:
        """Subscribed: start the listener, the partition updates and the stats log."""
        listener = self._config.message_listener
        if listener is not None:
            self._listener = ListenerTask(self, listener, self._next_for_listener,
                                          name=f"herald-listener-{self.subscription}")
        if self._config.auto_update_partitions:
            self._spawn(self._every(self._config.auto_update_partitions_interval, self._update_partitions,
                                    "update its partitions"))
        if self._client_config.stats_interval > 0:
            self._last_stats = (self.stats(), asyncio.get_running_loop().time())
            self._stats_timer = asyncio.get_running_loop().call_later(self._client_config.stats_interval,
                                                                      self._log_stats)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coroutine, name=f"herald-{self.subscription}"))

    async def _add_topics(self, topics: Sequence[str]) -> None:
        """Subscribe to topics (each partition of the partitioned ones), all or none: if one
        member fails to start, the others made here are closed and its error raised. The caller
        holds `_membership`."""
        known = self._known_partitions
        counts = await asyncio.gather(*(_known(known.pop(topic)) if topic in known else self._lookup.partitions(topic)
                                        for topic in topics))
        names = [name for topic, count in zip(topics, counts, strict=True) for name in partition_names(topic, count)]
        await self._add_members(names)
        for topic, count in zip(topics, counts, strict=True):
            self._partitioned[topic] = count

    async def _add_members(self, names: Sequence[str]) -> None:
        names = [name for name in dict.fromkeys(names) if name not in self._members]
        if not names:
            return
        config = dataclasses.replace(
            self._member_config,
            receiver_queue_size=member_queue_size(self._config, len(self._members) + len(names)))
        made, pacer = [], Pacer()
        for name in names:  # a topic may have a thousand partitions: the loop given back as they are made
            made.append(self._new_member(name, config))
            await pacer.pace()
        try:
            await start_all(made)
        except BaseException:
            await close_all(made, "consumer", graceful=False)
            raise
        if self._state is not _OPEN:  # closed meanwhile: close() did not know these
            await close_all(made, "consumer", graceful=False)

    def _new_member(self, topic: str, config: ConsumerConfig) -> _Member[T]:
        """A member, not started, registered at once so that what it delivers can be acked."""
        member: _Member[T] = self._member_type(self, topic, config, self._member_client_config, self._schema)
        if self._paused:
            member.pause()
        self._members[topic] = member
        return member

    def _member_closed(self, member: TopicConsumer[Any]) -> None:
        """A member closed (the consumer closing, or its topic gone): forget it."""
        assert isinstance(member, _Member)
        if self._members.get(member.topic) is member:
            del self._members[member.topic]
        for ledger in [ledger for ledger, owner in self._ledgers.items() if owner is member]:
            del self._ledgers[ledger]
        self._blocked.pop(member, None)
        if self._state is _OPEN:
            self._forget(member)

    async def _remove_topics(self, topics: Iterable[str]) -> None:
        """Close the members of these topics (their messages still queued go with them). The
        caller holds `_membership`."""
        removed: list[_Member[T]] = []
        for topic in topics:
            count = self._partitioned.pop(topic, 0)
            removed += [self._members[name] for name in partition_names(topic, count) if name in self._members]
        await close_all(removed, "consumer")

    async def _update_partitions(self) -> None:
        """Ask each partitioned topic how many partitions it has, and subscribe to the new ones."""
        for topic, count in list(self._partitioned.items()):
            if count <= 0:
                continue
            reported = await self._lookup.partitions(topic)
            if reported < count:
                log.warning("consumer %s on %s: the topic reports %d partitions, fewer than the %d subscribed; "
                            "partitions cannot be removed, so this is ignored", self._name, topic, reported, count)
                continue
            if reported == count or self._state is not _OPEN:
                continue
            async with self._membership:
                if self._partitioned.get(topic) != count:
                    continue  # removed (a pattern consumer) or grown meanwhile
                await self._add_members(partition_names(topic, reported)[count:])
                self._partitioned[topic] = reported
            log.info("consumer %s on %s: the topic grew from %d to %d partitions; receiving from all of them",
                     self._name, topic, count, reported)

    async def _every(self, interval: float, work: Callable[[], Coroutine[Any, Any, None]], what: str) -> None:
        """Run `work` every `interval` seconds until closed; a failure is logged and tried again."""
        while self._state is _OPEN:
            await asyncio.sleep(interval)
            try:
                await work()
            except HeraldError as exc:
                log.warning("consumer %s (subscription %s): could not %s: %s; trying again in %gs", self._name,
                            self.subscription, what, exc, interval)
            except Exception:
                # A bug here must not end the updates for good: say so, and try again next time.
                log.exception("consumer %s (subscription %s): could not %s; trying again in %gs", self._name,
                              self.subscription, what, interval)

    def _log_stats(self) -> None:
        loop = asyncio.get_running_loop()
        self._stats_timer = loop.call_later(self._client_config.stats_interval, self._log_stats)
        now, current = loop.time(), self.stats()
        previous, since = self._last_stats or (None, now)
        log.info("consumer %s on %s (subscription %s, %d partitions): %s", self._name, self.topic, self.subscription,
                 len(self._members), current.interval_report(previous, now - since))
        self._last_stats = (current, now)


async def _known(count: int) -> int:
    return count


async def _all(calls: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run the calls side by side, all to the end; then raise the first error, if any."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
