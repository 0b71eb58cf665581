"""AsyncProducer: what every producer offers, whether it publishes to one topic (TopicProducer,
topic_producer.py) or to all the partitions of a partitioned one (PartitionedProducer,
partitioned_producer.py). `AsyncClient.create_producer` picks the right one.

Message options of send / send_async (SEEDS §2):
    key            routes the message (hash of the key mod partitions) and orders it on Key_Shared
    ordering_key   bytes used instead of the key for Key_Shared ordering (bytes)
    properties     dict of str to str
    event_time     the application's time of the event, unix milliseconds
    sequence_id    explicit sequence id (must increase); default: the last one + 1
    deliver_at     deliver no earlier than this: unix milliseconds, or a datetime
    deliver_after  deliver no earlier than this from now: seconds, or a timedelta
"""

from __future__ import annotations

import abc
import asyncio
import datetime
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from herald.common.codec.message_id import MessageId
from herald.common.errors import HeraldError, InvalidArgumentError

T = TypeVar("T")

# Called on the event loop thread with (None, id) on success or (error, None) on failure; the sync
# facade uses these instead of futures.
SendCallback = Callable[[HeraldError | None, MessageId | None], None]


class AsyncProducer(abc.ABC, Generic[T]):
    """Publishes values of type T (bytes unless the producer has a schema) to one topic."""

    @property
    @abc.abstractmethod
    def topic(self) -> str: ...

    @property
    @abc.abstractmethod
    def producer_name(self) -> str: ...

    @property
    @abc.abstractmethod
    def last_sequence_id(self) -> int:
        """The highest sequence id the broker has acknowledged (-1 before any)."""

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True once close() began (or the topic was terminated): sends fail from then on."""

    @abc.abstractmethod
    async def send(
        self, value: T, *, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | datetime.datetime | None = None, deliver_after: float | datetime.timedelta | None = None,
    ) -> MessageId:
        """Send one message and wait until the broker stored it; returns its id."""

    @abc.abstractmethod
    async def send_async(
        self, value: T, *, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | datetime.datetime | None = None, deliver_after: float | datetime.timedelta | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue one message; the future gives its id once the broker stored it. Raises at once
        when the producer is closed, the value does not encode, the message is too large, or the
        queue is full (unless block_if_queue_full, which waits for room instead)."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Send what is batched and wait until every message queued so far is stored."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the producer. Messages not yet stored fail with ProducerClosedError (call flush()
        first to wait for them). Closing twice does nothing."""

    @abc.abstractmethod
    def stats(self) -> Any:
        """This producer's counters and send latencies (a herald.client.stats.ProducerStats)."""

    # ---- for the blocking facade (herald.client.sync) ----

    @abc.abstractmethod
    def encode(self, value: T) -> bytes:
        """The value as bytes (the schema's work), after the checks a send makes at once (closed,
        too large)."""

    def encode_keyed(self, value: T, key: str | None) -> tuple[bytes, str | None]:
        """The value as bytes and the message's key: the sync facade calls this on the caller's
        thread. A KeyValue schema with SEPARATED encoding puts its key in the message key."""
        return self.encode(value), key

    @abc.abstractmethod
    def enqueue_nowait(
        self, data: bytes, callback: SendCallback, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | None = None,
    ) -> bool:
        """Queue an encoded message whose outcome goes to `callback` (on the loop thread). False
        when the queue is full and the producer blocks: wait_for_room() and offer it again.
        Errors reach the callback, never the caller. deliver_at is unix ms (see deliver_at_ms).
        Positional, so that the facade queues it without building keyword dicts per message."""

    @abc.abstractmethod
    async def wait_for_room(self) -> None:
        """Wait until a message may be queued without going over the pending limit."""

    def flush_nowait(self) -> None:
        """Close the open batch(es) and queue them for sending now, without waiting for receipts
        (on the loop thread): the blocking send() calls it so as not to wait out the batching
        delay. Does nothing here; producers that batch override it."""

    @abc.abstractmethod
    async def _start(self) -> None:
        """Connect (register with the broker(s), retrying what may pass within the operation timeout), then run in
        the background: AsyncClient calls it once, right after making the object."""

    @abc.abstractmethod
    async def _shutdown(self) -> None:
        """Close without telling the broker: for AsyncClient.shutdown()."""

    async def __aenter__(self) -> AsyncProducer[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def deliver_at_ms(
    deliver_at: int | datetime.datetime | None, deliver_after: float | datetime.timedelta | None,
) -> int | None:
    """A message's deliver-at time as unix milliseconds (None: now), from either option."""
    if deliver_at is not None and deliver_after is not None:
        raise InvalidArgumentError("give deliver_at or deliver_after, not both")
    if deliver_after is not None:
        seconds = deliver_after.total_seconds() if isinstance(deliver_after, datetime.timedelta) else deliver_after
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
            raise InvalidArgumentError(f"deliver_after must be zero or more seconds, got {deliver_after!r}")
        return int((datetime.datetime.now(datetime.UTC).timestamp() + seconds) * 1000)
    if deliver_at is None:
        return None
    if isinstance(deliver_at, datetime.datetime):
        if deliver_at.tzinfo is None:
            raise InvalidArgumentError("deliver_at must be a timezone-aware datetime (or unix milliseconds)")
        return int(deliver_at.timestamp() * 1000)
    if not isinstance(deliver_at, int) or isinstance(deliver_at, bool) or deliver_at < 0:
        raise InvalidArgumentError(f"deliver_at must be unix milliseconds or a datetime, got {deliver_at!r}")
    return deliver_at
