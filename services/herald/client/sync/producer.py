"""The blocking Producer: the asyncio producer's API for threads. send() waits for the receipt;
send_async() queues the message through the client's Submitter and reports to a callback."""

from __future__ import annotations

import concurrent.futures
import logging
from typing import TYPE_CHECKING

from herald.client.producer import AsyncProducer, SendCallback
from herald.client.sync.loop import Submitter
from herald.common.errors import HeraldError
from herald.common.message_id import MessageId

if TYPE_CHECKING:
    from herald.client.sync.client import Client

log = logging.getLogger(__name__)


def _ignore(error: HeraldError | None, message_id: MessageId | None) -> None:
    if error is not None:
        log.debug("send_async without a callback failed: %s", error)


class Producer:
    """Publishes to one topic. Made by `Client.create_producer`."""

    def __init__(self, client: Client, producer: AsyncProducer) -> None:
        self._client = client
        self._async = producer
        self._submitter = Submitter(client._thread.loop, producer.wait_for_room)

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def producer_name(self) -> str:
        return self._async.producer_name

    @property
    def last_sequence_id(self) -> int:
        return self._async.last_sequence_id

    def send(
        self, value: bytes, *, key: str | None = None, properties: dict[str, str] | None = None,
        event_time: int | None = None, sequence_id: int | None = None,
    ) -> MessageId:
        """Send one message and wait until the broker stored it; returns its id."""
        done: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(message_id)  # type: ignore[arg-type]

        self.send_async(value, callback, key=key, properties=properties, event_time=event_time,
                        sequence_id=sequence_id)
        # A caller waiting on one message should not also wait out the batching delay.
        self._submitter.submit(self._async._acc.flush)
        return done.result()

    def send_async(
        self, value: bytes, callback: SendCallback | None = None, *, key: str | None = None,
        properties: dict[str, str] | None = None, event_time: int | None = None,
        sequence_id: int | None = None,
    ) -> None:
        """Queue one message; `callback(error, message_id)` runs on the client's thread when the
        broker stored it (error None) or it failed. Raises at once if the producer is closed or
        the message too large; a full queue is reported to the callback (or waited out with
        block_if_queue_full)."""
        if value.__class__ is not bytes:
            if not isinstance(value, bytearray | memoryview):
                raise TypeError(f"a message value must be bytes, got {type(value).__name__}")
            value = bytes(value)
        self._async._check_sendable(len(value))
        self._submitter.submit(self._async.enqueue_nowait, value, callback or _ignore, key, properties,
                               event_time, sequence_id)

    def flush(self) -> None:
        """Wait until every message sent so far is stored."""
        self._submitter.call(self._async.flush).result()

    def close(self) -> None:
        """Close; messages not yet stored fail with ProducerClosedError (flush() first to keep them).
        Closing twice does nothing."""
        if self._client.closed:
            return  # the client closed it, and its thread is gone
        self._submitter.call(self._async.close).result()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Producer(topic={self.topic!r}, name={self.producer_name!r})"
