"""TableView against a real `herald standalone` (asyncio and blocking APIs): creation returns caught
up with the topic as it was; it converges to the latest value per key while several producers
write (deletes applied, every partition); listeners see each later update and one that raises does
not stop the view; messages without a key are not rows; after a compaction it is built from the
compacted view, also when the topic's last message was a delete."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from herald.client import AsyncClient, Client, InvalidArgumentError, StringSchema
from herald.client.admin import AdminClient

from tests.conftest import StandaloneProcess, service_env
from tests.helpers import eventually, eventually_sync, unique_topic


async def publish(client: AsyncClient, topic: str, items: list[tuple[str | None, bytes]]) -> None:
    """Each (key, value) in order, batched (one flush at the end); b"" deletes the key."""
    producer = await client.create_producer(topic, batching_max_publish_delay=60)
    for key, value in items:
        await producer.send_async(value, key=key)
    await producer.flush()
    await producer.close()


def latest(items: list[tuple[str | None, bytes]]) -> dict[str, bytes]:
    table: dict[str, bytes] = {}
    for key, value in items:
        if key is None:
            continue
        if value:
            table[key] = value
        else:
            table.pop(key, None)
    return table


async def test_creation_returns_caught_up_with_the_topic(client: AsyncClient) -> None:
    topic = unique_topic("caught-up")
    items: list[tuple[str | None, bytes]] = [(f"k{i % 7}", f"v{i}".encode()) for i in range(50)]
    items += [("k3", b""), (None, b"no key: not a row"), ("k5", b"")]
    await publish(client, topic, items)
    async with await client.create_table_view(topic) as view:
        assert dict(view.items()) == latest(items)  # at once: creation waited for it
        assert len(view) == 5 and "k3" not in view and view.get("k3") is None
        assert view["k0"] == b"v49" and set(view.keys()) == {"k0", "k1", "k2", "k4", "k6"}


async def test_an_empty_topic_gives_an_empty_view_that_fills_from_the_tail(client: AsyncClient) -> None:
    topic = unique_topic("empty")
    async with await client.create_table_view(topic, schema=StringSchema()) as view:
        assert len(view) == 0
        producer = await client.create_producer(topic, schema=StringSchema())
        await producer.send("hello", key="greeting")
        await eventually(lambda: view.get("greeting"), "the tail's update", until=lambda v: v == "hello")
        await producer.close()


@pytest.mark.parametrize("compacted", [False, True], ids=["log", "compacted-then-log"])
async def test_it_converges_while_several_producers_write_every_partition(
    client: AsyncClient, admin: AdminClient, compacted: bool,
) -> None:
    # compacted-then-log needs the compactor (`herald admin topics compact`): the view is loaded
    # from each partition's compacted view, then the log the producers keep writing.
    topic = unique_topic("converges")
    await admin.create_topic(topic, partitions=3)
    written: list[list[tuple[str | None, bytes]]] = [
        [(f"p{p}-k{i % 40}", f"p{p}-v{i}".encode()) if i % 9 else (f"p{p}-k{i % 40}", b"") for i in range(600)]
        for p in range(4)
    ]  # each producer its own keys: its order is the topic's order for them; every 9th is a delete

    async def produce(items: list[tuple[str | None, bytes]]) -> None:
        producer = await client.create_producer(topic, batching_max_publish_delay=0.005)
        for key, value in items:
            await producer.send_async(value, key=key)
        await producer.flush()
        await producer.close()

    first_half = [items[:300] for items in written]
    await asyncio.gather(*(publish(client, topic, items) for items in first_half))
    if compacted:
        await compact(admin, topic, partitions=3)
    writers = [asyncio.ensure_future(produce(items[300:])) for items in written]
    view = await client.create_table_view(topic)  # while they write
    try:
        await asyncio.gather(*writers)
        expected: dict[str, bytes] = {}
        for items in written:
            expected.update(latest(items))
        await eventually(lambda: dict(view.items()), "the view converging to the latest value per key",
                         until=lambda table: table == expected)
    finally:
        await view.close()


async def test_listeners_see_every_later_update_and_one_that_raises_does_not_stop_the_view(
    client: AsyncClient,
) -> None:
    topic = unique_topic("listeners")
    await publish(client, topic, [("a", b"1"), ("b", b"2")])
    view = await client.create_table_view(topic)
    told: list[tuple[str, Any]] = []
    snapshot: list[tuple[str, Any]] = []
    raised: list[str] = []

    def failing(key: str, value: Any) -> None:
        raised.append(key)
        raise RuntimeError("a listener's bug")

    view.listen(failing)
    view.listen(lambda key, value: told.append((key, value)))
    await view.for_each_and_listen(lambda key, value: snapshot.append((key, value)))
    assert snapshot == [("a", b"1"), ("b", b"2")]
    await publish(client, topic, [("a", b"3"), ("b", b""), ("c", b"4")])
    await eventually(lambda: len(told), "the listener told of three updates", until=lambda n: n >= 3)
    assert told == [("a", b"3"), ("b", None), ("c", b"4")]  # None: removed
    assert snapshot[2:] == told and raised == ["a", "b", "c"]
    assert dict(view.items()) == {"a": b"3", "c": b"4"}
    each: list[str] = []
    await view.for_each(lambda key, value: each.append(key))
    assert each == ["a", "c"]
    await view.close()
    await view.close()  # twice: nothing


async def test_a_table_view_of_a_non_persistent_topic_is_refused(client: AsyncClient) -> None:
    with pytest.raises(InvalidArgumentError, match="non-persistent and stores nothing"):
        await client.create_table_view("non-persistent://public/default/np-view")


def test_the_blocking_table_view(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("blocking")
    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(topic, schema=StringSchema(), batching_enabled=False)
        producer.send("one", key="x")
        with client.create_table_view(topic, schema=StringSchema()) as view:
            assert view.get("x") == "one" and "x" in view and len(view) == 1
            threads: list[str] = []
            told: list[tuple[str, Any]] = []

            def listener(key: str, value: Any) -> None:
                threads.append(threading.current_thread().name)
                told.append((key, value))

            view.listen(listener)
            producer.send("two", key="x")
            producer.send("", key="x")
            eventually_sync(lambda: list(told), "the blocking listener", until=lambda t: len(t) >= 2)
            assert told == [("x", "two"), ("x", None)]
            assert all(name.startswith("herald-table-view") for name in threads)
            assert view.items() == [] and view.keys() == []
        producer.close()


# ---- built from a compacted view (needs the compactor: `herald admin topics compact`) ----

async def compact(admin: AdminClient, topic: str, partitions: int = 0) -> None:
    """Compact (each partition of a partitioned topic) and wait until each one succeeded."""
    await admin.compact_topic(topic)
    for name in [f"{topic}-partition-{i}" for i in range(partitions)] or [topic]:
        await eventually(lambda name=name: admin.compaction_status(name), f"the compaction of {name}",
                         until=lambda status: status.status == "SUCCESS")


async def test_after_a_compaction_it_is_built_from_the_view_even_when_the_last_message_deleted_a_key(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = unique_topic("compacted-view")
    items: list[tuple[str | None, bytes]] = [(f"k{i % 10}", f"v{i}".encode()) for i in range(200)]
    await publish(client, topic, items)
    # The topic's last message: a delete, in an entry of its own, which the compacted view drops.
    producer = await client.create_producer(topic, batching_enabled=False)
    await producer.send(b"", key="k9")
    await producer.close()
    items.append(("k9", b""))
    await compact(admin, topic)
    async with await client.create_table_view(topic) as view:  # returns: nothing is left to read up to it
        assert dict(view.items()) == latest(items)


# ---- after retention deleted the ledgers before the compaction horizon ----

@pytest.fixture
def trimming_standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    """A standalone of its own that keeps nothing consumed (retention 0 / 0), rolls a ledger every
    10 entries and runs retention every 0.2 s: compacted ledgers go soon after a compaction."""
    env = service_env()
    env.update({
        "HERALD_BROKER_MAX_ENTRIES_PER_LEDGER": "10", "HERALD_BROKER_MIN_LEDGER_ROLLOVER_SECONDS": "0",
        "HERALD_BROKER_RETENTION_TIME_SECONDS": "0", "HERALD_BROKER_RETENTION_SIZE_BYTES": "0",
        "HERALD_BROKER_RETENTION_CHECK_INTERVAL": "0.2",
    })
    server = StandaloneProcess(tmp_path / "data", env)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_new_view_holds_every_key_after_retention_deleted_the_compacted_ledgers(
    trimming_standalone: StandaloneProcess,
) -> None:
    url = trimming_standalone.service_url
    async with AsyncClient(url) as client, AdminClient(url) as admin:
        topic = unique_topic("trimmed-view")
        # Compacted while empty: from then on the compaction cursor holds what it has not read, so
        # retention 0 / 0 deletes nothing before the next compaction.
        producer = await client.create_producer(topic, batching_enabled=False)
        await compact(admin, topic)
        items: list[tuple[str | None, bytes]] = [(f"k{i}", f"v{i}".encode()) for i in range(60)]  # six ledgers
        items += [(f"k{i}", f"v{i}-again".encode()) for i in range(0, 60, 7)]
        items += [("k5", b""), ("k13", b"")]  # deletes
        for key, value in items:
            await producer.send(value, key=key)
        before = (await admin.compaction_status(topic)).finished_at
        await admin.compact_topic(topic)
        await eventually(lambda: admin.compaction_status(topic), "the second compaction",
                         until=lambda status: status.status == "SUCCESS" and status.finished_at > before)
        assert sum(ledger.entries for ledger in (await admin.internal_stats(topic)).ledgers) >= len(items)

        async def trimmed() -> bool:  # at most the horizon's ledger is left of what was compacted
            return sum(ledger.entries for ledger in (await admin.internal_stats(topic)).ledgers) <= 10

        await eventually(trimmed, "retention to delete the ledgers before the horizon")
        tail: list[tuple[str | None, bytes]] = [("k1", b"v1-tail"), ("k99", b"v99")]
        for key, value in tail:
            await producer.send(value, key=key)
        await producer.close()
        async with await client.create_table_view(topic) as view:  # every key, not just the kept ledgers'
            assert dict(view.items()) == latest(items + tail)
            assert len(view) == 60 - 2 + 1
