"""Schemas with the official client: producers and consumers with the topic's schema work, ones with a
schema that cannot evolve from it (another type, another record) are refused (IncompatibleSchema), ones
with none or the bytes schema are accepted. PRODUCER_SUCCESS carries the schema version (8 bytes,
big-endian, Pulsar's format) and GET_SCHEMA returns the schema. Evolution under each strategy:
test_schema_registry.py."""

from __future__ import annotations

import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar_api
from pulsar.schema import Float, Integer, JsonSchema, Record, String, StringSchema

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.pulsar.raw import Command, RawConnection

RECEIVE_MS = 10_000


class Order(Record):
    item = String()
    quantity = Integer()


class Price(Record):
    amount = Float()


def test_a_producer_and_consumer_with_the_same_schema_exchange_typed_messages(client: pulsar.Client) -> None:
    topic = unique_topic("schema-json")
    consumer = client.subscribe(topic, "s", schema=JsonSchema(Order))
    producer = client.create_producer(topic, schema=JsonSchema(Order))
    producer.send(Order(item="book", quantity=2))
    message = consumer.receive(timeout_millis=RECEIVE_MS)
    assert (message.value().item, message.value().quantity) == ("book", 2)
    # Another producer with the same schema is welcome, and so is one with no schema (bytes).
    client.create_producer(topic, schema=JsonSchema(Order)).send(Order(item="pen", quantity=1))
    assert consumer.receive(timeout_millis=RECEIVE_MS).value().item == "pen"
    client.create_producer(topic).send(b'{"item": "raw", "quantity": 3}')
    assert consumer.receive(timeout_millis=RECEIVE_MS).value().item == "raw"


def test_a_string_schema_round_trips(client: pulsar.Client) -> None:
    topic = unique_topic("schema-string")
    consumer = client.subscribe(topic, "s", schema=StringSchema())
    client.create_producer(topic, schema=StringSchema()).send("héllo")
    assert consumer.receive(timeout_millis=RECEIVE_MS).value() == "héllo"


def test_a_producer_with_a_different_schema_is_refused(client: pulsar.Client) -> None:
    topic = unique_topic("schema-producer")
    # (JSON schemas are Avro definitions too: a record of another name cannot be resolved.)
    client.create_producer(topic, schema=JsonSchema(Order))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(Price))  # same type, another definition


def test_a_consumer_with_a_different_schema_is_refused(client: pulsar.Client) -> None:
    topic = unique_topic("schema-consumer")
    client.create_producer(topic, schema=JsonSchema(Order))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s", schema=JsonSchema(Price))
    client.subscribe(topic, "s", schema=JsonSchema(Order)).close()
    client.subscribe(topic, "bytes").close()  # no schema: accepted


def _lookup(raw: RawConnection, topic: str) -> None:
    raw.send(Command(type=Command.LOOKUP, lookupTopic=pulsar_api.CommandLookupTopic(topic=topic, request_id=99)))
    assert raw.receive().type == Command.LOOKUP_RESPONSE


def test_schema_version_and_get_schema_on_the_wire(server: StandaloneProcess) -> None:
    topic = unique_topic("schema-wire")
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        _lookup(raw, topic)
        schema = pulsar_api.Schema(name="orders", schema_data=b'{"type": "record"}', type=pulsar_api.Schema.Json)
        schema.properties.add(key="k", value="v")
        raw.send(Command(type=Command.PRODUCER, producer=pulsar_api.CommandProducer(
            topic=topic, producer_id=1, request_id=1, schema=schema)))
        success = raw.receive()
        assert success.type == Command.PRODUCER_SUCCESS, success
        assert success.producer_success.schema_version == bytes(8)  # version 0, a big-endian long
        for request_id, version in ((2, None), (3, bytes(8))):
            get = pulsar_api.CommandGetSchema(request_id=request_id, topic=topic)
            if version is not None:
                get.schema_version = version
            raw.send(Command(type=Command.GET_SCHEMA, getSchema=get))
            answer = raw.receive()
            assert answer.type == Command.GET_SCHEMA_RESPONSE, answer
            got = answer.getSchemaResponse
            assert not got.HasField("error_code"), got
            assert (got.schema.type, got.schema.schema_data) == (pulsar_api.Schema.Json, b'{"type": "record"}')
            assert {kv.key: kv.value for kv in got.schema.properties} == {"k": "v"}
            assert got.schema_version == bytes(8)
        # A version it does not have, and a topic without a schema: TopicNotFound, as Pulsar answers.
        raw.send(Command(type=Command.GET_SCHEMA, getSchema=pulsar_api.CommandGetSchema(
            request_id=4, topic=topic, schema_version=(7).to_bytes(8, "big"))))
        missing = raw.receive().getSchemaResponse
        assert missing.request_id == 4 and missing.error_code == pulsar_api.TopicNotFound, missing
        raw.send(Command(type=Command.GET_SCHEMA, getSchema=pulsar_api.CommandGetSchema(
            request_id=5, topic=unique_topic("schema-none"))))
        none = raw.receive().getSchemaResponse
        assert none.request_id == 5 and none.error_code == pulsar_api.TopicNotFound, none
        assert "no-schema" in none.error_message
