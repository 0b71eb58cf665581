"""Schema evolution through Herald's own protocol: a topic's schema gains versions (FULL, the default
strategy, takes an Avro field added with a default), producers stamp the version they write with, and
a consumer decodes every message with the version it was written with, resolved to its own schema
(Avro's resolution rules, by fastavro): old messages keep decoding after an upgrade, new ones decode
for a consumer still on the old schema. Versions are never reused: after a delete they carry on.

These need the schema registry (herald.broker.core.schema_registry): with a topic keeping its first
schema only, the second version is refused."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from herald.client import AsyncClient
from herald.client.admin import AdminClient
from herald.client.schema import Schema
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import SchemaError

from tests.helpers import unique_topic

ORDER_V0 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
ORDER_V1 = {"type": "record", "name": "Order",
            "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""}]}


class Avro(Schema[dict[str, Any]]):
    """An application's Avro schema (fastavro): resolves a writer's version to its own."""

    def __init__(self, definition: dict[str, Any]) -> None:
        self.definition = json.dumps(definition, sort_keys=True)
        self.parsed = fastavro.parse_schema(definition)

    def encode(self, value: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.parsed, value)
        return out.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        return self._read(data, self.parsed, None)

    def reader_for(self, writer: SchemaInfo) -> Any:
        written = fastavro.parse_schema(json.loads(writer.data))
        return lambda data: self._read(data, written, self.parsed)

    @staticmethod
    def _read(data: bytes, writer: Any, reader: Any) -> dict[str, Any]:
        try:
            record: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(data), writer, reader)  # type: ignore[assignment]
        except Exception as exc:
            raise SchemaError(f"Avro record does not decode: {exc}") from None
        return record

    @property
    def info(self) -> SchemaInfo:
        return SchemaInfo("AVRO", self.definition.encode())


async def test_a_new_consumer_reads_messages_of_both_versions(client: AsyncClient) -> None:
    topic = unique_topic("evolve")
    old = await client.create_producer(topic, schema=Avro(ORDER_V0))
    reader = await client.subscribe(topic, "old-reader", schema=Avro(ORDER_V0))
    await old.send({"id": 1})
    new = await client.create_producer(topic, schema=Avro(ORDER_V1))  # version 1: a field with a default
    await new.send({"id": 2, "note": "gift"})
    upgraded = await client.subscribe(topic, "new-reader", schema=Avro(ORDER_V1))
    await upgraded.seek(0)  # from the first message (publish time 0: the earliest)
    first, second = await upgraded.receive(timeout=10), await upgraded.receive(timeout=10)
    assert first is not None and second is not None
    assert (first.schema_version, first.value) == (0, {"id": 1, "note": ""})  # the default fills it in
    assert (second.schema_version, second.value) == (1, {"id": 2, "note": "gift"})
    # A consumer still on version 0 reads version 1's messages without the field it does not know.
    old_first, old_second = await reader.receive(timeout=10), await reader.receive(timeout=10)
    assert old_first is not None and old_second is not None
    assert old_first.value == {"id": 1}
    assert (old_second.schema_version, old_second.value) == (1, {"id": 2})
    for closing in (old, new, reader, upgraded):
        await closing.close()


async def test_versions_carry_on_after_a_delete(client: AsyncClient, admin: AdminClient) -> None:
    topic = unique_topic("evolve-delete")
    await admin.create_topic(topic)
    assert await admin.upload_schema(topic, Avro(ORDER_V0).info) == 0
    assert await admin.upload_schema(topic, Avro(ORDER_V1).info) == 1
    assert [version for version, _ in await admin.schema_versions(topic)] == [0, 1]
    assert await admin.delete_schema(topic) == 1
    producer = await client.create_producer(topic, schema=Avro(ORDER_V0))
    consumer = await client.subscribe(topic, "s", schema=Avro(ORDER_V0))
    await producer.send({"id": 3})
    message = await consumer.receive(timeout=10)
    assert message is not None
    assert (message.schema_version, message.value) == (2, {"id": 3})
    await producer.close()
    await consumer.close()
