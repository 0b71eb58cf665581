"""Schemas through Herald's own protocol, against a real standalone: a producer registers its
schema (RegisterProducer.schema) and stamps the version the broker gave it on every entry; a consumer
subscribes with its schema (Subscribe.schema) and decodes each message with the version it was
written with (fetched with GetSchema, also through the proxy); AUTO_PRODUCE_BYTES producers bind to
the topic's schema; KeyValue SEPARATED keys travel as the message key; `keep_schema` on delete.

These hold whatever the topic's registry does with a second schema (first schema wins, or a
compatibility strategy): the evolution cases are in test_schema_evolution_herald.py. The schemas
here are the application's own (Schema subclasses with an `info`, as any application may write),
so that this file is about the wiring, not about one schema format."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import grpc.aio
import pytest
from herald.api.v1 import broker_pb2, broker_pb2_grpc
from herald.client import AsyncClient, Client, MessageId
from herald.client.admin import AdminClient
from herald.client.schema import Schema, StringSchema
from herald.client.schema_fetcher import schema_fetcher
from herald.client.schemas import AutoProduceBytesSchema, KeyValueSchema
from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import IncompatibleSchemaError, NotFoundError, SchemaError
from herald.common.transport.rpc import error_from_rpc

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.wire import WireClient

ORDER_V0 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
ORDER_TEXT_ID = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


class RecordJson(Schema[dict[str, Any]]):
    """JSON documents described by an Avro record definition (what Pulsar's JSON schema carries)."""

    def __init__(self, definition: dict[str, Any]) -> None:
        self.definition = json.dumps(definition, sort_keys=True).encode()

    def encode(self, value: dict[str, Any]) -> bytes:
        return json.dumps(value).encode()

    def decode(self, data: bytes) -> dict[str, Any]:
        try:
            decoded: dict[str, Any] = json.loads(data)
        except ValueError as exc:
            raise SchemaError(f"not JSON: {exc}") from None
        return decoded

    @property
    def info(self) -> SchemaInfo:
        return SchemaInfo("JSON", self.definition)


async def test_typed_messages_carry_the_schema_version_and_decode(client: AsyncClient, admin: AdminClient) -> None:
    topic = unique_topic("typed")
    consumer = await client.subscribe(topic, "s", schema=StringSchema())
    producer = await client.create_producer(topic, schema=StringSchema())
    await producer.send("hello")
    message = await consumer.receive(timeout=10)
    assert message is not None
    assert message.value == "hello"
    assert message.schema_version == 0  # the topic's first schema version
    version, schema = await admin.get_schema(topic)
    assert (version, schema.type) == (0, "STRING")
    await producer.close()
    await consumer.close()


async def test_bytes_messages_carry_no_schema_version(client: AsyncClient) -> None:
    topic = unique_topic("untyped")
    consumer = await client.subscribe(topic, "s")
    producer = await client.create_producer(topic)
    await producer.send(b"raw")
    message = await consumer.receive(timeout=10)
    assert message is not None and message.value == b"raw"
    assert message.schema_version is None
    await producer.close()
    await consumer.close()


async def test_a_consumer_with_an_incompatible_schema_is_refused(client: AsyncClient) -> None:
    topic = unique_topic("refused")
    producer = await client.create_producer(topic, schema=RecordJson(ORDER_V0))
    with pytest.raises(IncompatibleSchemaError):
        await client.subscribe(topic, "s", schema=RecordJson(ORDER_TEXT_ID))
    await producer.close()


async def test_a_version_that_cannot_be_fetched_is_a_schema_error_on_value_not_a_lost_message(
    client: AsyncClient, wire: WireClient,
) -> None:
    """An entry claiming a schema version the topic does not have: its message is delivered, its
    value says why it cannot decode, and the messages after it decode (in order)."""
    topic = unique_topic("unknown-version")
    typed = await client.create_producer(topic, schema=StringSchema())  # the topic's version 0
    consumer = await client.subscribe(topic, "s", schema=StringSchema())
    raw = await wire.producer(topic)
    payload = bytearray()
    pack_record(payload, b"from the future")
    metadata = EntryMetadata(producer_name=raw.name, sequence_id=0, highest_sequence_id=0, num_messages=1,
                             batched=True, schema_version=7)
    reply = await raw.send_entry(encode_entry(metadata, payload), 0)
    assert reply.HasField("receipt"), reply
    await typed.send("after it")
    first = await consumer.receive(timeout=10)
    second = await consumer.receive(timeout=10)
    assert first is not None and second is not None
    assert first.schema_version == 7
    assert first.data() == b"from the future"
    with pytest.raises(SchemaError, match="schema version 7"):
        first.value  # noqa: B018 - the property raises
    assert second.value == "after it"
    await raw.close()
    await typed.close()
    await consumer.close()


async def test_the_proxy_forwards_get_schema(shared_standalone: StandaloneProcess) -> None:
    """GetSchema through the proxy (the address a client's lookup names when it goes through one):
    a consumer connected there fetches the version its messages were written with."""
    topic = unique_topic("proxied")
    async with AsyncClient(shared_standalone.proxy_url) as proxied:
        consumer = await proxied.subscribe(topic, "s", schema=StringSchema())
        producer = await proxied.create_producer(topic, schema=StringSchema())
        await producer.send("through the proxy")
        message = await consumer.receive(timeout=10)
        assert message is not None
        assert message.value == "through the proxy"
        await producer.close()
        await consumer.close()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{shared_standalone.proxy_port}") as channel:
        reply = await broker_pb2_grpc.BrokerServiceStub(channel).GetSchema(
            broker_pb2.GetSchemaRequest(topic=topic), timeout=10)
    assert (reply.version, reply.schema.type) == (0, "STRING")


async def test_auto_produce_bytes_sends_checked_bytes_with_the_topic_schema(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("auto-produce")
    await admin.create_topic(topic)
    version = await admin.upload_schema(topic, RecordJson(ORDER_V0).info)
    consumer = await client.subscribe(topic, "s", schema=RecordJson(ORDER_V0))
    producer = await client.create_producer(topic, schema=AutoProduceBytesSchema())
    await producer.send(b'{"id": 5}')
    with pytest.raises(SchemaError, match="topic's JSON schema cannot read: bytes are not JSON"):
        await producer.send(b"not json")
    message = await consumer.receive(timeout=10)
    assert message is not None
    assert message.value == {"id": 5}
    assert message.schema_version == version
    await producer.close()
    await consumer.close()


async def test_auto_produce_bytes_on_a_topic_without_schema_is_refused(client: AsyncClient) -> None:
    topic = unique_topic("auto-produce-none")
    with pytest.raises(SchemaError, match="has no schema"):
        await client.create_producer(topic, schema=AutoProduceBytesSchema())


async def test_key_value_separated_sends_the_key_as_the_message_key(client: AsyncClient) -> None:
    topic = unique_topic("kv-separated")
    consumer = await client.subscribe(topic, "s", schema=KeyValueSchema(StringSchema(), StringSchema(), "SEPARATED"))
    raw = await client.subscribe(topic, "raw")
    producer = await client.create_producer(topic, schema=KeyValueSchema(StringSchema(), StringSchema(), "SEPARATED"))
    await producer.send(("customer-1", "ordered a lamp"))
    message = await consumer.receive(timeout=10)
    seen = await raw.receive(timeout=10)
    assert message is not None and seen is not None
    assert message.value == ("customer-1", "ordered a lamp")
    # On the wire: the key base64 in the message key (as Pulsar's partition_key_b64_encoded), the value alone.
    assert seen.key == base64.b64encode(b"customer-1").decode()
    assert seen.data() == b"ordered a lamp"
    await producer.close()
    await consumer.close()
    await raw.close()


async def test_partitioned_topic_messages_decode_by_their_version(client: AsyncClient, admin: AdminClient) -> None:
    topic = unique_topic("partitioned")
    await admin.create_topic(topic, partitions=3)
    consumer = await client.subscribe(topic, "s", schema=StringSchema())
    producer = await client.create_producer(topic, schema=StringSchema())
    for i in range(9):
        await producer.send(f"value {i}", key=f"k{i}")
    values = set()
    for _ in range(9):
        message = await consumer.receive(timeout=10)
        assert message is not None
        assert message.schema_version == 0
        values.add(message.value)
    assert values == {f"value {i}" for i in range(9)}
    await producer.close()
    await consumer.close()


async def test_delete_topic_keeps_its_schema_only_when_asked(client: AsyncClient, admin: AdminClient) -> None:
    kept, dropped = unique_topic("keep-schema"), unique_topic("drop-schema")
    for topic in (kept, dropped):
        producer = await client.create_producer(topic, schema=StringSchema())
        await producer.close()
    await admin.delete_topic(kept, keep_schema=True)
    await admin.delete_topic(dropped)
    assert (await admin.get_schema(kept))[1].type == "STRING"
    with pytest.raises(NotFoundError):
        await admin.get_schema(dropped)


async def test_get_schema_on_the_broker_contract(client: AsyncClient, wire: WireClient) -> None:
    """BrokerService.GetSchema: the latest version, a named one, NOT_FOUND for another."""
    topic = unique_topic("get-schema")
    producer = await client.create_producer(topic, schema=StringSchema())
    stub = await wire.broker(topic)
    latest = await stub.GetSchema(broker_pb2.GetSchemaRequest(topic=topic), timeout=10)
    assert (latest.version, latest.schema.type) == (0, "STRING")
    named = await stub.GetSchema(broker_pb2.GetSchemaRequest(topic=topic, version=0), timeout=10)
    assert named.schema.type == "STRING"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.GetSchema(broker_pb2.GetSchemaRequest(topic=topic, version=5), timeout=10)
    assert error_from_rpc(refused.value, "GetSchema").__class__ is NotFoundError
    await producer.close()


async def test_many_consumers_of_one_client_all_decode_one_version(client: AsyncClient) -> None:
    """Consumers of one client reading the same version at once all decode it (one fetch serves them)."""
    topic = unique_topic("coalesced")
    consumers = [await client.subscribe(topic, f"s{i}", schema=StringSchema()) for i in range(5)]
    producer = await client.create_producer(topic, schema=StringSchema())
    await producer.send("shared")
    received = await asyncio.gather(*(consumer.receive(timeout=10) for consumer in consumers))
    assert [message.value for message in received if message is not None] == ["shared"] * 5
    await producer.close()
    for consumer in consumers:
        await consumer.close()


async def test_key_value_separated_on_a_partitioned_topic_routes_by_its_key(
    client: AsyncClient, admin: AdminClient,
) -> None:
    """The KV key is the message key, so a key's messages go to one partition, in order."""
    topic = unique_topic("kv-partitioned")
    await admin.create_topic(topic, partitions=4)
    consumer = await client.subscribe(topic, "s", schema=KeyValueSchema(StringSchema(), StringSchema(), "SEPARATED"))
    producer = await client.create_producer(topic, schema=KeyValueSchema(StringSchema(), StringSchema(), "SEPARATED"))
    for i in range(12):
        await producer.send((f"customer-{i % 3}", f"event {i}"))
    by_key: dict[str, list[tuple[int, str]]] = {}
    for _ in range(12):
        message = await consumer.receive(timeout=10)
        assert message is not None
        key, value = message.value
        by_key.setdefault(key, []).append((message.message_id.partition, value))
    for key, seen in by_key.items():
        assert len({partition for partition, _ in seen}) == 1, (key, seen)
        assert [value for _, value in seen] == [f"event {i}" for i in range(12) if f"customer-{i % 3}" == key]
    await producer.close()
    await consumer.close()


def test_key_value_separated_through_the_blocking_client(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("kv-sync")
    with Client(shared_standalone.service_url) as blocking:
        consumer = blocking.subscribe(topic, "s", schema=KeyValueSchema(StringSchema(), StringSchema(), "SEPARATED"))
        producer = blocking.create_producer(topic, schema=KeyValueSchema(StringSchema(), StringSchema(), "SEPARATED"))
        producer.send(("k", "v"))
        message = consumer.receive(timeout=10)
        assert message.value == ("k", "v")
        assert message.key == base64.b64encode(b"k").decode()
        producer.close()
        consumer.close()


async def test_a_reader_decodes_by_the_version_its_messages_carry(client: AsyncClient) -> None:
    topic = unique_topic("typed-reader")
    producer = await client.create_producer(topic, schema=StringSchema())
    await producer.send("first")
    reader = await client.create_reader(topic, MessageId.earliest, schema=StringSchema())
    message = await reader.read_next(timeout=10)
    assert message is not None
    assert (message.schema_version, message.value) == (0, "first")
    await producer.close()
    await reader.close()


async def test_concurrent_fetches_of_one_version_share_one_call_and_stay_cached(
    client: AsyncClient, admin: AdminClient,
) -> None:
    """One GetSchema answers every concurrent asker of a version (they get the very same object, which
    separate calls would not give), and later askers are answered from the client's cache."""
    topic = unique_topic("fetch-once")
    await admin.create_topic(topic)
    await admin.upload_schema(topic, RecordJson(ORDER_V0).info)
    fetcher = schema_fetcher(client._pool, client._lookup, client._config)
    fetched = await asyncio.gather(*(fetcher.version(topic, 0) for _ in range(20)))
    assert all(each is fetched[0] for each in fetched)
    assert fetched[0].data == RecordJson(ORDER_V0).info.data
    assert await fetcher.version(topic + "-partition-0", 0) is fetched[0]  # partitions share the topic's
    with pytest.raises(NotFoundError):
        await fetcher.version(topic, 3)
