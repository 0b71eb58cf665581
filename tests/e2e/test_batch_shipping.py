"""A producer whose application awaits its sends does not sit out the batching delay (client/linger.py),
against a real `herald standalone`: an awaited window of send_async, tasks awaiting send() together,
a partitioned producer, key-based batching and the blocking facade's sends from another thread. Each
producer is made with an hour's max publish delay, so only the end-of-turn rule can ship its batch
within the tests' deadline."""

from __future__ import annotations

import asyncio
import threading

from herald.client import AsyncClient, BatchingType, Client, HeraldError, MessageId
from herald.client.admin import AdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

HOUR = 3600.0
DEADLINE = 30.0  # seconds to wait for receipts: far below the delay, far above a loaded machine's round trip


def entries(ids: list[MessageId]) -> set[tuple[int, int, int]]:
    return {(message_id.partition, message_id.ledger_id, message_id.entry_id) for message_id in ids}


async def test_windows_of_awaited_sends_are_stored_without_waiting_out_the_batching_delay(
    client: AsyncClient,
) -> None:
    producer = await client.create_producer(unique_topic("window"), batching_max_publish_delay=HOUR)
    for window in range(3):
        futures = [await producer.send_async(b"%d-%d" % (window, i)) for i in range(50)]
        ids = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE)
        # One entry per window: the window's messages were queued in one turn.
        assert len(entries(ids)) == 1 and [message_id.batch_index for message_id in ids] == list(range(50))
    await producer.close()


async def test_tasks_awaiting_send_together_share_one_entry(client: AsyncClient) -> None:
    producer = await client.create_producer(unique_topic("send-tasks"), batching_max_publish_delay=HOUR)
    ids = await asyncio.wait_for(asyncio.gather(*(producer.send(b"%d" % i) for i in range(20))), DEADLINE)
    assert len(entries(ids)) == 1  # each send() used to ship an entry of its own
    assert sorted(message_id.batch_index for message_id in ids) == list(range(20))
    await producer.close()


async def test_a_partitioned_producers_awaited_window_is_stored_without_waiting_out_the_delay(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("window-partitioned")
    await admin.create_topic(topic, partitions=3)
    producer = await client.create_producer(topic, batching_max_publish_delay=HOUR)
    keys = [f"key-{i}" for i in range(30)]
    futures = [await producer.send_async(b"v", key=key) for key in keys]
    ids = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE)
    assert len({message_id.partition for message_id in ids}) > 1
    assert len(entries(ids)) == len({message_id.partition for message_id in ids})  # one entry per partition
    await producer.close()


async def test_key_based_batches_of_an_awaited_window_ship_without_waiting_out_the_delay(
    client: AsyncClient,
) -> None:
    producer = await client.create_producer(unique_topic("window-keyed"), batching_max_publish_delay=HOUR,
                                            batching_type=BatchingType.KeyBased)
    futures = [await producer.send_async(b"v", key=f"k{i % 3}") for i in range(30)]
    ids = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE)
    assert len(entries(ids)) == 3  # one entry per key
    await producer.close()


def test_blocking_facade_sends_from_another_thread_are_stored_without_waiting_out_the_delay(
    shared_standalone: StandaloneProcess,
) -> None:
    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(unique_topic("window-sync"), batching_max_publish_delay=HOUR)
        outcomes: list[tuple[HeraldError | None, MessageId | None]] = []
        done = threading.Event()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            outcomes.append((error, message_id))
            if len(outcomes) == 20:
                done.set()

        for i in range(20):
            producer.send_async(b"%d" % i, callback)
        assert done.wait(DEADLINE), f"only {len(outcomes)} of 20 sends settled within {DEADLINE}s"
        assert [error for error, _ in outcomes] == [None] * 20
        producer.close()


async def test_a_batch_holds_at_most_half_of_max_pending_messages(client: AsyncClient) -> None:
    # A batch as large as the whole pending room (batching_max_messages 1000 >= max pending 100)
    # left the application waiting for its receipt before the next could fill: one entry per
    # storage round trip. Half the room: one batch fills while the one before it is stored.
    producer = await client.create_producer(unique_topic("half-pending"), max_pending_messages=100,
                                            block_if_queue_full=True, batching_max_publish_delay=HOUR)
    futures = [await producer.send_async(b"%d" % i) for i in range(1000)]
    ids = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE)
    sizes: dict[tuple[int, int, int], int] = {}
    for message_id in ids:
        entry = (message_id.partition, message_id.ledger_id, message_id.entry_id)
        sizes[entry] = sizes.get(entry, 0) + 1
    assert max(sizes.values()) <= 50 and sum(sizes.values()) == 1000
    await producer.close()
