"""Writing rows to Herald topics: each Spark task produces its rows with a client of its own and
waits until the broker stored every one before reporting success. Rows take `value` (binary or
string) and, optionally, `key`, `properties` (map of strings), `event_time` (timestamp) and `topic`
(used when the option topic is not set). A task that fails after sending part of its rows is
retried by Spark: writes are at least once."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from herald.client import Client, Producer
from herald.common.errors import HeraldError, InvalidArgumentError
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, LongType, MapType, Row, StringType, StructType, TimestampType

from herald_spark.options import WriteOptions

_COLUMNS = {
    "value": (BinaryType, StringType),
    "key": (StringType, BinaryType),
    "topic": (StringType,),
    "properties": (MapType,),
    "event_time": (TimestampType, LongType),
}


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    messages: int


def check_schema(options: WriteOptions, schema: StructType) -> None:
    """Refuse, on the driver, a frame the writer cannot write; other columns are ignored."""
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise InvalidArgumentError(f"writing to herald needs a column named value (binary or string); the columns "
                                   f"are {', '.join(fields)}")
    for name, types in _COLUMNS.items():
        if name in fields and not isinstance(fields[name], types):
            allowed = " or ".join(kind.__name__.removesuffix("Type").lower() for kind in types)
            raise InvalidArgumentError(f"column {name} is {fields[name].simpleString()}: it must be {allowed}")
    if options.topic is None and "topic" not in fields:
        raise InvalidArgumentError("writing to herald needs option topic or a column named topic")


def _millis(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # Spark hands naive local times to Python
        return int(value.timestamp() * 1000)
    return int(value)


def write_rows(options: WriteOptions, rows: Iterator[Row]) -> Written:
    failures: list[HeraldError] = []
    lock = threading.Lock()

    def sent(error: HeraldError | None, _message_id: object) -> None:
        if error is not None:
            with lock:
                failures.append(error)

    producers: dict[str, Producer[Any]] = {}
    count = 0
    with Client(options.service_url, operation_timeout=options.operation_timeout) as client:
        for row in rows:
            if failures:
                break
            fields = row.asDict()
            topic = options.topic or fields.get("topic")
            if not topic:
                raise InvalidArgumentError(
                    f"row {count} has no topic (a null topic column) and option topic is not set")
            producer = producers.get(topic)
            if producer is None:
                producer = producers[topic] = client.create_producer(
                    topic, block_if_queue_full=True, send_timeout=options.operation_timeout)
            value = fields["value"]
            key = fields.get("key")
            producer.send_async(
                b"" if value is None else value.encode() if isinstance(value, str) else bytes(value), sent,
                key=key.decode() if isinstance(key, bytes | bytearray) else key,
                properties=fields.get("properties") or None, event_time=_millis(fields.get("event_time")))
            count += 1
        for producer in producers.values():
            producer.flush()
    if failures:
        raise failures[0]
    return Written(count)


class HeraldWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_rows(self.options, iterator)


class HeraldStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_rows(self.options, iterator)
