"""A dead letter as the dlq-worker publishes it: the messages of its entry, each with its key,
properties and event time plus where it came from, under a producer name of its own derived from
where it lives (origin topic, subscription, ledger, entry), so that publishing it again after a
crash is recognised by the dead-letter topic's dedup."""

from __future__ import annotations

import hashlib
import logging

from herald.api.v1 import deadletter_pb2
from herald.client.config import DEFAULT_MAX_MESSAGE_SIZE
from herald.client.retry_letters import ORIGIN_MESSAGE_ID, REAL_TOPIC
from herald.common.codec.entry import ENTRY_FRAMING_ALLOWANCE, Record, open_entry
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import HeraldError
from herald.dlq.publication import Publication

# The origin properties every moved message carries (REAL_TOPIC and ORIGIN_MESSAGE_ID are Pulsar's
# names, shared with reconsume_later; a message that has them from a retry round keeps them).
SUBSCRIPTION = "SUBSCRIPTION"
REDELIVERY_COUNT = "REDELIVERY_COUNT"
REASON = "REASON"
ORIGIN_PROPERTIES = (REAL_TOPIC, ORIGIN_MESSAGE_ID, SUBSCRIPTION, REDELIVERY_COUNT, REASON)
MAX_REDELIVERIES_REACHED = "max redeliveries reached"

log = logging.getLogger(__name__)


def producer_name(*parts: object) -> str:
    """A short producer name determined by `parts` alone: `dlq-<24 hex digits>`."""
    text = "\n".join(str(part) for part in parts)
    return "dlq-" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def letter_key(letter: deadletter_pb2.DeadLetter) -> tuple[str, str, int, int]:
    """What identifies a letter across brokers, workers and restarts."""
    return letter.topic, letter.subscription, letter.position.ledger_id, letter.position.entry_id


def letter_producer_name(letter: deadletter_pb2.DeadLetter) -> str:
    return producer_name(*letter_key(letter))


def letter_publication(letter: deadletter_pb2.DeadLetter, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                       ) -> Publication:
    """The letter's messages with their origin properties; an entry whose messages cannot be
    unpacked (a chunk, an encrypted or malformed payload, one that would decompress past
    `max_message_size` and its framing or past what it declares) goes as it is (`opaque`)."""
    opened = open_entry(letter.data, verify=False)  # storage verified it on the way; either format
    metadata, payload = opened.metadata, opened.payload
    opaque = Publication(opaque=(metadata, bytes(payload)),
                         opaque_pulsar=bytes(letter.data) if opened.pulsar is not None else None)
    if metadata.num_chunks > 0 or metadata.encryption_keys:
        return opaque
    try:
        records = list(opened.records(opened.restore(max_message_size + ENTRY_FRAMING_ALLOWANCE)))
    except HeraldError as exc:
        log.warning("dead letter %d:%d of %s %s: its messages cannot be unpacked (%s); it is moved as it is",
                    letter.position.ledger_id, letter.position.entry_id, letter.topic, letter.subscription, exc)
        return opaque
    partition = TopicName.parse(letter.topic).partition_index
    origin = {
        SUBSCRIPTION: letter.subscription,
        REDELIVERY_COUNT: str(letter.redelivery_count),
        REASON: MAX_REDELIVERIES_REACHED,
    }
    ledger_id, entry_id = letter.position.ledger_id, letter.position.entry_id
    messages = []
    for index, record in enumerate(records):
        if record.compacted_out:  # removed by compaction: not a message any more
            continue
        properties = dict(record.properties)
        properties.setdefault(REAL_TOPIC, letter.topic)
        properties.setdefault(ORIGIN_MESSAGE_ID, str(MessageId(
            ledger_id, entry_id, partition, index if metadata.batched else -1)))
        properties.update(origin)
        messages.append(Record(record.value, record.key, record.event_time, None, properties))
    return Publication(messages, compression=metadata.compression, ordering_key=metadata.ordering_key,
                       batched=metadata.batched)
