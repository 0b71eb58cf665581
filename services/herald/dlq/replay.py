"""Replaying dead letters (`herald admin dlq replay`): each message of the dead-letter topic goes
back to its REAL_TOPIC (or the topic given, for a message without one), without the origin
properties the move added, and is then acknowledged on the dead-letter topic's replay
subscription: a replayed message is never replayed again.

A replay killed midway duplicates nothing: the messages of one dead-letter entry going to one
topic are published under a producer name of their own with their batch indexes as sequence ids,
so a message published but not yet acknowledged is recognised by the target's dedup next time.
The subscription is Exclusive: a second replay of the same topic at the same time is refused.

Everything is published as the replaying role (its own token): a message whose REAL_TOPIC names a
topic that role may not produce to (nor look up) is refused by lookup or the broker, published
nowhere and left unacknowledged in the dead-letter topic, and the replay fails saying so."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from herald.client import AsyncClient, ConsumerType, InitialPosition
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool
from herald.client.consumer import AsyncConsumer
from herald.client.lookup import LookupService
from herald.client.message import Message
from herald.client.retry_letters import DELAY_TIME, REAL_TOPIC, RECONSUME_TIMES
from herald.common.codec.entry import Record
from herald.common.codec.names import TopicName
from herald.common.errors import AuthorizationError, ConsumerBusyError, HeraldError, InvalidArgumentError
from herald.dlq.letters import ORIGIN_PROPERTIES, producer_name
from herald.dlq.peek import REPLAY_SUBSCRIPTION
from herald.dlq.publication import Publication
from herald.dlq.publisher import IdempotentPublisher

log = logging.getLogger(__name__)

# What a replayed message leaves behind: where the move found it, and its retry rounds (a fresh start).
DROPPED_PROPERTIES = frozenset((*ORIGIN_PROPERTIES, RECONSUME_TIMES, DELAY_TIME))
_WINDOW = 500  # messages taken before publishing them
_PUBLISHING = 16  # publications in flight
_IDLE = 1.0  # seconds without a message that end the replay


@dataclass
class Replayed:
    messages: int = 0  # published to their topics, and acknowledged
    # Taken and acknowledged, but found in their topic already: published by a replay killed before
    # it acknowledged them, or by one whose --limit cut their dead-letter entry short (the entry
    # comes again whole until all its messages are acknowledged).
    duplicates: int = 0


class ReplayError(HeraldError):
    """A replay stopped by an error after replaying some messages."""

    def __init__(self, replayed: Replayed, error: HeraldError) -> None:
        then = ("it stays in the dead-letter topic: grant the role produce there, or replay with a role that has it"
                if isinstance(error, AuthorizationError) else "run the replay again to go on")
        super().__init__(f"{error} (after {replayed.messages} messages were replayed; {then})")
        self.replayed = replayed
        self.code = error.code
        self.retryable = error.retryable


async def replay(
    service_url: str, dead_letter_topic: str, topic: str, limit: int | None = None, operation_timeout: float = 30.0,
    *, auth: Any = None, tls_trust_certs_file_path: str | None = None, tls_certificate_file_path: str | None = None,
    tls_private_key_file_path: str | None = None, progress: Callable[[Replayed], None] | None = None,
) -> Replayed:
    """Move messages of `dead_letter_topic` back to their REAL_TOPIC (`topic` for those without
    one), at most `limit` taken (None: every one there). `auth` and the tls_* paths as for
    AsyncClient: both the consumer and the publisher use them. `progress`: told the counts after
    each window of messages is replayed (the CLI shows them)."""
    if limit is not None and limit < 1:
        raise InvalidArgumentError(f"replay limit must be at least 1, got {limit}")
    fallback = str(TopicName.parse(topic))
    security: dict[str, Any] = {"auth": auth, "tls_trust_certs_file_path": tls_trust_certs_file_path,
                                "tls_certificate_file_path": tls_certificate_file_path,
                                "tls_private_key_file_path": tls_private_key_file_path}
    config = ClientConfig(service_url=service_url, operation_timeout=operation_timeout, stats_interval=0, **security)
    pool = ConnectionPool(config)
    publisher = IdempotentPublisher(pool, LookupService(pool, config), operation_timeout, partitions_ttl=60.0)
    replayed = Replayed()
    try:
        async with AsyncClient(service_url, operation_timeout=operation_timeout, stats_interval=0,
                               **security) as client:
            try:
                consumer = await client.subscribe(
                    dead_letter_topic, REPLAY_SUBSCRIPTION, ConsumerType.Exclusive, InitialPosition.Earliest,
                    receiver_queue_size=min(_WINDOW, limit or _WINDOW), ack_group_time=0)
            except ConsumerBusyError:
                raise ConsumerBusyError(f"another replay of {dead_letter_topic} is running (its subscription "
                                        f"{REPLAY_SUBSCRIPTION} has a consumer): wait for it to finish") from None
            try:
                await _run(consumer, publisher, fallback, limit, replayed, progress)
            except HeraldError as exc:
                raise ReplayError(replayed, exc) from exc
            finally:
                await consumer.close()
    finally:
        await pool.close(grace=None)
    return replayed


async def _run(
    consumer: AsyncConsumer[bytes], publisher: IdempotentPublisher, fallback: str, limit: int | None,
    replayed: Replayed, progress: Callable[[Replayed], None] | None = None,
) -> None:
    taken = 0
    while limit is None or taken < limit:
        want = _WINDOW if limit is None else min(_WINDOW, limit - taken)
        window = await _take(consumer, want)
        if not window:
            return
        taken += len(window)
        slots = asyncio.Semaphore(_PUBLISHING)
        publishing = [_publish(consumer, publisher, slots, target, group, replayed)
                      for target, group in _groups(window, fallback)]
        results = await asyncio.gather(*publishing, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if progress is not None:
            progress(replayed)


async def _publish(
    consumer: AsyncConsumer[bytes], publisher: IdempotentPublisher, slots: asyncio.Semaphore, target: str,
    group: list[Message[bytes]], replayed: Replayed,
) -> None:
    """Publish one group to its target, then acknowledge its messages on the dead-letter topic."""
    async with slots:
        first = group[0].message_id
        name = producer_name("replay", group[0].topic, first.ledger_id, first.entry_id, target)
        try:
            published = await publisher.publish(target, name, _publication(group))
        except AuthorizationError as exc:
            raise AuthorizationError(
                f"cannot replay to {target} (the {REAL_TOPIC} of message {first}): {exc}") from None
    for message in group:
        consumer.acknowledge(message)
    replayed.messages += published.stored
    replayed.duplicates += published.already


async def _take(consumer: AsyncConsumer[bytes], want: int) -> list[Message[bytes]]:
    """Up to `want` messages: those that come without a pause of _IDLE seconds."""
    taken: list[Message[bytes]] = []
    while len(taken) < want:
        message = await consumer.receive(timeout=_IDLE)
        if message is None:
            break
        taken.append(message)
    return taken


def _groups(window: list[Message[bytes]], fallback: str) -> list[tuple[str, list[Message[bytes]]]]:
    """The window's messages by dead-letter entry and target topic, each group in batch order."""
    groups: dict[tuple[Any, ...], tuple[str, list[Message[bytes]]]] = {}
    for message in window:
        target = _target(message, fallback)
        position = message.message_id
        key = (message.topic, position.ledger_id, position.entry_id, target)
        groups.setdefault(key, (target, []))[1].append(message)
    for _, group in groups.values():
        group.sort(key=lambda message: message.message_id.batch_index)
    return list(groups.values())


def _target(message: Message[bytes], fallback: str) -> str:
    real = message.properties.get(REAL_TOPIC)
    if real:
        try:
            return str(TopicName.parse(real))
        except InvalidArgumentError:
            log.warning("message %s has an invalid %s %r: replayed to %s", message.message_id, REAL_TOPIC, real,
                        fallback)
    return fallback


def _publication(group: list[Message[bytes]]) -> Publication:
    records = [
        Record(message.data(), message.key, message.event_time or 0, max(0, message.message_id.batch_index),
               {name: value for name, value in message.properties.items() if name not in DROPPED_PROPERTIES})
        for message in group
    ]
    return Publication(records, batched=group[0].message_id.batch_index >= 0)
