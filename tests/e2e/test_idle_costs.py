"""What idle consumers cost a broker (issue 20 items 4 and 6): through a real standalone in this
process (its broker's tasks can be counted), a connected consumer that has nothing to receive holds
one broker task (its stream's sender) besides gRPC's own for the stream: no dispatcher read loop,
no separate event or close watcher. Counted, never timed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from herald.client import AsyncClient, AsyncConsumer, ConsumerType, InitialPosition
from herald.standalone import Standalone, StandaloneSettings

from tests.conftest import free_port
from tests.helpers import eventually

CONSUMERS = 30


@pytest.fixture
async def standalone(tmp_path: Path) -> AsyncIterator[Standalone]:
    server = Standalone(StandaloneSettings(
        data_dir=str(tmp_path / "data"), port=free_port(), broker_port=free_port(), storage_port=free_port(),
        proxy_port=-1, metrics_port=-1, pulsar_port=-1, web_port=-1, dlq_worker=False))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def broker_tasks() -> int:
    """Tasks running the broker's code (herald.broker.*), not the client's nor gRPC's."""
    return sum(1 for task in asyncio.all_tasks()
               if getattr(task.get_coro(), "cr_code", None) is not None
               and "herald/broker/" in task.get_coro().cr_code.co_filename)  # type: ignore[union-attr]


async def test_an_idle_consumer_holds_one_broker_task(standalone: Standalone) -> None:
    async with AsyncClient(standalone.service_url) as client:
        warm = await client.subscribe("persistent://public/default/warm", "s", ConsumerType.Shared)
        producer = await client.create_producer("persistent://public/default/warm")
        await producer.send(b"x")
        assert (await warm.receive(timeout=60)) is not None
        before = broker_tasks()
        consumers: list[AsyncConsumer[bytes]] = []
        for i in range(CONSUMERS):
            topic = f"persistent://public/default/idle-{i}"
            sender = await client.create_producer(topic)
            consumer = await client.subscribe(topic, "s", ConsumerType.Exclusive, InitialPosition.Earliest,
                                              receiver_queue_size=10)
            await sender.send(b"hello")
            message = await consumer.receive(timeout=60)
            assert message is not None
            consumer.acknowledge(message)
            await sender.close()
            consumers.append(consumer)
        # Was 4 per consumer: a dispatcher loop, a delivery sender, an event sender, a close watcher.
        await eventually(lambda: broker_tasks() - before <= CONSUMERS + 4, "the idle consumers' tasks gone",
                         until=bool, timeout=60)
        # Idle is not deaf: what comes is delivered, and the broker's events still reach the client.
        producer = await client.create_producer("persistent://public/default/idle-0")
        await producer.send(b"again")
        message = await consumers[0].receive(timeout=60)
        assert message is not None and message.data() == b"again"
        for consumer in consumers:
            await consumer.close()
