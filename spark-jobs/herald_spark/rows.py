"""The rows a read gives: stored entries (producer batches) unpacked into Arrow columns, message by
message, with as little Python per message as the entry format allows."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa  # type: ignore[import-untyped]
from herald.api.v1 import broker_pb2
from herald.client.config import DEFAULT_MAX_MESSAGE_SIZE
from herald.common.codec.entry import ENTRY_FRAMING_ALLOWANCE, open_entry
from herald.common.codec.message_id import MessageId
from herald.common.errors import InvalidArgumentError
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA = StructType([
    StructField("key", StringType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("message_id", StringType(), False),
    StructField("publish_time", TimestampType(), True),
    StructField("event_time", TimestampType(), True),
    StructField("properties", MapType(StringType(), StringType(), True), True),
    StructField("producer_name", StringType(), True),
])

_TIMESTAMP = pa.timestamp("us", tz="UTC")
# The most an entry's payload may decompress to here (a bomb is refused, never inflated): a message
# of the brokers' default max message size and its framing.
MAX_PAYLOAD = DEFAULT_MAX_MESSAGE_SIZE + ENTRY_FRAMING_ALLOWANCE
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.string()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("message_id", pa.string(), nullable=False),
    pa.field("publish_time", _TIMESTAMP),
    pa.field("event_time", _TIMESTAMP),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("producer_name", pa.string()),
])


class Columns:
    """Columns being filled for one Arrow record batch of one topic partition."""

    __slots__ = ("event_times", "ids", "keys", "partition", "producers", "properties", "publish_times", "topic",
                 "values")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.keys: list[str | None] = []
        self.values: list[bytes] = []
        self.ids: list[str] = []
        self.publish_times: list[int] = []
        self.event_times: list[int | None] = []
        self.properties: list[dict[str, str] | None] = []
        self.producers: list[str] = []

    def __len__(self) -> int:
        return len(self.values)

    def add_entry(self, entry: broker_pb2.DeliveredEntry, first: MessageId | None, end: MessageId | None) -> None:
        """Append the messages of one stored entry whose ids lie in [first, end): a bound inside
        this entry (same ledger and entry, batch index >= 0) cuts the batch; None: no bound."""
        opened = open_entry(entry.data)  # either format: Herald's, or Pulsar's as its producers send it
        metadata = opened.metadata
        if metadata.num_chunks:
            raise InvalidArgumentError(
                f"entry {entry.ledger_id}:{entry.entry_id} of {self.topic} is a chunk of a chunked message: "
                "the herald Spark source reads whole messages only (produce with chunking off, or read it with "
                "the client)")
        payload = opened.restore(MAX_PAYLOAD)
        low = first.batch_index if first is not None and (first.ledger_id, first.entry_id) == (
            entry.ledger_id, entry.entry_id) else -1
        high = end.batch_index if end is not None and (end.ledger_id, end.entry_id) == (
            entry.ledger_id, entry.entry_id) and end.batch_index >= 0 else 1 << 31
        prefix = f"{entry.ledger_id}:{entry.entry_id}:{self.partition}:"
        publish_time = metadata.publish_time * 1000
        producer = metadata.producer_name
        batched = metadata.batched
        keys, values, ids, events, properties = self.keys, self.values, self.ids, self.event_times, self.properties
        count = 0
        # Never more records than the entry claims; all read before any is added.
        records = list(opened.records(payload))
        for index, (value, key, event_time, _sequence_id, props, compacted_out, _) in enumerate(records):
            if index < low or index >= high or compacted_out:
                continue
            keys.append(key)
            values.append(value)
            ids.append(prefix + (str(index) if batched else "-1"))
            events.append(event_time * 1000 if event_time else None)
            properties.append(props or None)
            count += 1
        self.publish_times.extend([publish_time] * count)
        self.producers.extend([producer] * count)

    def batch(self) -> pa.RecordBatch:
        rows = len(self.values)
        return pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.binary()),
            pa.array([self.topic] * rows, pa.string()),
            pa.array([self.partition] * rows, pa.int32()),
            pa.array(self.ids, pa.string()),
            pa.array(self.publish_times, _TIMESTAMP),
            pa.array(self.event_times, _TIMESTAMP),
            pa.array(_map_items(self.properties), pa.map_(pa.string(), pa.string())),
            pa.array(self.producers, pa.string()),
        ], schema=ARROW_SCHEMA)


def _map_items(maps: list[dict[str, str] | None]) -> Iterable[list[tuple[str, str]] | None]:
    return [None if item is None else list(item.items()) for item in maps]
