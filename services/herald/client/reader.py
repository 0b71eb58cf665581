"""AsyncReader: reads one topic from a chosen message on (Pulsar's ReaderImpl), through a
non-durable subscription of its own on one TopicConsumer (whose Subscribe it adjusts): the broker
keeps the reader's position in memory while it is connected, it never acknowledges and it holds no
data back (SEEDS §3).

Where it starts: MessageId.earliest, MessageId.latest or a message's id, that message included or
not. The broker starts at an entry; a start inside a batch is finished here, by skipping the
batch's messages before it. On a reconnect the reader subscribes again from the message after the
last one it returned. has_message_available compares the topic's last message with the last one
returned or, before any, with the subscription's position (GetLastMessageId answers both)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar

from herald.api.v1 import broker_pb2, common_pb2
from herald.client.config import ClientConfig, ConsumerConfig, ConsumerType, InitialPosition, ReaderConfig
from herald.client.connection import ConnectionPool
from herald.client.iteration import next_until_closed
from herald.client.lookup import LookupService
from herald.client.message import Message
from herald.client.message_listener import ListenerTask
from herald.client.schema import Schema
from herald.client.topic_consumer import TopicConsumer
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import ConsumerClosedError, InvalidArgumentError, NotAllowedError, NotFoundError

log = logging.getLogger(__name__)

T = TypeVar("T")
_EARLIEST, _LATEST = MessageId.earliest, MessageId.latest
_MessageKey = tuple[int, int, int]  # (ledger id, entry id, batch index): a message's place, for comparing


class AsyncReader(Generic[T]):
    """Reads one topic (or one partition) from a start message on. Made by
    `AsyncClient.create_reader`; options: ReaderConfig."""

    def __init__(
        self, topic: str, config: ReaderConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[AsyncReader[Any]], None], schema: Schema[T] | None = None,
    ) -> None:
        self._config = config
        self._on_closed = on_closed
        partition = TopicName.parse(topic).partition_index
        start = config.start_message_id
        if start not in (_EARLIEST, _LATEST) and start.partition >= 0 and start.partition != partition:
            raise InvalidArgumentError(
                f"start_message_id {start} is a message of partition {start.partition}, but the reader reads "
                f"{topic}: give an id of a message of that topic, MessageId.earliest or MessageId.latest")
        consumer_config = ConsumerConfig(
            f"reader-{uuid.uuid4().hex[:10]}", consumer_type=ConsumerType.Exclusive,
            initial_position=InitialPosition.Latest, consumer_name=config.reader_name,
            receiver_queue_size=config.receiver_queue_size, read_compacted=config.read_compacted,
            max_message_size=config.max_message_size, max_chunked_message_size=config.max_chunked_message_size)
        self._consumer: TopicConsumer[T] = TopicConsumer(topic, consumer_config, client_config, pool, lookup,
                                                         self._consumer_closed, schema,
                                                         adjust_subscribe=self._subscribe_from)
        # Where reading starts (until a message is returned): a MessageId (the edges included) and
        # whether that message is read too; None after a seek by time (the broker knows where).
        self._start_id: MessageId | None = start
        self._inclusive = config.start_message_id_inclusive
        self._skip: _MessageKey | None = None  # a start inside a batch: skip that entry's messages before it
        self._not_before: int | None = None  # re-subscribed after a seek by time: skip what was published before
        self._last: Message[T] | None = None  # the last message returned
        self._listener: ListenerTask | None = None
        self._closed = False

    # ---- what it is ----

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def subscription(self) -> str:
        """The reader's non-durable subscription's name (`reader-` and ten hex digits)."""
        return self._consumer.subscription

    @property
    def reader_name(self) -> str:
        return self._consumer.consumer_name

    @property
    def is_connected(self) -> bool:
        return self._consumer.is_connected

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"AsyncReader(topic={self.topic!r}, subscription={self.subscription!r}, closed={self._closed})"

    # ---- reading ----

    async def read_next(self, timeout: float | None = None) -> Message[T] | None:  # noqa: ASYNC109
        """The next message; None if none arrives within `timeout` seconds (None: wait). Refused
        with NotAllowedError when the reader has a reader_listener."""
        self._check_open()
        if self._config.reader_listener is not None:
            raise NotAllowedError("read_next() is not allowed on a reader with a reader_listener: the listener gets "
                                  "every message; create the reader without one to read_next()")
        return await self._read(timeout)

    async def _read(self, timeout: float | None) -> Message[T] | None:  # noqa: ASYNC109
        consumer = self._consumer
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            message = await consumer.receive(None if deadline is None else max(0.0, deadline - loop.time()))
            if message is None:
                return None
            if (self._skip is not None or self._not_before is not None) and self._skipped(message):
                continue
            self._last = message
            return message

    def _skipped(self, message: Message[T]) -> bool:
        """Whether a message comes before where the reader starts (the start's batch, or before
        the time sought); once one does not, nothing after it does."""
        entry = message._entry
        skip = self._skip
        if skip is not None:
            if (entry.ledger_id, entry.entry_id) == skip[:2]:
                if 0 <= message.batch_index < skip[2]:
                    return True
            else:
                self._skip = None
        if self._not_before is not None:
            if entry.publish_time < self._not_before:
                return True
            self._not_before = None
        return False

    async def _next_for_listener(self) -> Message[T]:
        message = await self._read(None)
        assert message is not None  # no timeout: a message, or ConsumerClosedError
        return message

    async def has_message_available(self) -> bool:
        """Whether there are messages after the last one read (before any: from where the reader
        starts); False at the end of the topic."""
        self._check_open()
        consumer = self._consumer
        if self._skip is None and self._not_before is None and consumer._queue:
            return True
        last_read = self._last
        if last_read is not None:
            last = (await consumer._last_message_id_reply()).last
            entry = last_read._entry
            return last.entry_id >= 0 and _key(last) > (entry.ledger_id, entry.entry_id, last_read.batch_index)
        if self._skip is not None:  # a start inside a batch: that message, or the next
            last = (await consumer._last_message_id_reply()).last
            return last.entry_id >= 0 and _key(last) >= self._skip
        try:
            reply = await consumer._last_message_id_reply(consumer.subscription)
        except NotFoundError:
            # The subscription is gone for now (the reader is reconnecting): reason from the start.
            last = (await consumer._last_message_id_reply()).last
            return last.entry_id >= 0 and self._after_start(last)
        last, position = reply.last, reply.mark_delete
        # The subscription's mark-delete position is just before its first entry to read (a
        # reader acknowledges nothing, so it stays there).
        return last.entry_id >= 0 and (last.ledger_id, last.entry_id) > (position.ledger_id, position.entry_id)

    def _after_start(self, last: common_pb2.MessageIdData) -> bool:
        start = self._start_id
        if start is None or start == _EARLIEST:
            return True
        if start == _LATEST:
            return False
        place = (last.ledger_id, last.entry_id)
        return place >= start[:2] if self._inclusive else place > start[:2]

    # ---- moving ----

    async def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Move the reader: to a message id (that message is read next; MessageId.earliest /
        .latest are the ends), or to the first message published at or after a time (unix
        milliseconds, or an aware datetime)."""
        self._check_open()
        await self._consumer.seek(target)
        self._last = None
        self._not_before = None
        if isinstance(target, MessageId):
            self._start_id, self._inclusive = target, True
            self._skip = _batch_start(target, inclusive=True)
        else:
            self._start_id, self._inclusive, self._skip = None, True, None
            self._not_before = (round(target.timestamp() * 1000) if isinstance(target, datetime.datetime)
                                else target)

    def _subscribe_from(self, subscribe: broker_pb2.Subscribe) -> None:
        """The reader's Subscribe, on every connect: non-durable, starting where `_resume_from` says."""
        subscribe.non_durable = True
        start, inclusive = self._resume_from()
        if start == _EARLIEST:
            subscribe.initial_position = broker_pb2.EARLIEST
        elif start == _LATEST:
            subscribe.initial_position = broker_pb2.LATEST
        else:
            position = subscribe.start_position
            position.ledger_id, position.entry_id = start.ledger_id, start.entry_id
            subscribe.start_inclusive = inclusive

    def _resume_from(self) -> tuple[MessageId, bool]:
        """Where the subscription starts (on every connect): after the last message returned, or
        else where the reader starts. A seek by time the broker has forgotten (the reader was gone
        too long) starts from the earliest, skipping what was published before that time."""
        last = self._last
        if last is not None:
            start, inclusive = last.message_id, False
        elif self._start_id is None:
            return _EARLIEST, True  # _not_before was set by the seek
        else:
            start, inclusive = self._start_id, self._inclusive
        self._skip = _batch_start(start, inclusive)
        if self._skip is not None:
            return start, True  # the whole entry: the batch is finished here
        return start, inclusive

    # ---- life cycle ----

    async def _start(self) -> None:
        """Subscribe (AsyncClient.create_reader calls it once). MessageId.latest inclusive starts
        at the topic's last message, so it is looked up first."""
        if self._start_id == _LATEST and self._inclusive:
            last = (await self._consumer._last_message_id_reply()).last
            self._start_id = _EARLIEST if last.entry_id < 0 else MessageId(
                last.ledger_id, last.entry_id, last.partition, last.batch_index)
        await self._consumer._start()
        listener = self._config.reader_listener
        if listener is not None:
            self._listener = ListenerTask(self, listener, self._next_for_listener,
                                          name=f"herald-reader-{self.subscription}")

    async def close(self) -> None:
        """Close the reader (its subscription goes with it); a waiting read_next fails with
        ConsumerClosedError. Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            await self._listener.stop()
        await self._consumer.close()

    async def _shutdown(self) -> None:
        self._closed = True
        if self._listener is not None:
            await self._listener.stop()
        await self._consumer._shutdown()

    def _consumer_closed(self, consumer: TopicConsumer[Any]) -> None:
        self._closed = True
        self._on_closed(self)

    def _check_open(self) -> None:
        if self._closed or self._consumer.closed:
            raise ConsumerClosedError("reader closed")

    def __aiter__(self) -> AsyncIterator[Message[T]]:
        """`async for message in reader`: each message as it comes (read_next() without a
        timeout); the loop ends when the reader is closed (by another task, or its client)."""
        return self

    async def __anext__(self) -> Message[T]:
        return await next_until_closed(self.read_next, lambda: self.closed)

    async def __aenter__(self) -> AsyncReader[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _key(last: common_pb2.MessageIdData) -> _MessageKey:
    return last.ledger_id, last.entry_id, last.batch_index


def _batch_start(start: MessageId, inclusive: bool) -> _MessageKey | None:
    """For a start inside a batch: its entry and the first batch index to read."""
    if start in (_EARLIEST, _LATEST) or start.batch_index < 0:
        return None
    return start.ledger_id, start.entry_id, start.batch_index + (0 if inclusive else 1)
