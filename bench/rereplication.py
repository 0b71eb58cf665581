"""Time to re-replicate a drained storage node (herald.autorecovery): a local cluster of 3 storage
nodes, ledgers 2/2/2 written straight through the storage client (each ledger on the victim and one
other node, `--entry-size` entries until `--gigabytes` are on the victim), closed; a 4th node added;
the victim drained. The figure is the time from the drain to no ledger naming the victim (every
entry copied from the surviving replica, read back and compared, the ensemble updated by CAS).
Run under `flock /work/bench.lock` (shared machine).

    python bench/rereplication.py --gigabytes 1

Appends to bench/results/rereplication.jsonl and prints the figure with the machine's limits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from herald.local_cluster import ClusterSettings, LocalCluster
from herald.metadata.redis import RedisMetadataStore
from herald.storage.client.ledger_metadata import LedgerMetadata
from herald.storage.client.storage_client import StorageClient
from herald.storage.membership import mark_draining

RESULTS = Path(__file__).resolve().parent / "results" / "rereplication.jsonl"


async def fill(cluster: LocalCluster, victim: str, total: int, entry_size: int, per_ledger: int) -> int:
    """Ledgers on the victim and one other node until `total` bytes; returns the ledgers written."""
    store = RedisMetadataStore(cluster.metadata_url)
    await store.start()
    others = [node.address for node in cluster.storage if node.address != victim]
    client = StorageClient(store, [victim, *others], discover=False)
    payload = os.urandom(entry_size)
    written = ledgers = 0
    try:
        while written < total:
            client.pool.use_registered([victim, others[ledgers % len(others)]])
            handle = await client.create_ledger(2, 2, 2)
            futures = []
            for _ in range(per_ledger):
                if written >= total:
                    break
                futures.append(asyncio.ensure_future(handle.add_entry(payload)))
                written += entry_size
                if len(futures) >= 64:
                    await asyncio.gather(*futures)
                    futures = []
            await asyncio.gather(*futures)
            await handle.close()
            ledgers += 1
    finally:
        await client.close()
        await store.close()
    return ledgers


async def drain_and_wait(cluster: LocalCluster, victim: str, limit: float) -> float:
    store = RedisMetadataStore(cluster.metadata_url)
    await store.start()
    try:
        started = time.monotonic()
        await mark_draining(store, victim)
        while True:
            found = await store.list("/ledgers/")
            if not any(victim in LedgerMetadata.from_bytes(item.value).all_nodes() for item in found.values()):
                return time.monotonic() - started
            if time.monotonic() - started > limit:
                raise TimeoutError(f"the victim still holds ledgers after {limit} s")
            await asyncio.sleep(0.5)
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--entry-size", type=int, default=256 * 1024)
    parser.add_argument("--entries-per-ledger", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rereplication-"))
    env = {**os.environ, "HERALD_STORAGE_AUTORECOVERY_INTERVAL": "1", "HERALD_STORAGE_REGISTRATION_TTL": "5"}
    cluster = LocalCluster(ClusterSettings(base_dir=str(base), brokers=1, storage_nodes=3, ensemble_size=2,
                                           write_quorum=2, ack_quorum=2, extra_env=env))
    try:
        cluster.start()
        victim = cluster.storage[0].address
        total = int(args.gigabytes * 1024**3)
        t0 = time.monotonic()
        ledgers = asyncio.run(fill(cluster, victim, total, args.entry_size, args.entries_per_ledger))
        fill_seconds = time.monotonic() - t0
        cluster.add_storage_node()
        seconds = asyncio.run(drain_and_wait(cluster, victim, args.timeout))
        result = {
            "bench": "rereplication", "bytes": total, "entry_size": args.entry_size, "ledgers": ledgers,
            "fill_seconds": round(fill_seconds, 1), "rereplication_seconds": round(seconds, 1),
            "mib_per_second": round(total / 1024**2 / seconds, 1), "cpus": os.cpu_count(),
            "load_avg_after": os.getloadavg(), "disk_free_gib": round(shutil.disk_usage(base).free / 1024**3, 1),
            "python": sys.version.split()[0], "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        print(json.dumps(result), flush=True)
        with RESULTS.open("a") as out:
            out.write(json.dumps(result) + "\n")
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
