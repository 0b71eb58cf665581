"""PartitionedProducer: a producer on a partitioned topic (SEEDS §2, Pulsar's PartitionedProducerImpl).
It holds one producer per partition, all under one producer name, routes each message (routing.py)
and hands it to its partition's producer, which does the rest. It is ready once every partition's
producer is, and it grows with the topic: every auto_update_partitions_interval it asks how many
partitions there are and starts producers for the new ones."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar, cast

from herald.client.config import ProducerConfig
from herald.client.members import close_all, start_all
from herald.client.message import OutgoingMessage
from herald.client.producer import AsyncProducer, SendCallback, deliver_at_ms
from herald.client.routing import custom_partition, make_router
from herald.client.schema_decoders import SeparatedKeyValue, key_text
from herald.client.stats import ProducerStats
from herald.common.bounded import Pacer
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import HeraldError, ProducerClosedError

log = logging.getLogger(__name__)

T = TypeVar("T")

_OPEN, _CLOSING, _CLOSED = "open", "closing", "closed"

# Makes the (not yet started) producer of one partition from the partition's topic name, its
# config (the producer name filled in) and its max pending messages.
PartitionFactory = Callable[[str, ProducerConfig, int], AsyncProducer[T]]
# Asks how many partitions a topic has now (the lookup service's partitions()).
PartitionCounter = Callable[[str], Awaitable[int]]


def partition_max_pending(config: ProducerConfig, num_partitions: int) -> int:
    """Each partition's max pending messages: min(max_pending_messages, across partitions / n),
    and at least one, so that a producer over very many partitions can still send."""
    return max(1, min(config.max_pending_messages, config.max_pending_messages_across_partitions // num_partitions))


class PartitionedProducer(AsyncProducer[T]):
    """Publishes to every partition of a partitioned topic. Made by `AsyncClient.create_producer`.

    `partitions` is how many the topic has (their producers are made by `make_partition` and
    started by `_start`), or the producers of its partitions, made already (partition i at index
    i). It holds no connection of its own: `count_partitions` asks how many there are now."""

    def __init__(
        self, topic: str, partitions: int | Sequence[AsyncProducer[T]], config: ProducerConfig,
        make_partition: PartitionFactory[T], count_partitions: PartitionCounter,
        on_closed: Callable[[PartitionedProducer[T]], None], *, keyed: SeparatedKeyValue | None = None,
    ) -> None:
        self._topic = topic
        # A KeyValue SEPARATED schema: its key is the message key, which routing goes by too.
        self._keyed = keyed
        self._topic_name = TopicName.parse(topic)
        self._config = config
        self._count_partitions = count_partitions
        self._make_partition = make_partition
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._name = config.producer_name or ""  # the broker names the first partition's producer
        # The producers messages are routed over, partition i at index i. Replaced (never changed
        # in place) when partitions are added, once all the new ones are ready.
        self._producers: list[AsyncProducer[T]] = [] if isinstance(partitions, int) else list(partitions)
        self._initial_partitions = partitions if isinstance(partitions, int) else len(partitions)
        router = make_router(config, self._initial_partitions)
        self._choose = None if router is None else router.choose
        self._custom = config.message_router
        self._state = _OPEN
        self._updater: asyncio.Task[None] | None = None
        # A message the sync facade offered to a full partition (enqueue_nowait returned False):
        # (data, callback, partition). It is offered again next, and must go to the same partition.
        self._held: tuple[bytes, SendCallback, int] | None = None

    # ---- what the producer is ---------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def producer_name(self) -> str:
        return self._name

    @property
    def num_partitions(self) -> int:
        """How many partitions messages are routed over (it grows with the topic)."""
        return len(self._producers)

    @property
    def partitions(self) -> Sequence[AsyncProducer[T]]:
        """The producers of the partitions, partition i at index i."""
        return tuple(self._producers)

    @property
    def last_sequence_id(self) -> int:
        """The highest sequence id any partition's broker has acknowledged (-1 before any)."""
        return max((p.last_sequence_id for p in self._producers), default=-1)

    @property
    def is_connected(self) -> bool:
        """True when every partition's producer is connected."""
        producers = self._producers
        return bool(producers) and all(p.is_connected for p in producers)

    @property
    def closed(self) -> bool:
        """True once close() began, or when every partition was terminated."""
        producers = self._producers
        return self._state is not _OPEN or (bool(producers) and all(p.closed for p in producers))

    def stats(self) -> ProducerStats:
        """The partitions' figures added up; see sum_stats for the latencies."""
        return sum_stats([p.stats() for p in self._producers])

    def __repr__(self) -> str:
        return (f"PartitionedProducer(topic={self._topic!r}, name={self._name!r}, "
                f"partitions={len(self._producers)}, state={self._state})")

    # ---- sending ----------------------------------------------------------------------------

    # send and send_async route, then return the partition producer's coroutine for the caller to
    # await: the same as `async def` to an awaiting caller, without a coroutine of their own per message.

    def send(
        self, value: T, *, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | datetime.datetime | None = None, deliver_after: float | datetime.timedelta | None = None,
    ) -> Coroutine[Any, Any, MessageId]:
        if self._keyed is not None:
            key = key_text(self._keyed.split(value)[0])
        producer = self._route(value, key, ordering_key, properties, event_time, sequence_id, deliver_at,
                               deliver_after)
        return producer.send(
            value, key=key, ordering_key=ordering_key, properties=properties, event_time=event_time,
            sequence_id=sequence_id, deliver_at=deliver_at, deliver_after=deliver_after)

    def send_async(
        self, value: T, *, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | datetime.datetime | None = None, deliver_after: float | datetime.timedelta | None = None,
    ) -> Coroutine[Any, Any, asyncio.Future[MessageId]]:
        if self._keyed is not None:
            key = key_text(self._keyed.split(value)[0])
        choose = self._choose
        if choose is not None and self._state is _OPEN:  # _route, inlined: this is the hot path
            producers = self._producers
            producer = producers[choose(key, len(producers))]
        else:
            producer = self._route(value, key, ordering_key, properties, event_time, sequence_id, deliver_at,
                                   deliver_after)
        if (ordering_key is None and properties is None and event_time is None and sequence_id is None
                and deliver_at is None and deliver_after is None):
            return producer.send_async(value, key=key)  # the usual message: each keyword passed costs
        return producer.send_async(
            value, key=key, ordering_key=ordering_key, properties=properties, event_time=event_time,
            sequence_id=sequence_id, deliver_at=deliver_at, deliver_after=deliver_after)

    def _route(
        self, value: T, key: str | None, ordering_key: bytes | None, properties: dict[str, str] | None,
        event_time: int | None, sequence_id: int | None, deliver_at: int | datetime.datetime | None,
        deliver_after: float | datetime.timedelta | None,
    ) -> AsyncProducer[T]:
        if self._state is not _OPEN:
            raise ProducerClosedError("producer closed")
        producers = self._producers
        choose = self._choose
        if choose is not None:
            return producers[choose(key, len(producers))]
        # A custom router reads the message as it will be sent: encoded, with its deliver-at time.
        message = OutgoingMessage(self.encode(value), key, ordering_key, properties, event_time, sequence_id,
                                  deliver_at_ms(deliver_at, deliver_after))
        return producers[custom_partition(cast(Any, self._custom), message, len(producers), self._topic)]

    def encode_keyed(self, value: T, key: str | None) -> tuple[bytes, str | None]:
        if self._keyed is not None:
            key = key_text(self._keyed.split(value)[0])
        return self.encode(value), key

    def encode(self, value: T) -> bytes:
        if self._state is not _OPEN:
            raise ProducerClosedError("producer closed")
        producers = self._producers
        for producer in producers:
            if not producer.closed:  # a terminated partition refuses; the others may take the message
                return producer.encode(value)
        return producers[0].encode(value)  # raises why they are all closed

    def enqueue_nowait(
        self, data: bytes, callback: SendCallback, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | None = None,
    ) -> bool:
        if self._state is not _OPEN:
            self._held = None
            _report(callback, ProducerClosedError("producer closed"))
            return True
        producers = self._producers
        held = self._held
        if held is not None and held[0] is data and held[1] is callback:
            self._held = None
            index = held[2]
        else:
            try:
                choose = self._choose
                if choose is not None:
                    index = choose(key, len(producers))
                else:
                    message = OutgoingMessage(data, key, ordering_key, properties, event_time, sequence_id,
                                              deliver_at)
                    index = custom_partition(cast(Any, self._custom), message, len(producers), self._topic)
            except Exception as exc:  # the router's own error fails this message, as it is
                _report(callback, cast(HeraldError, exc))
                return True
        if producers[index].enqueue_nowait(data, callback, key, ordering_key, properties, event_time, sequence_id,
                                           deliver_at):
            return True
        self._held = (data, callback, index)
        return False

    async def wait_for_room(self) -> None:
        """Wait until the partition that refused the last message for want of room has some."""
        held = self._held
        if self._state is not _OPEN:
            raise ProducerClosedError("producer closed")
        if held is not None:
            await self._producers[held[2]].wait_for_room()

    async def flush(self) -> None:
        """Send every partition's open batch and wait until all messages queued so far are stored."""
        if self._state is not _OPEN:
            raise ProducerClosedError("producer closed")
        results = await asyncio.gather(*(p.flush() for p in self._producers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def flush_nowait(self) -> None:
        """Close every partition's open batch and queue it for sending now, without waiting."""
        if self._state is _OPEN:
            for producer in self._producers:
                producer.flush_nowait()

    # ---- life cycle -------------------------------------------------------------------------

    async def _start(self) -> None:
        """Start every partition's producer; ready when all are. The broker names the first (unless
        the config names it) and the others take that name. If one fails, the ones started are
        closed and its error raised."""
        count = self._initial_partitions
        made, self._producers = self._producers, []  # routed over only once all are started
        try:
            if made:  # given made already
                await start_all(made)
            else:
                if not self._name:
                    first = self._new_partition(0, count)
                    made.append(first)
                    await first._start()
                    self._name = first.producer_name
                rest = await self._new_partitions(range(len(made), count), count)
                made.extend(rest)
                await start_all(rest)
        except BaseException:
            log.warning("producer on %s: could not start the producers of its %d partitions; closing the ones "
                        "started", self._topic, count)
            await close_all(made, "producer")
            raise
        self._producers = made
        if not self._name and made:
            self._name = made[0].producer_name
        log.info("producer %s on %s: sending to %d partitions", self._name, self._topic, count)
        self._running()

    def _running(self) -> None:
        if self._config.auto_update_partitions:
            self._updater = self._loop.create_task(self._auto_update(), name=f"herald-partitions-{self._name}")

    async def _new_partitions(self, indexes: range, num_partitions: int) -> list[AsyncProducer[T]]:
        """Producers for these partitions, not started; the loop given back as they are made (a
        topic may have a thousand partitions)."""
        made, pacer = [], Pacer()
        for index in indexes:
            made.append(self._new_partition(index, num_partitions))
            await pacer.pace()
        return made

    def _new_partition(self, index: int, num_partitions: int) -> AsyncProducer[T]:
        config = self._config if self._config.producer_name == (self._name or None) else dataclasses.replace(
            self._config, producer_name=self._name)
        return self._make_partition(str(self._topic_name.partition(index)), config,
                                    partition_max_pending(self._config, num_partitions))

    async def _auto_update(self) -> None:
        interval = self._config.auto_update_partitions_interval
        while self._state is _OPEN:
            await asyncio.sleep(interval)
            try:
                await self._update_partitions()
            except HeraldError as exc:
                log.warning("producer %s on %s: could not update its partitions: %s; trying again in %gs",
                            self._name, self._topic, exc, interval)
            except Exception:
                # A bug here must not end the updates for good: say so, and try again next time.
                log.exception("producer %s on %s: updating its partitions failed; trying again in %gs",
                              self._name, self._topic, interval)

    async def _update_partitions(self) -> None:
        """Ask how many partitions the topic has, and grow to them."""
        await self._grow_to(await self._count_partitions(self._topic))

    async def _grow_to(self, reported: int) -> None:
        """Start producers for the partitions past the ones there are, then route to them too."""
        current = len(self._producers)
        if reported <= current:
            if reported < current:
                log.warning("producer %s on %s: the topic reports %d partitions, fewer than the %d this producer "
                            "sends to; partitions cannot be removed, so this is ignored", self._name, self._topic,
                            reported, current)
            return
        new = await self._new_partitions(range(current, reported), reported)
        try:
            await start_all(new)
        except BaseException:
            await close_all(new, "producer")
            raise
        if self._state is not _OPEN:  # closed meanwhile: close() did not know these
            await close_all(new, "producer")
            return
        self._producers = [*self._producers, *new]
        log.info("producer %s on %s: the topic grew from %d to %d partitions; sending to all of them", self._name,
                 self._topic, current, reported)

    async def _stop_updater(self) -> None:
        updater, self._updater = self._updater, None
        if updater is not None:
            updater.cancel()
            await asyncio.gather(updater, return_exceptions=True)

    async def close(self) -> None:
        """Close every partition's producer. Messages not yet stored fail with ProducerClosedError
        (call flush() first to wait for them). Closing twice does nothing."""
        if self._state is not _OPEN:
            return
        self._state = _CLOSING
        await self._stop_updater()
        await close_all(self._producers, "producer")
        self._state = _CLOSED
        self._on_closed(self)

    async def _shutdown(self) -> None:
        if self._state is _CLOSED:
            return
        self._state = _CLOSING
        await self._stop_updater()
        await asyncio.gather(*(p._shutdown() for p in self._producers), return_exceptions=True)
        self._state = _CLOSED
        self._on_closed(self)


def sum_stats(parts: Sequence[ProducerStats]) -> ProducerStats:
    """Several producers' stats as one: counters added up. Latency percentiles cannot be added, and
    the partitions keep no common histogram: each percentile is the highest partition's, an upper
    bound of the whole producer's (a latency above every partition's p99 is above 99% of all)."""
    return ProducerStats(
        messages_sent=sum(s.messages_sent for s in parts), bytes_sent=sum(s.bytes_sent for s in parts),
        send_failures=sum(s.send_failures for s in parts), receipts=sum(s.receipts for s in parts),
        pending_messages=sum(s.pending_messages for s in parts),
        send_latency_p50_ms=max((s.send_latency_p50_ms for s in parts), default=0.0),
        send_latency_p95_ms=max((s.send_latency_p95_ms for s in parts), default=0.0),
        send_latency_p99_ms=max((s.send_latency_p99_ms for s in parts), default=0.0),
        send_latency_p999_ms=max((s.send_latency_p999_ms for s in parts), default=0.0),
        send_latency_max_ms=max((s.send_latency_max_ms for s in parts), default=0.0),
        send_latency_sum_ms=sum(s.send_latency_sum_ms for s in parts),
    )


def _report(callback: SendCallback, error: HeraldError) -> None:
    try:
        callback(error, None)
    except Exception:
        # A user's callback must not break the producer; say so and carry on.
        log.exception("send callback %r raised", callback)
