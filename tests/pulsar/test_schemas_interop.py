"""A typed topic shared by Herald's client and the official Pulsar client: each side's messages carry
the schema version their producer registered (Pulsar's 8-byte big-endian schema_version on the Pulsar
side, EntryMetadata.schema_version on Herald's) and read on the other side: one STRING schema although
the two clients define it with different data (pulsar-client's is b"null", Herald's empty)."""

from __future__ import annotations

import pulsar
from herald.client import AsyncClient
from herald.client.schema import StringSchema as HeraldStringSchema
from pulsar.schema import StringSchema

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

RECEIVE_MS = 10_000


async def test_a_pulsar_producers_messages_carry_their_version_to_a_herald_consumer(
    server: StandaloneProcess, client: pulsar.Client,
) -> None:
    topic = unique_topic("interop-to-herald")
    producer = client.create_producer(topic, schema=StringSchema())
    async with AsyncClient(server.service_url) as herald:
        consumer = await herald.subscribe(topic, "s")
        producer.send("from pulsar")
        message = await consumer.receive(timeout=10)
        assert message is not None
        assert (message.value, message.schema_version) == (b"from pulsar", 0)
        await consumer.close()
    producer.close()


async def test_a_herald_producers_messages_carry_their_version_to_a_pulsar_consumer(
    server: StandaloneProcess, client: pulsar.Client,
) -> None:
    topic = unique_topic("interop-to-pulsar")
    consumer = client.subscribe(topic, "s", schema=StringSchema())
    async with AsyncClient(server.service_url) as herald:
        # The Pulsar client's STRING schema carries b"null" as its data, Herald's none: one version.
        producer = await herald.create_producer(topic, schema=HeraldStringSchema())
        await producer.send("from herald")
        await producer.close()
    message = consumer.receive(timeout_millis=RECEIVE_MS)
    assert message.value() == "from herald"
    version = message.schema_version()
    assert (version.encode("latin-1") if isinstance(version, str) else version) == (0).to_bytes(8, "big")
    consumer.close()
