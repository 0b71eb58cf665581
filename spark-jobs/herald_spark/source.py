"""The `herald` data source: batch and streaming reads of Herald topics and writes to them, through
the service URL (the proxy from outside the cluster). The driver side plans: it names the topic
partitions and turns offsets into one range per partition; the workers read (reading.py) and write
(writing.py) with clients of their own."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from herald.client import Client
from herald.client.admin import AdminClient
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.errors import InvalidArgumentError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from herald_spark import offsets
from herald_spark.offsets import EARLIEST, LATEST
from herald_spark.options import ReadOptions, Subscription, WriteOptions
from herald_spark.reading import ReadSettings, TopicRange, read_range
from herald_spark.rows import SCHEMA
from herald_spark.trigger_limit import limit_ends
from herald_spark.writing import HeraldStreamWriter, HeraldWriter


class HeraldDataSource(DataSource):
    """spark.read / readStream / write .format("herald"); see docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "herald"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return HeraldBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HeraldStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return HeraldWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return HeraldStreamWriter(WriteOptions.parse(self.options), schema)


def _settings(options: ReadOptions) -> ReadSettings:
    return ReadSettings(options.service_url, options.fail_on_data_loss, options.pull_max_entries,
                        options.operation_timeout, options.read_compacted)


class Planner:
    """Driver-side questions: which partitions, where each ends now. Holds a client while the
    driver lives; never pickled with it (the readers' __getstate__ drops it)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.options.service_url, operation_timeout=self.options.operation_timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def partitions(self) -> dict[str, int]:
        """Every partition to read: its full name -> its index (-1: the topic is not partitioned)."""
        found: dict[str, int] = {}
        for topic in self._topics(self.options.subscription):
            names = self.client.get_partitions_for_topic(topic)
            if names == [topic]:
                found[topic] = -1
            else:
                found.update({name: TopicName.parse(name).partition_index for name in names})
        return dict(sorted(found.items()))

    def _topics(self, subscription: Subscription) -> list[str]:
        if subscription.pattern is None:
            return list(subscription.topics)
        pattern = re.compile(subscription.pattern)
        listed = asyncio.run(self._list_topics(subscription.namespace.replace("\\", "")))
        return sorted(name for name in listed if name.startswith("persistent://") and pattern.fullmatch(name))

    async def _list_topics(self, namespace: str) -> list[str]:
        async with AdminClient(self.options.service_url, timeout=self.options.operation_timeout) as admin:
            return await admin.list_topics(namespace)

    def end(self, name: str, partition: int) -> MessageId:
        """The offset just past the partition's last message."""
        return offsets.after(self.client.get_last_message_id(name), partition)

    def resolve(self, spec: str | dict[str, str], option: str, partitions: dict[str, int],
                missing: str) -> dict[str, MessageId]:
        """An offsets option made concrete for every partition (those the JSON leaves out: `missing`)."""
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - set(partitions))
            if unknown:
                raise InvalidArgumentError(
                    f"option {option} names {', '.join(unknown)}, which the topics read do not have; the partitions "
                    f"are {', '.join(partitions)}")
        resolved = {}
        for name, partition in partitions.items():
            text = spec.get(name, missing) if isinstance(spec, dict) else spec
            if text == EARLIEST:
                resolved[name] = offsets.earliest(partition)
            elif text == LATEST:
                resolved[name] = self.end(name, partition)
            else:
                given = MessageId.from_str(text)
                resolved[name] = MessageId(given.ledger_id, given.entry_id, partition, given.batch_index)
        return resolved


class HeraldBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.settings = _settings(options)
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.options)
        try:
            partitions = planner.partitions()
            starts = planner.resolve(self.options.starting, "startingOffsets", partitions, EARLIEST)
            ends = planner.resolve(self.options.ending, "endingOffsets", partitions, LATEST)
        finally:
            planner.close()
        return [TopicRange(name, partitions[name], starts[name], ends[name])
                for name in partitions if starts[name] < ends[name]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TopicRange):
            return iter(())  # Spark reads one partition of its own when partitions() gave none
        return read_range(self.settings, partition)


class HeraldStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are offsets.py's JSON. Each micro-batch reads, per partition, [previous end, the
    position after its last message then) — bounded by maxMessagesPerTrigger and, under
    Trigger.AvailableNow, by where the topic ended when the query started."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.settings = _settings(options)
        self._planner: Planner | None = None
        self._target: dict[str, MessageId] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def initialOffset(self) -> dict[str, str]:
        partitions = self.planner.partitions()
        return offsets.to_json(self.planner.resolve(self.options.starting, "startingOffsets", partitions, EARLIEST))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> dict[str, MessageId]:
        return {name: self.planner.end(name, partition) for name, partition in self.planner.partitions().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, str]:
        begin = offsets.from_json(start)
        latest = self._target if self._target is not None else self._latest()
        ends: dict[str, MessageId] = {}
        for name, end in latest.items():
            # A partition new since the start (a topic that grew, or matched the pattern later) is
            # read from its earliest message.
            first = begin.get(name, offsets.earliest(end.partition))
            ends[name] = max(first, end)
        for name, first in begin.items():
            ends.setdefault(name, first)  # a partition no longer listed stays where it was
        if isinstance(limit, ReadMaxRows):
            ends = limit_ends(self.options, begin, ends, limit.max_rows)
        return offsets.to_json(ends)

    def reportLatestOffset(self) -> dict[str, str] | None:
        return offsets.to_json(self._latest())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = offsets.from_json(start), offsets.from_json(end)
        ranges = []
        for name, stop in finish.items():
            first = begin.get(name, offsets.earliest(stop.partition))
            if first < stop:
                ranges.append(TopicRange(name, stop.partition, first, stop))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TopicRange):
            return iter(())  # Spark reads one partition of its own when partitions() gave none
        return read_range(self.settings, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, and Herald keeps no reader state."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
