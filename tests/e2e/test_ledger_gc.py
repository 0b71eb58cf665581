"""Ledger garbage collection (storage.node.gc): a ledger whose delete never reached a storage node
(it was down) is deleted there once its metadata is gone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from herald.common.errors import ConnectionError_
from herald.local_cluster import LocalCluster
from herald.metadata.redis import RedisMetadataStore
from herald.storage.client.storage_client import StorageClient

FAST_GC = {"HERALD_STORAGE_GC_INTERVAL": "0.5", "HERALD_STORAGE_GC_GRACE": "1"}


async def last_entry_held(client: StorageClient, address: str, ledger_id: int) -> int | None:
    """The node's last entry of the ledger (-1: none held); None while it does not answer yet."""
    try:
        return int((await client.node(address).last_add_confirmed(ledger_id)).last_entry_id)
    except ConnectionError_:
        return None  # just restarted: the connection is still being made again


def test_a_ledger_deleted_while_its_node_was_down_is_collected_there(
    make_local_cluster: Callable[..., LocalCluster], herald_env: dict[str, str],
) -> None:
    cluster = make_local_cluster(brokers=1, storage_nodes=2, ensemble_size=2, write_quorum=2, ack_quorum=2,
                                 extra_env={**herald_env, **FAST_GC})
    down, up = cluster.storage

    async def scenario() -> None:
        store = RedisMetadataStore(cluster.metadata_url)
        await store.start()
        client = StorageClient(store, [down.address, up.address], discover=False, operation_timeout=5)
        try:
            handle = await client.create_ledger(2, 2, 2)
            for i in range(20):
                await handle.add_entry(b"x" * 10_000 + b"%d" % i)
            await handle.close()
            ledger_id = handle.ledger_id
            assert (await client.node(down.address).last_add_confirmed(ledger_id)).last_entry_id == 19
            down.stop()
            await client.delete_ledger(ledger_id)  # its delete on the stopped node fails (logged)
            await client.close()
            down.start()
            client = StorageClient(store, [down.address, up.address], discover=False)
            deadline = time.monotonic() + 60
            while await last_entry_held(client, down.address, ledger_id) != -1:
                assert time.monotonic() < deadline, f"ledger {ledger_id} is still held by {down.address}"
                await asyncio.sleep(0.2)
        finally:
            await client.close()
            await store.close()

    asyncio.run(scenario())
    assert "ledger garbage collection deleted 1 ledgers" in down.log_path.read_text()
