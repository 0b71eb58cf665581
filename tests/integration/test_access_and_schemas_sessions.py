"""Producer access modes and topic schemas through the core's protocol-neutral sessions, over a real
metadata store and storage node, on stored and non-persistent topics: fencing closes the producers it
takes the topic from and a fenced one cannot come back with its old epoch; a waiting producer gets
the topic when its holder leaves, or is refused when the topic is unloaded; a consumer with another
schema is refused before its subscription is made."""

from __future__ import annotations

import asyncio

import pytest
from herald.broker.core.access_modes import ProducerAccessMode
from herald.broker.core.admission import Admission
from herald.broker.core.consumer_session import ConsumerSession, SubscribeRequest
from herald.broker.core.producer_session import ProducerSession, Registered
from herald.broker.core.service import BrokerService
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import (
    IncompatibleSchemaError,
    ProducerBusyError,
    ProducerFencedError,
    ServiceNotReadyError,
)

from tests.integration import test_broker_core
from tests.integration.test_broker_core import DEADLINE, Cluster

cluster = test_broker_core.cluster

TOPICS = ["persistent://public/default/access", "non-persistent://public/default/access"]
Mode = ProducerAccessMode


async def register(service: BrokerService, topic: str, name: str, mode: Mode = Mode.SHARED,
                   topic_epoch: int | None = None, **options: object) -> tuple[ProducerSession, Registered]:
    session = ProducerSession(service, Admission(service.settings))
    registered = await session.register(topic, name, {}, access_mode=mode, topic_epoch=topic_epoch,
                                        **options)  # type: ignore[arg-type]
    return session, registered


@pytest.mark.parametrize("topic", TOPICS)
async def test_fencing_closes_the_holders_and_their_old_epoch_is_refused(cluster: Cluster, topic: str) -> None:
    service = await cluster.broker()
    shared, first = await register(service, topic, "shared")
    assert first.topic_epoch is None
    await shared.close(drain=False)
    old, held = await register(service, topic, "old", Mode.WAIT_FOR_EXCLUSIVE)  # nobody else: no wait
    assert held.topic_epoch == 0
    new, taken = await register(service, topic, "new", Mode.EXCLUSIVE_WITH_FENCING)
    assert taken.topic_epoch == 1 and old.closed and not new.closed
    await old.close(drain=False)  # what the front end does once it told its client
    with pytest.raises(ProducerFencedError, match="epoch moved on to 1"):
        await register(service, topic, "old", Mode.EXCLUSIVE, topic_epoch=0)
    with pytest.raises(ProducerBusyError, match="exclusive producer"):
        await register(service, topic, "shared")


@pytest.mark.parametrize("topic", TOPICS)
async def test_a_waiting_producer_gets_the_topic_when_its_holder_leaves(cluster: Cluster, topic: str) -> None:
    service = await cluster.broker()
    holder, _ = await register(service, topic, "holder", Mode.EXCLUSIVE)
    queued = asyncio.Event()
    waiting = asyncio.ensure_future(register(service, topic, "waiter", Mode.WAIT_FOR_EXCLUSIVE,
                                             on_queued=queued.set))
    await asyncio.wait_for(queued.wait(), DEADLINE)
    assert not waiting.done()
    await holder.close(drain=False)
    waiter, registered = await asyncio.wait_for(waiting, DEADLINE)
    assert registered.producer_name == "waiter" and registered.topic_epoch == 1
    await waiter.close(drain=False)


async def test_a_waiting_producer_is_refused_when_its_topic_is_unloaded(cluster: Cluster) -> None:
    service = await cluster.broker()
    topic = TOPICS[0]
    await register(service, topic, "holder", Mode.EXCLUSIVE)
    queued = asyncio.Event()
    waiting = asyncio.ensure_future(register(service, topic, "waiter", Mode.WAIT_FOR_EXCLUSIVE,
                                             on_queued=queued.set))
    await asyncio.wait_for(queued.wait(), DEADLINE)
    await service.unload_topic(topic)
    with pytest.raises(ServiceNotReadyError, match="unloaded"):
        await asyncio.wait_for(waiting, DEADLINE)


async def test_schemas_through_the_sessions(cluster: Cluster) -> None:
    service = await cluster.broker()
    topic = "persistent://public/default/schemas"
    json_schema = SchemaInfo("JSON", b'{"type": "record", "name": "Order"}')
    producer, registered = await register(service, topic, "p", schema=json_schema)
    assert registered.schema_version == 0
    _, plain = await register(service, topic, "bytes")
    assert plain.schema_version is None
    with pytest.raises(IncompatibleSchemaError):
        await register(service, topic, "q", schema=SchemaInfo("STRING"))
    consumer = ConsumerSession(service, Admission(service.settings))
    with pytest.raises(IncompatibleSchemaError):
        await consumer.subscribe(SubscribeRequest(topic, "refused", schema=SchemaInfo("STRING")))
    loaded = await service.get_topic(topic)
    assert "refused" not in loaded.list_subscriptions()  # refused before the subscription was made
    await consumer.subscribe(SubscribeRequest(topic, "same", schema=json_schema))
    assert (await service.schemas.get(topic))[1] == json_schema
    await consumer.close()
    await producer.close(drain=False)


@pytest.mark.parametrize("topic", TOPICS)
async def test_a_deleted_topic_forgets_its_schema_and_epoch(cluster: Cluster, topic: str) -> None:
    service = await cluster.broker()
    producer, registered = await register(service, topic, "p", Mode.EXCLUSIVE, schema=SchemaInfo("STRING"))
    assert registered.topic_epoch == 0
    await producer.close(drain=False)
    await service.delete_topic(topic)
    # Made again under the name: any schema, and the epochs start over.
    _, again = await register(service, topic, "p", Mode.EXCLUSIVE, schema=SchemaInfo("JSON", b"{}"))
    assert again.topic_epoch == 0 and again.schema_version == 0
