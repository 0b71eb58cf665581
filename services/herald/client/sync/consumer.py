"""The blocking Consumer: the asyncio consumer's API for threads. receive() fetches up to a few
messages per crossing to the loop and keeps the rest in a local buffer, dropped on a reconnect."""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

from herald.client.consumer import AsyncConsumer
from herald.client.message import Message
from herald.client.sync.loop import Submitter
from herald.common.errors import ConsumerClosedError, InvalidArgumentError
from herald.common.message_id import MessageId

if TYPE_CHECKING:
    from herald.client.sync.client import Client

# The most messages one cross-thread receive fetches into the sync consumer's local buffer.
MAX_RECEIVE_PREFETCH = 100


class Consumer:
    """Receives from one topic through one subscription. Made by `Client.subscribe`."""

    def __init__(self, client: Client, consumer: AsyncConsumer, receiver_queue_size: int) -> None:
        self._client = client
        self._async = consumer
        self._submitter = Submitter(client._thread.loop, _never_blocks)
        # Messages fetched in one crossing and not yet returned, with the connection epoch they
        # came on: after a reconnect the broker sends them again, so these are dropped.
        self._buffer: deque[Message] = deque()
        self._buffer_epoch = -1
        self._prefetch = max(1, min(MAX_RECEIVE_PREFETCH, receiver_queue_size // 4))
        self._lock = threading.Lock()
        self._closed = False

    @property
    def topic(self) -> str:
        return self._async.topic

    @property
    def subscription(self) -> str:
        return self._async.subscription

    @property
    def consumer_name(self) -> str:
        return self._async.consumer_name

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message; None if none arrives within `timeout` seconds (None: wait)."""
        with self._lock:
            if self._buffer:
                if self._buffer_epoch == self._async.epoch:
                    return self._buffer.popleft()
                self._buffer.clear()
        if self._closed or self._async.closed:
            raise ConsumerClosedError("consumer closed")
        epoch, messages = self._client._thread.run(self._fetch(timeout))
        if not messages:
            return None
        with self._lock:
            first = messages[0]
            if len(messages) > 1:
                self._buffer.extend(messages[1:])
                self._buffer_epoch = epoch
            return first

    async def _fetch(self, timeout: float | None) -> tuple[int, list[Message]]:  # noqa: ASYNC109
        messages = await self._async.receive_many(self._prefetch, timeout)
        return self._async.epoch, messages

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (sent to the broker in the next ack group)."""
        if self._closed or self._async.closed:
            raise ConsumerClosedError("consumer closed")
        if not isinstance(message, Message | MessageId):
            raise InvalidArgumentError(f"acknowledge takes a Message or MessageId, got {type(message).__name__}")
        self._submitter.submit(self._async.acknowledge, message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge this message and all before it (Exclusive and Failover only)."""
        self._async.check_cumulative_allowed()
        if self._closed or self._async.closed:
            raise ConsumerClosedError("consumer closed")
        if not isinstance(message, Message | MessageId):
            raise InvalidArgumentError(
                f"acknowledge_cumulative takes a Message or MessageId, got {type(message).__name__}")
        self._submitter.submit(self._async.acknowledge_cumulative, message)

    def close(self) -> None:
        """Send pending acks and close; receive() calls waiting now fail with ConsumerClosedError.
        Closing twice does nothing."""
        if self._client.closed:
            return  # the client closed it, and its thread is gone
        self._closed = True
        with self._lock:
            self._buffer.clear()
        self._submitter.call(self._async.close).result()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(topic={self.topic!r}, subscription={self.subscription!r})"


async def _never_blocks() -> None:
    return None
