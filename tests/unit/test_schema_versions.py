"""Schema versions without any connection: the producer's protocol registers its schema and takes the
version the broker gave it, the accumulators stamp it on every entry (batches, key-based batches,
chunks); the consumer's protocol holds back entries written with a version it has not fetched yet (in
order, those after them too), decodes each message with its version once known (the consumer's own
decode for its own schema, `reader_for` for another's), turns a version that could not be fetched
into a SchemaError on `.value`, and drops what it held on a reconnect; Pulsar's 8-byte schema_version
maps to EntryMetadata.schema_version both ways."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.api.v1 import broker_pb2
from herald.client.accumulator import BatchAccumulator, KeyBasedAccumulator, PendingOp
from herald.client.config import ConsumerConfig, ProducerConfig
from herald.client.consumer_protocol import ConsumerProtocol
from herald.client.producer_protocol import ProducerProtocol
from herald.client.schema import Schema
from herald.client.schema_decoders import SchemaDecoders
from herald.common.codec import pulsar_entry
from herald.common.codec.entry import EntryMetadata, decode_entry, encode_entry, pack_record, read_metadata
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import NotFoundError, SchemaError

from tests.unit.test_chunk_assembly import chunks

TOPIC = "persistent://public/default/versions"
OWN = SchemaInfo("JSON", b'{"v": 1}')
OLD = SchemaInfo("JSON", b'{"v": 0}')
LIMIT = 5 * 1024 * 1024


class Documents(Schema[dict[str, Any]]):
    """JSON documents; a message written with another version is tagged with that version's definition."""

    def encode(self, value: dict[str, Any]) -> bytes:
        return json.dumps(value).encode()

    def decode(self, data: bytes) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(data)
        return decoded

    def reader_for(self, writer: SchemaInfo) -> Callable[[bytes], dict[str, Any]]:
        return lambda data: {**json.loads(data), "written_with": writer.data.decode()}

    @property
    def info(self) -> SchemaInfo:
        return OWN


def entry(value: bytes, sequence_id: int, version: int | None) -> broker_pb2.DeliveredEntry:
    payload = bytearray()
    pack_record(payload, value)
    metadata = EntryMetadata(producer_name="p", sequence_id=sequence_id, highest_sequence_id=sequence_id,
                             num_messages=1, batched=True, publish_time=1)
    if version is not None:
        metadata.schema_version = version
    return broker_pb2.DeliveredEntry(ledger_id=1, entry_id=sequence_id, data=encode_entry(metadata, payload))


def consumer() -> tuple[ConsumerProtocol[dict[str, Any]], SchemaDecoders, list[int]]:
    wanted: list[int] = []
    decoders = SchemaDecoders(TOPIC, Documents())
    protocol: ConsumerProtocol[dict[str, Any]] = ConsumerProtocol(
        TOPIC, ConsumerConfig("sub", receiver_queue_size=100), decoders=decoders, schema=OWN,
        on_schema_wanted=wanted.append)
    return protocol, decoders, wanted


def test_subscribe_carries_the_consumers_schema() -> None:
    protocol, _, _ = consumer()
    subscribe = protocol.handshake_request().subscribe
    assert (subscribe.schema.type, subscribe.schema.data) == ("JSON", OWN.data)


def test_entries_without_a_version_decode_at_once() -> None:
    protocol, _, wanted = consumer()
    protocol.on_entries([entry(b'{"a": 1}', 0, None)])
    assert [message.value for message in protocol.queue] == [{"a": 1}]
    assert protocol.queue[0].schema_version is None
    assert wanted == []


def test_an_unknown_version_holds_its_entry_and_those_after_it_in_order() -> None:
    protocol, decoders, wanted = consumer()
    protocol.on_entries([entry(b'{"a": 0}', 0, None), entry(b'{"a": 1}', 1, 0), entry(b'{"a": 2}', 2, None)])
    assert [message.value for message in protocol.queue] == [{"a": 0}]
    assert wanted == [0]
    protocol.on_entries([entry(b'{"a": 3}', 3, 1)])  # held behind the first: asked for later
    assert wanted == [0] and len(protocol.held) == 3
    decoders.learned(0, OLD)
    protocol.release_held()
    # Entries 1 and 2 go; entry 3 waits for version 1 now.
    assert [message.value for message in protocol.queue] == [
        {"a": 0}, {"a": 1, "written_with": '{"v": 0}'}, {"a": 2}]
    assert wanted == [0, 1]
    decoders.learned(1, OWN)  # the consumer's own schema: its own decode
    protocol.release_held()
    assert [message.value for message in protocol.queue][-1] == {"a": 3}
    assert [message.schema_version for message in protocol.queue] == [None, 0, None, 1]
    assert protocol.held == []


def test_a_version_that_could_not_be_fetched_is_a_schema_error_on_value() -> None:
    protocol, decoders, _ = consumer()
    protocol.on_entries([entry(b'{"a": 1}', 0, 9)])
    decoders.failed(9, NotFoundError("topic has no schema version 9"))
    protocol.release_held()
    (message,) = protocol.queue
    assert message.data() == b'{"a": 1}'
    with pytest.raises(SchemaError, match=r"schema version 9 of .*no schema version 9"):
        message.value  # noqa: B018 - the property raises


class Picky(Documents):
    """A reader that cannot read version 0's data at all, and fails on some of version 1's."""

    def reader_for(self, writer: SchemaInfo) -> Callable[[bytes], dict[str, Any]]:
        if writer == OLD:
            raise ValueError("no resolution from the old definition")

        def read(data: bytes) -> dict[str, Any]:
            decoded: dict[str, Any] = json.loads(data)  # a ValueError, not a SchemaError, on bad bytes
            return decoded

        return read


def test_a_reader_that_fails_is_a_schema_error_and_never_stalls_the_consumer() -> None:
    decoders = SchemaDecoders(TOPIC, Picky())
    protocol: ConsumerProtocol[dict[str, Any]] = ConsumerProtocol(
        TOPIC, ConsumerConfig("sub"), decoders=decoders, schema=OWN)
    protocol.on_entries([entry(b'{"a": 0}', 0, 0), entry(b"not json", 1, 1), entry(b'{"a": 2}', 2, 1)])
    decoders.learned(0, OLD)
    decoders.learned(1, SchemaInfo("JSON", b'{"v": 2}'))
    protocol.release_held()
    first, second, third = protocol.queue
    with pytest.raises(SchemaError, match=r"schema version 0 .*no resolution"):
        first.value  # noqa: B018 - the property raises
    with pytest.raises(SchemaError, match=r"schema version 1 of .* does not decode"):
        second.value  # noqa: B018 - the property raises
    assert third.value == {"a": 2}


def test_a_reconnect_drops_what_was_held_and_forgets_failures() -> None:
    protocol, decoders, _ = consumer()
    decoders.failed(9, NotFoundError("not yet"))
    protocol.on_entries([entry(b"{}", 0, 4)])
    assert len(protocol.held) == 1
    protocol.on_disconnected()
    assert protocol.held == []
    assert decoders.needs(9)  # fetched again when its messages come again
    protocol.release_held()  # a fetch finishing after the reconnect: nothing to release
    assert list(protocol.queue) == []


def test_a_chunked_message_decodes_with_its_chunks_version() -> None:
    protocol, decoders, wanted = consumer()
    decoders.learned(2, OLD)
    delivered = []
    for index, (metadata, part) in enumerate(chunks(b'{"big": "' + b"x" * 300 + b'"}', 100)):
        metadata.schema_version = 2
        delivered.append(broker_pb2.DeliveredEntry(ledger_id=1, entry_id=index, data=encode_entry(metadata, part)))
    protocol.on_entries(delivered)
    (message,) = protocol.queue
    assert message.schema_version == 2
    assert message.value == {"big": "x" * 300, "written_with": '{"v": 0}'}
    assert wanted == []


def test_a_consumer_without_a_schema_never_waits_for_versions() -> None:
    wanted: list[int] = []
    protocol: ConsumerProtocol[bytes] = ConsumerProtocol(
        TOPIC, ConsumerConfig("sub"), decoders=SchemaDecoders(TOPIC, None), on_schema_wanted=wanted.append)
    protocol.on_entries([entry(b"raw", 0, 3)])
    assert [(message.value, message.schema_version) for message in protocol.queue] == [(b"raw", 3)]
    assert wanted == []
    assert not protocol.handshake_request().subscribe.HasField("schema")


def test_the_producer_registers_its_schema_and_takes_its_version() -> None:
    protocol = ProducerProtocol(TOPIC, ProducerConfig())
    protocol.schema = OWN
    register = protocol.handshake_request().register
    assert (register.schema.type, register.schema.data) == ("JSON", OWN.data)
    protocol.on_connected(broker_pb2.ProducerRegistered(producer_name="p", last_sequence_id=-1, schema_version=4),
                          first=True)
    assert protocol.schema_version == 4
    protocol.on_connected(broker_pb2.ProducerRegistered(producer_name="p", last_sequence_id=-1), first=False)
    assert protocol.schema_version is None


async def test_every_entry_carries_the_schema_version_batches_and_chunks() -> None:
    emitted: list[PendingOp] = []
    loop = asyncio.get_running_loop()
    batches = BatchAccumulator(max_messages=2, max_bytes=1024, max_delay=60, batched=True, emit=emitted.append,
                               loop=loop, producer_name="p", chunk_limit=300)
    batches.schema_version = 3
    for sequence_id in range(2):
        batches.append(b"x", None, None, 0, sequence_id, loop.create_future())
    batches.append(b"y" * 1000, None, None, 0, 2, loop.create_future())  # chunked
    batches.flush()
    assert len(emitted) > 2  # a batch, then the chunks
    assert {read_metadata(op.entry).schema_version for op in emitted} == {3}
    assert read_metadata(emitted[-1].entry).num_chunks > 1

    keyed: list[PendingOp] = []
    by_key = KeyBasedAccumulator(max_messages=10, max_bytes=1024, max_delay=60, emit=keyed.append, loop=loop)
    by_key.append(b"a", "k1", None, 0, None, loop.create_future())
    by_key.schema_version = 5  # after registration: open batches take it too
    by_key.append(b"b", "k2", None, 0, None, loop.create_future())
    by_key.flush()
    assert [read_metadata(op.entry).schema_version for op in keyed] == [5, 5]


def test_pulsar_schema_versions_map_both_ways() -> None:
    metadata = pulsar.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2,
                                      schema_version=(7).to_bytes(8, "big"))
    read, _ = pulsar_entry.split(pulsar_entry.encode(metadata, b"v"))
    assert pulsar_entry.to_entry_metadata(read).schema_version == 7
    odd = pulsar.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, schema_version=b"\x01")
    read, _ = pulsar_entry.split(pulsar_entry.encode(odd, b"v"))
    assert not pulsar_entry.to_entry_metadata(read).HasField("schema_version")  # not one of ours

    payload = bytearray()
    pack_record(payload, b"v")
    herald = EntryMetadata(producer_name="h", sequence_id=0, num_messages=1, publish_time=1, schema_version=2)
    read, _ = pulsar_entry.split(pulsar_entry.from_herald_entry(encode_entry(herald, payload), LIMIT))
    assert read.schema_version == (2).to_bytes(8, "big")
    unversioned = EntryMetadata(producer_name="h", sequence_id=0, num_messages=1, publish_time=1)
    read, _ = pulsar_entry.split(pulsar_entry.from_herald_entry(encode_entry(unversioned, payload), LIMIT))
    assert not read.HasField("schema_version")
    assert decode_entry(encode_entry(herald, payload))[0].schema_version == 2
