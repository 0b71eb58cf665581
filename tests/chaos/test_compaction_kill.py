"""Compaction across a SIGKILL: `herald standalone` killed while a compaction writes its compacted
ledger (the status names the pending ledger) comes back, the topic's next load deletes the
half-written ledger and runs the compaction again to SUCCESS, with exactly the entries holding
each key's latest value. And the large case: many messages over many keys with deletes compacted
while the broker keeps answering (1 million messages over 10,000 keys with HERALD_SOAK=1, make
test-soak; 100,000 in the normal suite), its peak RSS bounded."""

from __future__ import annotations

import asyncio
import random
import resource
from pathlib import Path

import pytest
from herald.client import AsyncClient
from herald.client.admin import AdminClient
from herald.common.codec.message_id import MessageId
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.storage.client.ledger_metadata import ledger_key

from tests.chaos.checker import SOAK
from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_topic

pytestmark = pytest.mark.timeout(1800 if SOAK else 600)


async def produce(service_url: str, topic: str, messages: int, keys: int, batch: int, seed: int,
                  ) -> dict[str, MessageId]:
    """`messages` values over `keys` keys, a tenth of them deletes (empty values), in batches of at
    most `batch`; where each live key's latest value is."""
    rng = random.Random(seed)
    latest: dict[str, MessageId] = {}
    async with AsyncClient(service_url) as client:
        producer = await client.create_producer(topic, batching_max_messages=batch, block_if_queue_full=True,
                                                max_pending_messages=10_000, batching_max_publish_delay=0.01)
        pending: list[tuple[str, bool, asyncio.Future[MessageId]]] = []

        async def settle() -> None:
            for key, delete, future in pending:
                message_id = await future
                if delete:
                    latest.pop(key, None)
                else:
                    latest[key] = message_id
            pending.clear()

        for n in range(messages):
            key = f"key-{rng.randrange(keys)}"
            delete = rng.random() < 0.1
            pending.append((key, delete, await producer.send_async(b"" if delete else b"value-%d" % n, key=key)))
            if len(pending) >= 50_000:
                await settle()  # one producer: receipts come in the topic's order
        await settle()
        await producer.close()
    return latest


async def wait_for_success(admin: AdminClient, topic: str) -> object:
    async def done() -> object:
        status = await admin.compaction_status(topic)
        assert status.status != "ERROR", status.last_error
        return status if status.status == "SUCCESS" else None

    return await eventually(done, f"the compaction of {topic} to succeed", timeout=600, retry=())


async def ledger_exists(data_dir: Path, ledger_id: int) -> bool:
    """Read from the stopped standalone's metadata store: is the ledger still recorded?"""
    store = EmbeddedMetadataStore(str(data_dir / "metadata.db"))
    await store.start()
    try:
        return await store.get(ledger_key(ledger_id)) is not None
    finally:
        await store.close()


async def test_a_compaction_cut_by_sigkill_is_cleaned_up_and_run_again(standalone: StandaloneProcess) -> None:
    topic = unique_topic("compaction-kill")
    # Small batches over many keys: phase two writes thousands of entries, long enough to be caught.
    latest = await produce(standalone.service_url, topic, 100_000, 50_000, batch=20, seed=11)
    async with AdminClient(standalone.service_url) as admin:
        await admin.compact_topic(topic)

        async def writing() -> int | None:
            status = await admin.compaction_status(topic)
            assert status.status == "RUNNING", f"the run ended before it could be killed: {status}"
            return status.pending_ledger_id if status.pending_ledger_id >= 0 else None

        pending = await eventually(writing, "the compaction to write its ledger", interval=0.01, retry=())
    standalone.kill()
    standalone.start()
    async with AdminClient(standalone.service_url) as admin:
        status = await wait_for_success(admin, topic)  # asking loads the topic: the run starts again
        stats = await admin.internal_stats(topic)
    assert status.pending_ledger_id == -1 and status.compacted_ledger_id != pending  # type: ignore[attr-defined]
    assert status.compacted_entries == len({(m.ledger_id, m.entry_id) for m in latest.values()})  # type: ignore[attr-defined]
    assert status.horizon == stats.last_confirmed_entry  # type: ignore[attr-defined]
    standalone.stop()
    assert not await ledger_exists(standalone.data_dir, pending), f"pending ledger {pending} was left behind"
    assert "left by a compaction that did not finish" in standalone.log_path.read_text()


async def test_a_large_topic_is_compacted_to_the_latest_value_of_each_key(standalone: StandaloneProcess) -> None:
    topic = unique_topic("compaction-large")
    messages = 1_000_000 if SOAK else 100_000
    latest = await produce(standalone.service_url, topic, messages, 10_000, batch=1000, seed=19)
    async with AdminClient(standalone.service_url) as admin:
        await admin.compact_topic(topic)
        # The broker keeps answering while it compacts: admin calls go through all along.
        status = await wait_for_success(admin, topic)
        stats = await admin.internal_stats(topic)
    assert status.compacted_entries == len({(m.ledger_id, m.entry_id) for m in latest.values()})  # type: ignore[attr-defined]
    assert status.horizon == stats.last_confirmed_entry  # type: ignore[attr-defined]
    # Generous: the standalone holds its entry cache (64 MiB) and the key map, not the topic.
    assert standalone.proc is not None
    peak = peak_rss_mib(standalone.proc.pid)
    assert peak < 1024, f"standalone peak RSS {peak} MiB"


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a live process (Linux), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
