"""Looking at a dead-letter topic without changing it (`herald admin dlq peek`): the messages the
replay subscription has not taken yet (peeked: nothing is delivered nor acknowledged), or, when
no replay subscription exists there, the topic's messages from the earliest (a reader)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from herald.client import AsyncClient
from herald.client.admin import AdminClient
from herald.client.config import DEFAULT_MAX_MESSAGE_SIZE
from herald.common.codec.entry import ENTRY_FRAMING_ALLOWANCE, unpack_entry
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import HeraldError

# The durable subscription `herald admin dlq replay` moves dead letters through; the dlq-worker
# makes it (at the earliest message) on each dead-letter topic it publishes to.
REPLAY_SUBSCRIPTION = "herald-dlq-replay"

log = logging.getLogger(__name__)


def dead_letter_topic(topic: str, subscription: str) -> str:
    """The default dead-letter topic of a subscription: `<topic>-<subscription>-DLQ` (a partitioned
    topic's, named after the topic itself)."""
    return f"{TopicName.parse(topic).base}-{subscription}-DLQ"


@dataclass(frozen=True, slots=True)
class DeadMessage:
    message_id: MessageId
    value: bytes
    key: str | None = None
    event_time: int = 0
    publish_time: int = 0
    properties: dict[str, str] = field(default_factory=dict)


async def topic_exists(admin: AdminClient, topic: str) -> bool:
    """Whether the topic (or partitioned topic) exists, asked without creating it."""
    name = TopicName.parse(topic)
    return str(name) in await admin.list_topics(name.namespace_name)


async def peek(
    client: AsyncClient, admin: AdminClient, topic: str, count: int, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> list[DeadMessage]:
    """Up to `count` messages of the dead-letter topic, oldest first, changing nothing. An entry
    whose messages cannot be shown (a chunk, an encrypted entry, one that would decompress past
    `max_message_size` and its framing or past what it declares) is left out with a warning."""
    if not await topic_exists(admin, topic):
        return []
    if REPLAY_SUBSCRIPTION in await admin.list_subscriptions(topic):
        return await _peek_subscription(admin, topic, count, max_message_size)
    found: list[DeadMessage] = []
    for partition in await client.get_partitions_for_topic(topic):
        found += await _read(client, partition, count - len(found), max_message_size)
        if len(found) >= count:
            break
    return found


async def _peek_subscription(admin: AdminClient, topic: str, count: int, max_message_size: int) -> list[DeadMessage]:
    found: list[DeadMessage] = []
    for entry in await admin.peek_messages(topic, REPLAY_SUBSCRIPTION, count):
        try:
            metadata, records = unpack_entry(bytes(entry.data), max_message_size + ENTRY_FRAMING_ALLOWANCE)
        except HeraldError as exc:
            # Not a batch of messages this can show (a chunk, an encrypted entry, a bomb).
            log.warning("dead letter entry %d:%d of %s is not shown: %s", entry.ledger_id, entry.entry_id, topic, exc)
            continue
        for index, record in enumerate(records):
            if record.compacted_out:  # removed by compaction
                continue
            found.append(DeadMessage(
                MessageId(entry.ledger_id, entry.entry_id, -1, index if metadata.batched else -1),
                bytes(record.value), record.key, record.event_time, metadata.publish_time, dict(record.properties)))
    return found[:count]


async def _read(client: AsyncClient, topic: str, count: int, max_message_size: int) -> list[DeadMessage]:
    found: list[DeadMessage] = []
    reader = await client.create_reader(topic, MessageId.earliest, max_message_size=max_message_size)
    try:
        while len(found) < count and await reader.has_message_available():
            message = await reader.read_next(timeout=client.config.operation_timeout)
            if message is None:
                break
            found.append(DeadMessage(message.message_id, message.data(), message.key, message.event_time or 0,
                                     message.publish_time, dict(message.properties)))
    finally:
        await reader.close()
    return found
