"""Offsets of the `herald` source: per topic partition, the id of the first message not yet read.

An offset is a JSON object {"<partition's full topic name>": "<ledger:entry:partition:batch index>"}
(the text of a MessageId). A range [start, end) holds the messages whose id is >= start and < end,
ids ordered as (ledger, entry, batch index); a batch index of -1 means the start of its entry, so
"5:3:0:-1" is the first message of entry 3 of ledger 5. Ends the source computes are always entry
starts: the position after a partition's last message, (ledger, last entry + 1). "-1:-1:<p>:-1"
is the earliest position of partition p, before every message."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import InvalidArgumentError

EARLIEST = "earliest"
LATEST = "latest"


def earliest(partition: int) -> MessageId:
    return MessageId(-1, -1, partition, -1)


def after(last: MessageId, partition: int) -> MessageId:
    """The end-exclusive offset just past `last`, a partition's last message (ledger -1: none,
    which makes the earliest position)."""
    if last.ledger_id < 0:
        return earliest(partition)
    return MessageId(last.ledger_id, last.entry_id + 1, partition, -1)


def entry_of(message_id: MessageId) -> tuple[int, int]:
    return message_id.ledger_id, message_id.entry_id


def to_json(offsets: Mapping[str, MessageId]) -> dict[str, str]:
    """The offset dict Spark stores in its checkpoint (sorted, so that equal offsets are equal text)."""
    return {name: str(offsets[name]) for name in sorted(offsets)}


def from_json(offsets: Mapping[str, Any]) -> dict[str, MessageId]:
    return {name: MessageId.from_str(str(text)) for name, text in offsets.items()}


def parse_spec(option: str, text: str, default: str) -> str | dict[str, str]:
    """`earliest`, `latest` or a JSON object of message ids per partition (keys normalised to full
    topic names; values a message id's text or earliest / latest); InvalidArgumentError naming the
    option otherwise."""
    value = (text or default).strip()
    if value.lower() in (EARLIEST, LATEST):
        return value.lower()
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidArgumentError(
            f"option {option}={text!r} is invalid: use 'earliest', 'latest' or a JSON object of message ids "
            'per partition, such as {"persistent://public/default/orders-partition-0": "12:0:0:-1"}')
    spec: dict[str, str] = {}
    for name, position in parsed.items():
        try:
            full = str(TopicName.parse(name))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"option {option}: {exc}") from None
        if not isinstance(position, str):
            raise InvalidArgumentError(
                f"option {option}: the offset of {name} must be a string (a message id 'ledger:entry:partition:"
                f"batch_index', 'earliest' or 'latest'), got {position!r}")
        if position.lower() in (EARLIEST, LATEST):
            spec[full] = position.lower()
        else:
            try:
                MessageId.from_str(position)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"option {option}: offset of {name}: {exc}") from None
            spec[full] = position
    return spec
