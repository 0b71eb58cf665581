"""AsyncClient: the entry point of the asyncio API. It owns the connection pool, the lookups and
every producer, consumer and reader it made, and closes them with itself (Open -> Closing ->
Closed). It chooses the implementation a topic needs: a TopicProducer or a PartitionedProducer, a
TopicConsumer, a MultiTopicConsumer (several topics, a partitioned one, or a topic and its retry
letter topic) or a PatternConsumer; an AsyncReader reads one topic."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

from herald.client.config import (
    ClientConfig,
    ConsumerConfig,
    ConsumerType,
    InitialPosition,
    ProducerConfig,
    ReaderConfig,
)
from herald.client.connection import ConnectionPool
from herald.client.consumer import AsyncConsumer
from herald.client.lookup import LookupService
from herald.client.multi_topic_consumer import MultiTopicConsumer
from herald.client.partitioned_producer import PartitionedProducer
from herald.client.pattern_consumer import PatternConsumer, parse_pattern
from herald.client.producer import AsyncProducer
from herald.client.reader import AsyncReader
from herald.client.reader_pull import PullResult, last_message_id, pull
from herald.client.retry_letters import RetryLetters, retry_policy
from herald.client.schema import BYTES, Schema
from herald.client.schema_decoders import separated
from herald.client.table_view import AsyncTableView
from herald.client.topic_consumer import TopicConsumer
from herald.client.topic_producer import TopicProducer
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName, validate_subscription_name
from herald.common.errors import AlreadyClosedError, HeraldError, InvalidArgumentError, NotAllowedError

log = logging.getLogger(__name__)

_OPEN, _CLOSING, _CLOSED = "open", "closing", "closed"
C = TypeVar("C")
T = TypeVar("T")
Made = TypeVar("Made", AsyncProducer[Any], AsyncConsumer[Any])

# What subscribe() takes as its topic: one name, a list of names, or a compiled regex (a pattern
# consumer: every topic of the pattern's namespace whose full name matches, found as they come).
Topics = str | Sequence[str] | re.Pattern[str]


class AsyncClient:
    """A client of one Herald cluster, named by its service URL (`herald://host:port`).

    Options (ClientConfig): operation_timeout (30 s), connection_timeout (10 s), keep_alive
    (30 s), connections_per_broker (1), stats_interval (60 s), tls_trust_certs_file_path,
    tls_allow_insecure_connection, tls_validate_hostname. Make it inside a running event loop; use
    it from that loop only.
    """

    def __init__(self, service_url: str, **options: Any) -> None:
        self._config = _build(ClientConfig, "client", service_url=service_url, **options)
        self._pool = ConnectionPool(self._config)
        self._lookup = LookupService(self._pool, self._config)
        self._producers: set[AsyncProducer[Any]] = set()
        self._consumers: set[AsyncConsumer[Any]] = set()
        self._readers: set[AsyncReader[Any]] = set()
        self._state = _OPEN

    @property
    def config(self) -> ClientConfig:
        return self._config

    # ---- producers ----

    @overload
    async def create_producer(self, topic: str, *, schema: None = None, **options: Any) -> AsyncProducer[bytes]: ...

    @overload
    async def create_producer(self, topic: str, *, schema: Schema[T], **options: Any) -> AsyncProducer[T]: ...

    async def create_producer(
        self, topic: str, *, schema: Schema[Any] | None = None, **options: Any,
    ) -> AsyncProducer[Any]:
        """A producer on `topic` (all its partitions when it is partitioned), registered with its
        broker(s). `schema` encodes the values sent (bytes by default); options: ProducerConfig."""
        self._check_open()
        name = str(TopicName.parse(topic))
        config = _build(ProducerConfig, "producer", **options)
        schema = _check_schema(schema)
        partitions = await self._lookup.partitions(name)
        producer: AsyncProducer[Any]
        if partitions > 0:
            producer = PartitionedProducer(
                name, partitions, config,
                lambda partition, partition_config, max_pending: self._topic_producer(
                    partition, partition_config, schema, _kept, max_pending),
                self._lookup.partitions, self._producers.discard, keyed=separated(schema))
        else:
            producer = self._topic_producer(name, config, schema, self._producers.discard)
        return await self._started(producer, self._producers)

    def _topic_producer(
        self, topic: str, config: ProducerConfig, schema: Schema[Any], on_closed: Callable[[Any], None],
        max_pending_messages: int | None = None,
    ) -> AsyncProducer[Any]:
        """The producer of one topic, or of one partition (the partitioned producer owns those)."""
        return TopicProducer(topic, config, self._config, self._pool, self._lookup, on_closed, schema=schema,
                             max_pending_messages=max_pending_messages)

    # ---- consumers ----

    @overload
    async def subscribe(
        self, topic: Topics, subscription_name: str, consumer_type: ConsumerType = ...,
        initial_position: InitialPosition = ..., *, schema: None = None, **options: Any,
    ) -> AsyncConsumer[bytes]: ...

    @overload
    async def subscribe(
        self, topic: Topics, subscription_name: str, consumer_type: ConsumerType = ...,
        initial_position: InitialPosition = ..., *, schema: Schema[T], **options: Any,
    ) -> AsyncConsumer[T]: ...

    async def subscribe(
        self, topic: Topics, subscription_name: str, consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.Latest, *, schema: Schema[Any] | None = None,
        **options: Any,
    ) -> AsyncConsumer[Any]:
        """A consumer through the subscription `subscription_name` (made if new) of `topic`: a
        name, a list of names, or a compiled regex whose matches in its namespace are followed as
        they come and go. `schema` decodes the values (bytes by default); options: ConsumerConfig.

        One topic without partitions gets a TopicConsumer; a partitioned topic (n >= 1), several
        topics, or retry_enable (the retry letter topic is read too) a MultiTopicConsumer; a
        pattern a PatternConsumer.

        Refused, in Pulsar's order, when: the client is closed; the subscription name is empty;
        read_compacted is asked of a non-persistent topic or a Shared / Key_Shared subscription;
        a consumer_event_listener is given to anything but a Failover subscription; names and a
        pattern are mixed. Then when: a pattern does not start with its namespace; retry_enable is
        asked of a pattern, or of a subscription that is not Shared or Key_Shared.
        """
        self._check_open()
        if not subscription_name:
            raise InvalidArgumentError("subscription name is empty: give the subscription a name")
        validate_subscription_name(subscription_name)
        config = _build(ConsumerConfig, "consumer", subscription_name=subscription_name,
                        consumer_type=consumer_type, initial_position=initial_position, **options)
        _check_consumer_config(config, topic)
        names, pattern = _topics(topic)
        schema = _check_schema(schema)
        consumer: AsyncConsumer[Any]
        if pattern is not None:
            parse_pattern(pattern)  # InvalidArgumentError before any network call
            if config.retry_enable:
                raise InvalidArgumentError(
                    "retry_enable cannot be used with a topics pattern: the retry letter topic is named after one "
                    "topic; subscribe to a topic (or a list of topics) to reconsume messages later")
            consumer = PatternConsumer(pattern, config, self._config, self._pool, self._lookup,
                                       self._consumers.discard, schema)
            return await self._started(consumer, self._consumers)
        retry = None
        if config.retry_enable:
            config, retry = self._retry_letters(config, names[0])
            names = list(dict.fromkeys([*names, retry.retry_letter_topic]))
        partitions = await self._lookup.partitions(names[0]) if len(names) == 1 and retry is None else None
        if partitions == 0:
            consumer = TopicConsumer(names[0], config, self._config, self._pool, self._lookup,
                                     self._consumers.discard, schema)
        else:
            consumer = MultiTopicConsumer(
                names, config, self._config, self._pool, self._lookup, self._consumers.discard, schema, retry,
                partitions=None if partitions is None else {names[0]: partitions})
        return await self._started(consumer, self._consumers)

    def _retry_letters(self, config: ConsumerConfig, topic: str) -> tuple[ConsumerConfig, RetryLetters]:
        """retry_enable: the dead letter policy with its topics named (after the first topic, as
        Pulsar does) and the sender of the letters."""
        if config.consumer_type not in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise InvalidArgumentError(
                f"retry_enable needs a Shared or Key_Shared subscription, not {config.consumer_type.name}: "
                "reconsume_later's messages wait out their delay by delayed delivery, which only those honour")
        policy = retry_policy(topic, config.subscription_name, config.dead_letter_policy)
        letters = RetryLetters(policy, lambda letter_topic: self.create_producer(letter_topic, batching_enabled=False))
        return dataclasses.replace(config, dead_letter_policy=policy), letters

    # ---- readers ----

    @overload
    async def create_reader(
        self, topic: str, start_message_id: MessageId, *, start_message_id_inclusive: bool = ...,
        schema: None = None, **options: Any,
    ) -> AsyncReader[bytes]: ...

    @overload
    async def create_reader(
        self, topic: str, start_message_id: MessageId, *, start_message_id_inclusive: bool = ...,
        schema: Schema[T], **options: Any,
    ) -> AsyncReader[T]: ...

    async def create_reader(
        self, topic: str, start_message_id: MessageId, *, start_message_id_inclusive: bool = False,
        schema: Schema[Any] | None = None, **options: Any,
    ) -> AsyncReader[Any]:
        """A reader of `topic` from `start_message_id` on (MessageId.earliest, MessageId.latest or
        a message's id; that message too with start_message_id_inclusive). `schema` decodes the
        values (bytes by default); options: ReaderConfig (reader_name, receiver_queue_size,
        reader_listener(reader, message), read_compacted). A partitioned topic is refused: read
        its partitions (get_partitions_for_topic) with a reader each."""
        self._check_open()
        config = _build(ReaderConfig, "reader", start_message_id=start_message_id,
                        start_message_id_inclusive=start_message_id_inclusive, **options)
        name = str(TopicName.parse(topic))
        schema = _check_schema(schema)
        reader: AsyncReader[Any] = AsyncReader(name, config, self._config, self._pool, self._lookup,
                                               self._readers.discard, schema)
        partitions = await self._lookup.partitions(name)
        if partitions > 0:
            raise NotAllowedError(
                f"topic {name} has {partitions} partitions: a reader reads one topic; create a reader for each "
                "partition (get_partitions_for_topic names them)")
        self._readers.add(reader)
        try:
            await reader._start()
        except BaseException:
            await reader._shutdown()
            raise
        return reader

    # ---- table views ----

    @overload
    async def create_table_view(self, topic: str, *, schema: None = None) -> AsyncTableView[bytes]: ...

    @overload
    async def create_table_view(self, topic: str, *, schema: Schema[T]) -> AsyncTableView[T]: ...

    async def create_table_view(self, topic: str, *, schema: Schema[Any] | None = None) -> AsyncTableView[Any]:
        """A live dict of key -> latest value of `topic` (every partition), read from the earliest
        position with read_compacted and kept up to date (herald.client.table_view); returns once
        it holds everything the topic had when called. `schema` decodes the values (bytes by
        default); a message with an empty value removes its key."""
        self._check_open()
        name = str(TopicName.parse(topic))
        if not TopicName.parse(name).persistent:
            raise InvalidArgumentError(
                f"a table view reads a topic's compacted view: {name} is non-persistent and stores nothing; "
                "use a persistent topic")
        view: AsyncTableView[Any] = AsyncTableView(self, name, _check_schema(schema))
        try:
            await view._start()
        except BaseException:
            await view.close()
            raise
        return view

    async def get_partitions_for_topic(self, topic: str) -> list[str]:
        """The topic's partitions' names, or the topic itself when it is not partitioned."""
        self._check_open()
        name = TopicName.parse(topic)
        count = await self._lookup.partitions(str(name))
        if count <= 0:
            return [str(name)]
        return [str(name.partition(index)) for index in range(count)]

    async def get_last_message_id(self, topic: str) -> MessageId:
        """The id of the last message stored on `topic` (a partition by its own name; a partitioned
        topic's base name is refused by the broker); MessageId(-1, -1, ...) when it has none."""
        self._check_open()
        return await last_message_id(self._pool, self._lookup, self._config, str(TopicName.parse(topic)))

    async def pull(
        self, topic: str, start: MessageId | None = None, *, max_entries: int = 0, max_bytes: int = 0,
        timeout: float = 0.0,  # noqa: ASYNC109 - the broker's long polling, not a local wait
        read_compacted: bool = False,
    ) -> PullResult:
        """Read `topic` (a partition by its own name) by offset, without a subscription: the stored
        entries from the first at or after `start` (None: the earliest kept) and where to go on
        (see herald.client.reader_pull.pull). Each entry is one producer batch, undecoded.
        read_compacted: the compacted view up to the compaction horizon, then the log."""
        self._check_open()
        return await pull(self._pool, self._lookup, self._config, str(TopicName.parse(topic)), start,
                          max_entries, max_bytes, timeout, read_compacted)

    # ---- closing ----

    async def close(self) -> None:
        """Close every producer and consumer (sending what they owe the brokers), then the
        connections. A second close raises AlreadyClosedError."""
        if self._state is not _OPEN:
            raise AlreadyClosedError("client already closed")
        self._state = _CLOSING
        _warn_undelivered(list(self._producers))
        members: list[Any] = [*self._producers, *self._consumers, *self._readers]
        closing = {asyncio.ensure_future(member.close()): member for member in members}
        # Each member's close is bounded (its stream gets operation_timeout to end); this bound
        # holds whatever the member: past it, what is left is closed at once, as by shutdown().
        done, stuck = await asyncio.wait(closing, timeout=2 * self._config.operation_timeout) if closing else (
            set(), set())
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.warning("closing the client: %s", task.exception())
        if stuck:
            log.warning("closing the client: %s did not close within %gs (twice operation_timeout): closed at once",
                        ", ".join(repr(closing[task]) for task in stuck), 2 * self._config.operation_timeout)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, *(closing[task]._shutdown() for task in stuck), return_exceptions=True)
        await self._pool.close(grace=None)
        self._state = _CLOSED

    async def shutdown(self) -> None:
        """Stop at once: fail what is pending, cancel the streams, close the connections."""
        if self._state is _CLOSED:
            return
        self._state = _CLOSING
        await asyncio.gather(*(p._shutdown() for p in list(self._producers)),
                             *(c._shutdown() for c in list(self._consumers)),
                             *(r._shutdown() for r in list(self._readers)), return_exceptions=True)
        await self._pool.close(grace=None)
        self._state = _CLOSED

    @property
    def closed(self) -> bool:
        return self._state is not _OPEN

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._state is _OPEN:
            await self.close()

    # ---- helpers ----

    def _check_open(self) -> None:
        if self._state is not _OPEN:
            raise AlreadyClosedError("client already closed")

    async def _started(self, made: Made, registry: set[Made]) -> Made:
        """Start a producer or consumer made here, keeping it for close(); on failure nothing
        is left behind."""
        registry.add(made)
        try:
            await made._start()
        except BaseException:
            await made._shutdown()
            raise
        return made


def _kept(producer: object) -> None:
    """A partition's producer closed: its partitioned producer closed it, and keeps no registry."""


def _warn_undelivered(producers: Sequence[AsyncProducer[Any]]) -> None:
    """Say which producers still hold messages the brokers have not stored: closing fails them
    (ProducerClosedError to their futures and callbacks); flush() before close() waits for them."""
    for producer in producers:
        try:
            pending = int(producer.stats().pending_messages)
        except HeraldError:
            continue
        if pending:
            log.warning("closing the client: producer %r on %s had %d messages not yet stored; they fail with "
                        "ProducerClosedError (flush() before close() waits for them)", producer.producer_name,
                        producer.topic, pending)


def _build(cls: type[C], what: str, **options: Any) -> C:
    try:
        return cls(**options)
    except TypeError as exc:
        raise InvalidArgumentError(f"invalid {what} option: {exc}") from None


def _check_schema(schema: object) -> Schema[Any]:
    """The schema to use (bytes when none was given)."""
    if schema is None:
        return BYTES
    if not isinstance(schema, Schema):
        raise InvalidArgumentError(f"schema must be a herald.client.Schema (BytesSchema, StringSchema, "
                                   f"JsonSchema or your own), got {schema!r}")
    return schema


def _topics(topic: Topics) -> tuple[list[str], re.Pattern[str] | None]:
    """The full topic names asked for, or the pattern; InvalidArgumentError for names mixed with a
    pattern (Pulsar: topic names and a topics pattern are exclusive) or an empty list."""
    if isinstance(topic, re.Pattern):
        return [], topic
    if isinstance(topic, str):
        return [str(TopicName.parse(topic))], None
    if not isinstance(topic, Sequence) or not topic:
        raise InvalidArgumentError(f"topic must be a topic name, a non-empty list of names or a compiled "
                                   f"pattern, got {topic!r}")
    if any(isinstance(item, re.Pattern) for item in topic):
        raise InvalidArgumentError("topic names and a topics pattern cannot be combined: subscribe with a "
                                   "list of names or with one pattern")
    names = [str(TopicName.parse(item)) for item in topic]
    return list(dict.fromkeys(names)), None  # duplicates once, order kept


def _check_consumer_config(config: ConsumerConfig, topic: Topics) -> None:
    """The option checks Pulsar makes before looking at the topics themselves, in its order."""
    if config.read_compacted and (
            config.consumer_type not in (ConsumerType.Exclusive, ConsumerType.Failover) or not _persistent(topic)):
        raise InvalidArgumentError(
            "read_compacted can only be used with Exclusive or Failover subscriptions of persistent topics")
    if config.consumer_event_listener is not None and config.consumer_type is not ConsumerType.Failover:
        raise InvalidArgumentError("a consumer_event_listener is only supported on Failover subscriptions")


def _persistent(topic: object) -> bool:
    """Whether every topic named (or matched) is persistent."""
    if isinstance(topic, re.Pattern):
        return not topic.pattern.startswith("non-persistent://")
    if isinstance(topic, str):
        return TopicName.parse(topic).persistent
    if isinstance(topic, Sequence):
        return all(_persistent(item) for item in topic)
    return True  # not a topic at all: _topics says so
