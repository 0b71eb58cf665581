"""The blocking Producer: the asyncio producer's API for threads. send() waits for the receipt;
send_async() encodes the value on the caller's thread, queues it through the client's Submitter
and reports to a callback. It uses only the AsyncProducer interface, so it serves a topic's
producer and a partitioned one alike."""

from __future__ import annotations

import concurrent.futures
import datetime
import logging
from typing import Any, Generic

from herald.client import tracing as client_tracing
from herald.client.producer import AsyncProducer, SendCallback, T, deliver_at_ms
from herald.client.sync.loop import LoopThread, Submitter
from herald.common import tracing
from herald.common.codec.message_id import MessageId
from herald.common.errors import HeraldError, HeraldTimeoutError

log = logging.getLogger(__name__)


def _ignore(error: HeraldError | None, message_id: MessageId | None) -> None:
    if error is not None:
        log.debug("send_async without a callback failed: %s", error)


class Producer(Generic[T]):
    """Publishes values of type T (bytes unless it has a schema) to one topic. Made by
    `Client.create_producer`. Message options as AsyncProducer.send (herald.client.producer)."""

    def __init__(self, thread: LoopThread, producer: AsyncProducer[T], max_pending_messages: int = 1000,
                 flush_timeout: float = 30.0) -> None:
        self._thread = thread  # the client's
        self._async = producer
        self._flush_timeout = flush_timeout  # the send timeout, else the operation timeout
        # Sends handed to the loop and not yet queued by the producer: at most max_pending_messages
        # (send_async waits past it, or while the producer's own queue is full and it blocks).
        self._submitter = Submitter(thread.loop, producer.wait_for_room, max_pending_messages)

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def producer_name(self) -> str:
        return self._async.producer_name

    @property
    def last_sequence_id(self) -> int:
        """The highest sequence id the broker has acknowledged (-1 before any)."""
        return self._async.last_sequence_id

    @property
    def is_connected(self) -> bool:
        return self._async.is_connected

    @property
    def closed(self) -> bool:
        return self._async.closed

    def send(
        self, value: T, *, key: str | None = None, ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None, sequence_id: int | None = None,
        deliver_at: int | datetime.datetime | None = None, deliver_after: float | datetime.timedelta | None = None,
    ) -> MessageId:
        """Send one message and wait until the broker stored it; returns its id."""
        done: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(message_id)  # type: ignore[arg-type]

        self.send_async(value, callback, key=key, ordering_key=ordering_key, properties=properties,
                        event_time=event_time, sequence_id=sequence_id, deliver_at=deliver_at,
                        deliver_after=deliver_after)
        # A caller waiting on one message should not also wait out the batching delay.
        self._submitter.submit(self._async.flush_nowait)
        return done.result()

    def send_async(
        self, value: T, callback: SendCallback | None = None, *, key: str | None = None,
        ordering_key: bytes | None = None, properties: dict[str, str] | None = None, event_time: int | None = None,
        sequence_id: int | None = None, deliver_at: int | datetime.datetime | None = None,
        deliver_after: float | datetime.timedelta | None = None,
    ) -> None:
        """Queue one message; `callback(error, message_id)` runs on the client's thread when the
        broker stored it (error None) or it failed. Raises at once if the producer is closed, the
        value does not encode or the message is too large. A full queue (max_pending_messages
        waiting for receipts) fails the message with ProducerQueueIsFullError through the callback;
        with block_if_queue_full this call waits for room instead, as Pulsar's does, so a caller
        faster than the cluster is held back rather than queueing without limit."""
        data, key = self._async.encode_keyed(value, key)
        at = None if deliver_at is None and deliver_after is None else deliver_at_ms(deliver_at, deliver_after)
        if tracing.ENABLED:  # the create span on the caller's thread, in its context (herald.client.tracing)
            properties = client_tracing.with_creation_context(self._async.topic, properties,
                                                              self._async.producer_name)
        self._submitter.offer(self._async.enqueue_nowait, data, callback or _ignore, key, ordering_key, properties,
                              event_time, sequence_id, at)

    def flush(self) -> None:
        """Wait until every message sent so far is stored: at most the send timeout (the operation
        timeout when send_timeout is 0), then HeraldTimeoutError; the messages stay queued."""
        started = self._submitter.call(self._async.flush)
        try:
            # The async flush bounds its own wait once it runs; behind a full queue it may not start.
            started.result(timeout=2 * self._flush_timeout)
        except concurrent.futures.TimeoutError:
            started.cancel()
            raise HeraldTimeoutError(
                f"flush of producer {self.producer_name!r} on {self.topic} timed out after "
                f"{2 * self._flush_timeout:g}s: "
                "its queue is full and the cluster does not answer; the messages stay queued (flush again, or close "
                "to fail them)") from None

    def stats(self) -> Any:
        """The producer's counters and send latencies (a herald.client.stats.ProducerStats)."""
        return self._submitter.call(self._stats).result()

    async def _stats(self) -> Any:
        return self._async.stats()

    def close(self) -> None:
        """Close; messages not yet stored fail with ProducerClosedError (flush() first to keep them).
        Closing twice does nothing."""
        if self._thread.closed:
            return  # the client closed it, and its thread is gone
        # Not queued behind the sends: a send waiting for room (a full queue, a silent cluster)
        # would hold the close back for ever. Sends handed off meanwhile fail with ProducerClosedError.
        self._thread.run(self._async.close())

    def __enter__(self) -> Producer[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Producer(topic={self.topic!r}, name={self.producer_name!r})"
