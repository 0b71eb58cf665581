"""AsyncConsumer: what every consumer offers, whether it reads one topic (TopicConsumer,
topic_consumer.py) or several topics and partitions (MultiTopicConsumer, multi_topic_consumer.py;
PatternConsumer for a regex). `AsyncClient.subscribe` picks the right one."""

from __future__ import annotations

import abc
import datetime
from collections.abc import AsyncIterator, Sequence
from typing import Any, Generic, TypeVar

from herald.client.config import ConsumerType
from herald.client.iteration import next_until_closed
from herald.client.message import Message
from herald.common.codec.message_id import MessageId
from herald.common.errors import NotAllowedError

T = TypeVar("T")


class AsyncConsumer(abc.ABC, Generic[T]):
    """Receives messages with values of type T (bytes unless the consumer has a schema) through
    one subscription."""

    @property
    @abc.abstractmethod
    def topic(self) -> str:
        """The topic subscribed to (for several topics: the names joined with commas)."""

    @property
    @abc.abstractmethod
    def subscription(self) -> str: ...

    @property
    @abc.abstractmethod
    def consumer_name(self) -> str: ...

    @property
    @abc.abstractmethod
    def consumer_type(self) -> ConsumerType:
        """The subscription's type (Exclusive, Shared, Failover, Key_Shared)."""

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True once close() began: receive() and acknowledge() fail from then on."""

    @abc.abstractmethod
    async def receive(self, timeout: float | None = None) -> Message[T] | None:  # noqa: ASYNC109
        """The next message; None if none arrives within `timeout` seconds (None: wait). Refused
        with NotAllowedError when the consumer has a message listener."""

    @abc.abstractmethod
    async def batch_receive(self) -> list[Message[T]]:
        """Messages up to the batch receive policy's limits (max messages, max bytes; the first
        message always counts as fitting): at once when the queue holds enough to reach a limit,
        else what is queued when a limit is reached or the policy's timeout passes (an empty list
        when nothing came). Refused with NotAllowedError when the consumer has a message listener."""

    @abc.abstractmethod
    def acknowledge(self, message: Message[T] | MessageId) -> None:
        """Acknowledge one message (sent to the broker with the next ack group)."""

    @abc.abstractmethod
    def acknowledge_cumulative(self, message: Message[T] | MessageId) -> None:
        """Acknowledge this message and every one before it (Exclusive and Failover only: see
        check_cumulative_allowed)."""

    def check_cumulative_allowed(self) -> None:
        """NotAllowedError when this consumer's subscription type refuses cumulative acks (Shared,
        Key_Shared): what acknowledge_cumulative raises, for callers that check first (the
        blocking facade, in the caller's thread)."""
        kind = self.consumer_type
        if kind in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise NotAllowedError(
                f"cumulative acknowledgement is not allowed on a {kind.name} subscription "
                f"({self.subscription!r}): acknowledge messages one by one"
            )

    @abc.abstractmethod
    def negative_acknowledge(self, message: Message[T] | MessageId) -> None:
        """Give up on a message for now: it is redelivered after negative_ack_redelivery_delay."""

    @abc.abstractmethod
    async def reconsume_later(
        self, message: Message[T], delay: float | datetime.timedelta,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Have the message delivered again after `delay` (needs retry_enable): it is sent to the
        retry letter topic, which this consumer also reads, and acknowledged here; past the dead
        letter policy's max_redeliver_count it goes to the dead letter topic instead."""

    @abc.abstractmethod
    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to deliver again every message not acknowledged yet."""

    @abc.abstractmethod
    async def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Move the subscription: the next message is the one with that id, or the first published
        at or after that time (unix milliseconds or an aware datetime)."""

    @abc.abstractmethod
    def pause(self) -> None:
        """Stop asking the broker for messages (those already queued are still received)."""

    @abc.abstractmethod
    def resume(self) -> None:
        """Ask for messages again after pause()."""

    @abc.abstractmethod
    async def unsubscribe(self) -> None:
        """Delete the subscription (refused while other consumers are connected to it) and close."""

    @abc.abstractmethod
    async def get_last_message_id(self) -> MessageId | Sequence[MessageId]:
        """The id of the last message stored in the topic (one per partition for several)."""

    @abc.abstractmethod
    def has_reached_end_of_topic(self) -> bool:
        """True once the broker said the topic is terminated and everything in it was delivered
        and acknowledged (for several topics: all of them)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Send the grouped acks, leave the subscription and close; pending receive() calls fail
        with ConsumerClosedError. Closing twice does nothing."""

    @abc.abstractmethod
    def stats(self) -> Any:
        """This consumer's counters (a herald.client.stats.ConsumerStats)."""

    # ---- for the blocking facade (herald.client.sync) ----

    @abc.abstractmethod
    async def receive_many(self, limit: int, timeout: float | None = None) -> list[Message[T]]:  # noqa: ASYNC109
        """Up to `limit` messages: those queued, or else the first to arrive within `timeout`
        (an empty list when none does); one loop round trip for the sync facade."""

    @property
    @abc.abstractmethod
    def epoch(self) -> int:
        """Counts reconnects and seeks: messages fetched before either are not wanted any more (a
        reconnect delivers them again, a seek moved away), so the sync facade drops the ones it
        still buffers."""

    @abc.abstractmethod
    async def _start(self) -> None:
        """Connect (subscribe, retrying what may pass within the operation timeout), then run in
        the background: AsyncClient calls it once, right after making the object."""

    @abc.abstractmethod
    async def _shutdown(self) -> None:
        """Close without telling the broker: for AsyncClient.shutdown()."""

    async def __aenter__(self) -> AsyncConsumer[T]:
        return self

    def __aiter__(self) -> AsyncIterator[Message[T]]:
        """`async for message in consumer`: each message as it comes (receive() without a
        timeout); the loop ends when the consumer is closed (by another task, or its client)."""
        return self

    async def __anext__(self) -> Message[T]:
        return await next_until_closed(self.receive, lambda: self.closed)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
