"""Herald's schema classes register what the official Python client (pulsar-client) registers for
the same class, byte for byte: a Record class written for pulsar-client works with Herald by
changing only its import, and one topic gets one schema version from both. Their encodings read
each other: in memory, and through a real Herald between a Pulsar producer or consumer and Herald's
client."""

from __future__ import annotations

import enum
import types
from typing import Any

import pulsar
import pulsar.schema as pulsar_schema
import pytest
from herald.api.v1 import broker_pb2, common_pb2
from herald.client import Client, InitialPosition
from herald.client import schemas as herald_schema

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

RECEIVE_MS = 10_000


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def user_class(lib: types.ModuleType) -> Any:
    """The same pulsar-client style classes, built on pulsar.schema or herald.client.schemas."""

    class Address(lib.Record):  # type: ignore[name-defined,misc]
        street = lib.String(required=True)
        number = lib.Integer()

    class Tag(lib.Record):  # type: ignore[name-defined,misc]
        label = lib.String()

    class User(lib.Record):  # type: ignore[name-defined,misc]
        _avro_namespace = "com.example.users"
        name = lib.String(required=True)
        age = lib.Integer()
        visits = lib.Long(default=3, required_default=True)
        height = lib.Float()
        weight = lib.Double()
        admin = lib.Boolean(default=True, required_default=True)
        color = Color
        shade = lib.CustomEnum(Color, default=Color.BLUE, required_default=True)
        home = Address(required=True)
        work = Address
        tags = lib.Array(Tag())
        nicknames = lib.Array(lib.String())
        scores = lib.Map(lib.Double())
        labels = lib.Map(Tag())

    class Sorted(lib.Record):  # type: ignore[name-defined,misc]
        _sorted_fields = True
        zeta = lib.String()
        alpha = lib.Long(required=True)

    return User, Address, Tag, Sorted


PULSAR_USER, PULSAR_ADDRESS, PULSAR_TAG, PULSAR_SORTED = user_class(pulsar_schema)
HERALD_USER, HERALD_ADDRESS, HERALD_TAG, HERALD_SORTED = user_class(herald_schema)


def _pulsar_info(schema: Any) -> tuple[str, bytes]:
    info = schema.schema_info()
    return info.schema_type().name, info.schema().encode()


def _herald_info(schema: herald_schema.Schema[Any]) -> tuple[str, bytes]:
    assert schema.info is not None
    return schema.info.type, schema.info.data


@pytest.mark.parametrize("which", ["User", "Sorted"])
@pytest.mark.parametrize("kind", ["AvroSchema", "JsonSchema"])
def test_record_definitions_are_byte_for_byte_pulsar_clients(kind: str, which: str) -> None:
    pulsar_class = {"User": PULSAR_USER, "Sorted": PULSAR_SORTED}[which]
    herald_class = {"User": HERALD_USER, "Sorted": HERALD_SORTED}[which]
    ours = _herald_info(getattr(herald_schema, kind)(herald_class))
    theirs = _pulsar_info(getattr(pulsar_schema, kind)(pulsar_class))
    assert ours == theirs


def test_protobuf_native_definitions_are_pulsar_clients() -> None:
    # pulsar-client has the native flavour only (ProtobufNativeSchema, PROTOBUF_NATIVE).
    for message in (broker_pb2.RegisterProducer, common_pb2.Position):
        ours = _herald_info(herald_schema.ProtobufSchema(message))
        assert ours == _pulsar_info(pulsar_schema.ProtobufNativeSchema(message))


def test_string_schemas_are_of_one_type() -> None:
    # The data of a STRING schema means nothing: Herald sends none (as Pulsar's Java client does),
    # pulsar-client sends the text "null" (its json.dumps(None)); the registry compares them by type.
    assert _herald_info(herald_schema.StringSchema()) == ("STRING", b"")
    assert _pulsar_info(pulsar_schema.StringSchema()) == ("STRING", b"null")


# (pulsar-client fills an unset record field with an empty record, which does not encode when the
# record has required fields: `work` is set.)
def _herald_user() -> Any:
    return HERALD_USER(name="ada", age=36, height=1.5, weight=60.25, color=Color.RED,
                       home=HERALD_ADDRESS(street="main", number=1), work=HERALD_ADDRESS(street="w"),
                       tags=[HERALD_TAG(label="x")], nicknames=["a"], scores={"s": 1.0},
                       labels={"l": HERALD_TAG(label="y")})


def _pulsar_user() -> Any:
    return PULSAR_USER(name="ada", age=36, height=1.5, weight=60.25, color=Color.RED,
                       home=PULSAR_ADDRESS(street="main", number=1), work=PULSAR_ADDRESS(street="w"),
                       tags=[PULSAR_TAG(label="x")], nicknames=["a"], scores={"s": 1.0},
                       labels={"l": PULSAR_TAG(label="y")})


def _same_user(herald_user: Any, pulsar_user: Any) -> None:
    for field in ("name", "age", "visits", "height", "weight", "admin", "color", "shade", "nicknames", "scores"):
        assert getattr(herald_user, field) == getattr(pulsar_user, field), field
    assert (herald_user.home.street, herald_user.home.number) == (pulsar_user.home.street, pulsar_user.home.number)
    assert herald_user.work.street == pulsar_user.work.street
    assert [t.label for t in herald_user.tags] == [t.label for t in pulsar_user.tags]
    assert herald_user.labels["l"].label == pulsar_user.labels["l"].label


def test_avro_encodings_are_the_same_bytes_both_ways() -> None:
    ours, theirs = herald_schema.AvroSchema(HERALD_USER), pulsar_schema.AvroSchema(PULSAR_USER)
    assert ours.encode(_herald_user()) == theirs.encode(_pulsar_user())
    _same_user(ours.decode(theirs.encode(_pulsar_user())), theirs.decode(ours.encode(_herald_user())))


def test_json_documents_read_both_ways() -> None:
    ours, theirs = herald_schema.JsonSchema(HERALD_USER), pulsar_schema.JsonSchema(PULSAR_USER)
    # pulsar-client writes an enum's value where Herald (and Pulsar's Java client) write its name:
    # Herald reads both.
    _same_user(ours.decode(theirs.encode(_pulsar_user())), theirs.decode(ours.encode(_herald_user())))


def test_a_pulsar_avro_producer_and_a_herald_reader_share_a_topic(server: StandaloneProcess,
                                                                  client: pulsar.Client) -> None:
    topic = unique_topic("schema-interop")
    producer = client.create_producer(topic, schema=pulsar_schema.AvroSchema(PULSAR_USER))
    consumer = client.subscribe(topic, "pulsar", schema=pulsar_schema.AvroSchema(PULSAR_USER))
    producer.send(_pulsar_user())
    ours = herald_schema.AvroSchema(HERALD_USER)
    with Client(server.service_url) as herald:
        reader = herald.subscribe(topic, "herald", initial_position=InitialPosition.Earliest)
        message = reader.receive(timeout=RECEIVE_MS / 1000)
        assert message is not None
        _same_user(ours.decode(message.data()), _pulsar_user())
        # Herald's bytes, sent raw, are what the Pulsar consumer of the typed topic decodes.
        herald.create_producer(topic).send(ours.encode(_herald_user()))
    assert consumer.receive(timeout_millis=RECEIVE_MS).value().name == "ada"  # the Pulsar producer's
    _same_user(_herald_user(), consumer.receive(timeout_millis=RECEIVE_MS).value())
