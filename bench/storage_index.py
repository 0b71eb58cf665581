"""The storage node's entry index at scale: restart time, resident memory, lookup cost, checkpoint cost.

For each --counts N it builds a data directory holding N entries (ledgers of --per-ledger entries,
synthetic entry log locations: a restart reads the index, not the entry logs), then in a fresh
process opens a LedgerStore on it and reports how long open() took, the anonymous and file-backed
resident memory after it, and the cost of random point lookups and of 1024-entry range lookups.
It also times one checkpoint's index write at that size (the LMDB commit of --batch new entries;
with --services pointing at a tree from before LMDB, the whole index snapshot).

    .venv/bin/python bench/storage_index.py --counts 1000000 10000000
    .venv/bin/python bench/storage_index.py --counts 1000000 --services /tmp/old/services   # before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# Runs in the process under test (PYTHONPATH selects the code): build, or open and measure.
CHILD = r"""
import asyncio, json, random, sys, time
from pathlib import Path
from array import array

mode, data_dir, count, per_ledger, batch = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
ledgers = max(1, count // per_ledger)

def rss(kind):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(kind + ":"):
            return int(line.split()[1]) * 1024
    return 0

def location(ledger, entry):
    return (1 << 40) + ledger * per_ledger + entry  # in entry log file 1

try:
    from herald.storage.node.index_db import DIRECTORY, CheckpointBatch, IndexDB, LedgerMeta
    LMDB = True
except ImportError:
    LMDB = False
from herald.storage.node.index import LedgerIndex, Snapshot, save_snapshot

if mode == "build":
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    if LMDB:
        db = IndexDB(Path(data_dir) / DIRECTORY, 1 << 40)
        db.open()
        for ledger in range(ledgers):
            b = CheckpointBatch(0)
            b.locations[ledger] = {e: location(ledger, e) for e in range(per_ledger)}
            b.ledgers[ledger] = LedgerMeta(per_ledger - 1, per_ledger - 2, False)
            db.commit(b)
        db.close()
    else:
        snap = Snapshot(0, {l: LedgerIndex(array("Q", (location(l, e) for e in range(per_ledger))), per_ledger - 2)
                            for l in range(ledgers)})
        save_snapshot(Path(data_dir), snap)
    sys.exit(0)

from herald.storage.node.ledger_store import LedgerStore
from herald.storage.node.settings import StorageSettings

async def main():
    store = LedgerStore(StorageSettings(data_dir=data_dir, checkpoint_interval=3600.0, metrics_port=-1,
                                        compaction_threshold=0.0))
    anon0 = rss("RssAnon")
    started = time.perf_counter()
    await store.open()
    opened = time.perf_counter() - started
    out = {"open_s": opened, "rss_anon_mib": rss("RssAnon") / 2**20,
           "rss_anon_growth_mib": (rss("RssAnon") - anon0) / 2**20,
           "rss_file_mib": rss("RssFile") / 2**20}
    index = store._ledgers.index
    rnd = random.Random(1)
    keys = [(rnd.randrange(ledgers), rnd.randrange(per_ledger)) for _ in range(100_000)]
    started = time.perf_counter()
    for l, e in keys:
        assert index[l].get(e) == location(l, e)
    out["lookup_us"] = (time.perf_counter() - started) / len(keys) * 1e6
    started = time.perf_counter()
    for l, e in keys[:1000]:
        store._ledgers.lookup(index[l], e, e + 1023)
    out["range1024_us"] = (time.perf_counter() - started) / 1000 * 1e6
    # One checkpoint's index write: `batch` new entries in a new ledger.
    new = ledgers + 1
    if LMDB:
        b = CheckpointBatch(0)
        b.locations[new] = {e: location(new, e) for e in range(batch)}
        b.ledgers[new] = LedgerMeta(batch - 1, -1, False)
        started = time.perf_counter()
        store._index_db.commit(b)
    else:
        snap = store._ledgers.snapshot(0)
        snap.ledgers[new] = LedgerIndex(array("Q", (location(new, e) for e in range(batch))))
        started = time.perf_counter()
        save_snapshot(Path(data_dir), snap)
    out["checkpoint_index_write_s"] = time.perf_counter() - started
    out["rss_anon_after_mib"] = rss("RssAnon") / 2**20
    await store.close(checkpoint=False)
    print(json.dumps(out))

asyncio.run(main())
"""


def run(services: str, *args: object) -> str:
    env = dict(os.environ, PYTHONPATH=services)
    done = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], env=env, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--per-ledger", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100_000, help="entries one checkpoint writes")
    parser.add_argument("--services", default=os.path.join(os.path.dirname(__file__), "..", "services"))
    args = parser.parse_args()
    for count in args.counts:
        with tempfile.TemporaryDirectory(prefix="herald-bench-index-") as data:
            started = time.perf_counter()
            run(args.services, "build", data, count, args.per_ledger, args.batch)
            built = time.perf_counter() - started
            result = json.loads(run(args.services, "open", data, count, args.per_ledger, args.batch))
            size = sum(os.path.getsize(os.path.join(root, f)) for root, _, fs in os.walk(data) for f in fs)
            result.update(entries=count, build_s=round(built, 1), index_bytes_on_disk=size)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}), flush=True)


if __name__ == "__main__":
    main()
