"""reconsume_later's side of a consumer with retries on (Pulsar's retry letter topic): the message
goes to the retry letter topic, to be delivered again once its delay has passed (the broker holds
it: delayed delivery, honoured on Shared and Key_Shared subscriptions), with Pulsar's properties
counting its rounds; past the dead letter policy's max_redeliver_count it goes to the dead letter
topic instead. One producer per target topic, made on first use and closed with the consumer."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from herald.client.config import DeadLetterPolicy
from herald.client.message import Message
from herald.client.producer import AsyncProducer
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import ConsumerClosedError, InvalidArgumentError

log = logging.getLogger(__name__)

# The properties a retried message carries (Pulsar's RetryMessageUtil names).
RECONSUME_TIMES = "RECONSUMETIMES"  # how many times it was reconsumed, this time included
DELAY_TIME = "DELAY_TIME"  # the delay asked for this time, milliseconds
REAL_TOPIC = "REAL_TOPIC"  # the topic the message was first received from
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"  # its id there
# How many times a message may be reconsumed when no dead letter policy says (Pulsar's default).
MAX_RECONSUME_TIMES = 16

# Makes (and starts) the producer of one topic: AsyncClient.create_producer, for bytes.
ProducerFactory = Callable[[str], Awaitable[AsyncProducer[bytes]]]


def retry_policy(topic: str, subscription: str, policy: DeadLetterPolicy | None) -> DeadLetterPolicy:
    """The dead letter policy of a consumer with retries on, its topics named: those the policy
    gives (full names), else `<topic>-<subscription>-RETRY` and `<topic>-<subscription>-DLQ`; the
    count the policy gives, else MAX_RECONSUME_TIMES."""
    base = str(TopicName.parse(topic))
    if policy is None:
        policy = DeadLetterPolicy(MAX_RECONSUME_TIMES)
    return dataclasses.replace(
        policy,
        dead_letter_topic=str(TopicName.parse(policy.dead_letter_topic or f"{base}-{subscription}-DLQ")),
        retry_letter_topic=str(TopicName.parse(policy.retry_letter_topic or f"{base}-{subscription}-RETRY")),
    )


def delay_ms(delay: object) -> int:
    """A reconsume delay (seconds, or a timedelta) in milliseconds; InvalidArgumentError unless >= 0."""
    if isinstance(delay, datetime.timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise InvalidArgumentError(f"reconsume_later's delay must be seconds or a timedelta, got {delay!r}")
    if not seconds >= 0 or seconds == float("inf"):
        raise InvalidArgumentError(f"reconsume_later's delay must be zero or more, got {delay!r}")
    return round(seconds * 1000)


def letter_properties(message: Message[Any], properties: Mapping[str, str] | None, delay: int) -> dict[str, str]:
    """What the message carries to the retry (or dead letter) topic: its own properties, where it
    came from (kept from its first round), the caller's properties, and the round count."""
    carried = dict(message.properties)
    carried.setdefault(REAL_TOPIC, message.topic)
    carried.setdefault(ORIGIN_MESSAGE_ID, str(message.message_id))
    if properties:
        if not isinstance(properties, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise InvalidArgumentError(f"reconsume_later's properties must map strings to strings, got {properties!r}")
        carried.update(properties)
    try:
        rounds = int(carried.get(RECONSUME_TIMES, "0")) + 1
    except ValueError:
        rounds = 1  # not ours (an application's property of the same name): count from here
    carried[RECONSUME_TIMES] = str(rounds)
    carried[DELAY_TIME] = str(delay)
    return carried


class RetryLetters:
    """Sends one consumer's reconsumed messages to its retry or dead letter topic."""

    def __init__(self, policy: DeadLetterPolicy, make_producer: ProducerFactory) -> None:
        assert policy.retry_letter_topic and policy.dead_letter_topic  # retry_policy named them
        self._policy = policy
        self._make_producer = make_producer
        self._producers: dict[str, asyncio.Task[AsyncProducer[bytes]]] = {}
        self._closed = False

    @property
    def retry_letter_topic(self) -> str:
        return self._policy.retry_letter_topic or ""

    @property
    def dead_letter_topic(self) -> str:
        return self._policy.dead_letter_topic or ""

    async def send(self, message: Message[Any], delay: float | datetime.timedelta,
                   properties: Mapping[str, str] | None = None) -> MessageId:
        """Publish the message's next round: to the retry letter topic, delivered after `delay`,
        or past max_redeliver_count rounds to the dead letter topic. Returns the letter's id."""
        if not isinstance(message, Message):
            raise InvalidArgumentError(f"reconsume_later takes a received Message, got {type(message).__name__}")
        wait = delay_ms(delay)
        carried = letter_properties(message, properties, wait)
        if int(carried[RECONSUME_TIMES]) > self._policy.max_redeliver_count:
            producer = await self._producer(self.dead_letter_topic)
            return await producer.send(message.data(), key=message.key, properties=carried)
        producer = await self._producer(self.retry_letter_topic)
        return await producer.send(message.data(), key=message.key, properties=carried,
                                   deliver_after=wait / 1000 if wait else None)

    async def _producer(self, topic: str) -> AsyncProducer[bytes]:
        """The topic's producer, made by the first caller; a failed making is tried again next time."""
        if self._closed:
            raise ConsumerClosedError("consumer closed")
        made = self._producers.get(topic)
        if made is None:
            made = self._producers[topic] = asyncio.ensure_future(self._make_producer(topic))
        try:
            return await asyncio.shield(made)
        except BaseException:
            failed = made.done() and (made.cancelled() or made.exception() is not None)
            if failed and self._producers.get(topic) is made:
                del self._producers[topic]
            raise

    async def close(self, graceful: bool = True) -> None:
        """Close the producers (those still being made too). Closing twice does nothing."""
        self._closed = True
        made, self._producers = list(self._producers.values()), {}
        for task in made:
            if not task.done():
                task.cancel()
        for result in await asyncio.gather(*made, return_exceptions=True):
            if isinstance(result, AsyncProducer):
                try:
                    await (result.close() if graceful else result._shutdown())
                except Exception as exc:  # closing the consumer goes on
                    log.warning("closing the retry letter producer on %s: %s", result.topic, exc)
