"""Acknowledged means durable: SIGKILL `herald standalone` in the middle of a produce loop, restart
it on the same data dir, and every message whose send was acknowledged is consumed afterwards."""

from __future__ import annotations

import asyncio
import threading

from herald.client import AsyncClient, InitialPosition
from herald.common.codec.message_id import MessageId

from tests.conftest import StandaloneProcess


async def _produce_until_killed(url: str, acked: dict[int, MessageId], started: threading.Event) -> None:
    async with AsyncClient(url, operation_timeout=5) as client:
        producer = await client.create_producer("durable", send_timeout=3, block_if_queue_full=True)
        failed = asyncio.Event()

        def record(future: asyncio.Future[MessageId], n: int) -> None:
            if future.exception() is None:
                acked[n] = future.result()
            else:
                failed.set()  # the server is gone: sends now fail or time out

        i = 0
        try:
            while not failed.is_set():
                future = await producer.send_async(f"m-{i}".encode())
                future.add_done_callback(lambda f, n=i: record(f, n))
                i += 1
                if i == 2000:
                    started.set()
                if i % 500 == 0:
                    await asyncio.sleep(0)  # let receipts in
        except Exception:
            return  # the server died under us: what was acked is recorded


def test_every_acknowledged_message_survives_sigkill(standalone: StandaloneProcess) -> None:
    acked: dict[int, MessageId] = {}
    started = threading.Event()
    producing = threading.Thread(
        target=lambda: asyncio.run(
            asyncio.wait_for(_produce_until_killed(standalone.service_url, acked, started), 60)
        ),
        daemon=True,
    )
    producing.start()
    assert started.wait(60), "producer never got going"
    while len(acked) < 1000:
        producing.join(0.01)
    standalone.kill()
    producing.join(60)
    acknowledged = dict(acked)
    assert len(acknowledged) >= 1000

    standalone.start()

    async def consume_all() -> list[bytes]:
        async with AsyncClient(standalone.service_url) as client:
            consumer = await client.subscribe("durable", "check", initial_position=InitialPosition.Earliest)
            values = []
            while (message := await consumer.receive(timeout=5)) is not None:
                values.append(message.value)
                consumer.acknowledge(message)
            return values

    values = asyncio.run(consume_all())
    survivors = set(values)
    lost = [i for i in acknowledged if f"m-{i}".encode() not in survivors]
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
    # Send order is kept: the stored sequence is m-0, m-1, ... with no gaps up to the last stored.
    assert values == [f"m-{i}".encode() for i in range(len(values))]
