"""AutoConsumeSchema reads each message by its writer's schema (GenericRecords for Avro and JSON,
str, KeyValue, numbers, bytes); AutoProduceBytesSchema sends bytes unchanged once they decode with
the topic's schema, and refuses the ones that do not, saying why."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest
from herald.api.v1 import common_pb2
from herald.client import (
    AutoConsumeSchema,
    AutoProduceBytesSchema,
    AvroSchema,
    GenericRecord,
    JsonSchema,
    KeyValue,
    KeyValueSchema,
    ProtobufSchema,
    StringSchema,
)
from herald.client.schemas.base import ReaderCache
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError


@dataclasses.dataclass
class Point:
    x: int
    y: int
    label: str | None = None


@dataclasses.dataclass
class Segment:
    start: Point
    end: Point


def test_auto_consume_registers_as_auto_consume_and_reads_raw_bytes_without_a_writer() -> None:
    schema = AutoConsumeSchema()
    assert schema.info == SchemaInfo("AUTO_CONSUME")
    assert schema.decode(b"\x01") == b"\x01"
    assert schema.reader_for(SchemaInfo("BYTES"))(b"\x02") == b"\x02"
    with pytest.raises(SchemaError, match="AutoConsumeSchema is for consumers"):
        schema.encode(b"x")


@pytest.mark.parametrize("typed", [AvroSchema(Segment), JsonSchema(Segment)], ids=["avro", "json"])
def test_records_read_as_generic_records(typed: AvroSchema[Segment]) -> None:
    assert typed.info is not None
    data = typed.encode(Segment(Point(1, 2, "a"), Point(3, 4)))
    record = AutoConsumeSchema().reader_for(typed.info, version=3)(data)
    assert isinstance(record, GenericRecord)
    assert (record.schema_type, record.schema_version, record.schema_name) == (typed.info.type, 3, "Segment")
    assert record.start.x == 1 and record["start"]["label"] == "a" and record.end.label is None
    assert dict(record.end) == {"x": 3, "y": 4, "label": None}
    assert record == {"start": {"x": 1, "y": 2, "label": "a"}, "end": {"x": 3, "y": 4, "label": None}}
    with pytest.raises(AttributeError, match="no field 'z'"):
        _ = record.start.z
    with pytest.raises(AttributeError, match="read-only"):
        record.start = None


def test_strings_numbers_and_pairs_read_by_their_type() -> None:
    auto = AutoConsumeSchema()
    assert auto.reader_for(SchemaInfo("STRING", b"", {"__charset": "latin-1"}))(b"\xe9") == "é"
    assert auto.reader_for(SchemaInfo("INT32"))(struct.pack(">i", -5)) == -5
    assert auto.reader_for(SchemaInfo("INT64"))(struct.pack(">q", 2**40)) == 2**40
    assert auto.reader_for(SchemaInfo("DOUBLE"))(struct.pack(">d", 0.5)) == 0.5
    assert auto.reader_for(SchemaInfo("BOOLEAN"))(b"\x01") is True
    with pytest.raises(SchemaError, match="a INT32 value is 4 bytes, got 2"):
        auto.reader_for(SchemaInfo("INT32"))(b"\x00\x00")
    pairs = KeyValueSchema(StringSchema(), AvroSchema(Point))
    assert pairs.info is not None
    pair = auto.reader_for(pairs.info)(pairs.encode(KeyValue("p", Point(5, 6))))
    assert isinstance(pair, KeyValue) and pair.key == "p" and pair.value.y == 6
    separated = KeyValueSchema(StringSchema(), AvroSchema(Point), "SEPARATED")
    assert separated.info is not None
    _, value = separated.split(KeyValue("p", Point(7, 8)))
    assert value is not None and auto.reader_for(separated.info)(value).x == 7  # the payload is the value


def test_readers_are_cached_per_writer_and_version() -> None:
    auto, info = AutoConsumeSchema(), AvroSchema(Point).info
    assert info is not None
    assert auto.reader_for(info) is auto.reader_for(info)
    assert auto.reader_for(info, version=1) is auto.reader_for(info, version=1)
    assert auto.reader_for(info, version=1) is not auto.reader_for(info, version=2)
    data = AvroSchema(Point).encode(Point(1, 2))
    assert auto.reader_for(info, version=2)(data).schema_version == 2


def test_auto_produce_sends_anything_until_bound() -> None:
    schema = AutoProduceBytesSchema()
    assert schema.info is None
    assert schema.encode(b"anything") == b"anything"
    with pytest.raises(SchemaError, match="sends bytes already encoded, got str"):
        schema.encode("text")  # type: ignore[arg-type]


@pytest.mark.parametrize(("typed", "value", "bad", "reason"), [
    (AvroSchema(Point), Point(1, 2), b"\x02\x04\x02", "bytes do not decode with the topic's AVRO schema"),
    (AvroSchema(Point), Point(1, 2), b"\x02\x04\x00\x00", "1 bytes are left after the record"),
    (JsonSchema(Point), Point(1, 2), b'{"x": "one", "y": 2}', "record.x: expected long"),
    (JsonSchema(Point), Point(1, 2), b"{", "bytes are not JSON"),
    (StringSchema(), "héllo", b"\xff", "bytes are not utf-8 text"),
    (KeyValueSchema(StringSchema(), StringSchema()), KeyValue("k", "v"), b"\x00\x00\x00\x05k", "cut short"),
    (ProtobufSchema(common_pb2.Position), common_pb2.Position(ledger_id=1), b"\xff\xff\xff",
     "not a herald.v1.Position in protobuf's binary form"),
], ids=["avro-truncated", "avro-trailing", "json-type", "json-syntax", "string", "key-value", "protobuf"])
def test_bound_auto_produce_checks_bytes_with_the_topics_schema(typed: Any, value: Any, bad: bytes,
                                                               reason: str) -> None:
    bound = AutoProduceBytesSchema().bound_to(typed.info)
    assert bound.info == typed.info
    good = typed.encode(value)
    assert bound.encode(good) == good  # unchanged
    with pytest.raises(SchemaError, match=f"refused to send bytes that the topic's {typed.info.type} schema cannot "
                                          f"read: .*{reason}"):
        bound.encode(bad)


def test_auto_produce_bound_to_raw_bytes_checks_nothing() -> None:
    assert AutoProduceBytesSchema().bound_to(SchemaInfo("BYTES")).encode(b"\xff") == b"\xff"


def test_the_reader_cache_keeps_the_most_recent_writers() -> None:
    cache: ReaderCache[Any] = ReaderCache(capacity=2)
    made: list[str] = []

    def make(info: SchemaInfo) -> Any:
        made.append(info.type)
        return bytes

    for kind in ("A", "B", "A", "C", "A", "B"):
        cache.get(SchemaInfo(kind), make)
    assert made == ["A", "B", "C", "B"]  # A stayed (recently used); B went when C came
