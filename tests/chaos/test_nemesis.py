"""The seeded nemesis (issue 21): a workload of named producers and live consumers on a plain and a
partitioned topic while a fault schedule drawn from the seed kills, pauses, restarts, corrupts and
partitions the processes of a cluster whose every connection crosses a fault proxy; after healing,
an independent checker reads everything back and counts violations, which must all be 0.

The metadata store is a 3-member etcd cluster (production's) for odd seeds and one Redis for even
ones, unless HERALD_NEMESIS_METADATA names one. CI runs 2 short seeds (7 on etcd, 8 on Redis: between
them kill, pause, restart, restart-all and partition; test_chaos.py corrupts); `make test-soak`
(HERALD_SOAK=1) runs seeds 0-99 with longer schedules. HERALD_NEMESIS_SEEDS picks seeds ("0-99",
"7", "3,9,12"); HERALD_NEMESIS_SUMMARY names a file that gets one JSON line per run (seed, store,
faults by kind, counts) for the soak's closing note."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from tests.chaos.nemesis.checker import check, read_back
from tests.chaos.nemesis.executor import Executor
from tests.chaos.nemesis.history import FaultHistory
from tests.chaos.nemesis.schedule import Shape, draw
from tests.chaos.nemesis.topology import Topology, TopologySettings
from tests.chaos.nemesis.workload import Workload, WorkloadSpec
from tests.helpers import eventually_sync

SOAK = os.environ.get("HERALD_SOAK") == "1"
SECONDS = 60.0 if SOAK else 15.0  # how long the schedule spreads its faults
FAULTS = 10 if SOAK else 4

pytestmark = pytest.mark.timeout(1200 if SOAK else 400)


def seeds() -> list[int]:
    spec = os.environ.get("HERALD_NEMESIS_SEEDS", "0-99" if SOAK else "7,8")
    out: list[int] = []
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def metadata_of(seed: int) -> str:
    return os.environ.get("HERALD_NEMESIS_METADATA") or ("etcd" if seed % 2 else "redis")


def _replay(seed: int) -> str:
    return (f"replay: HERALD_NEMESIS_SEEDS={seed} make test-soak   (or: HERALD_NEMESIS_SEEDS={seed} "
            f"{'HERALD_SOAK=1 ' if SOAK else ''}python -m pytest tests/chaos/test_nemesis.py -k 'seed{seed}]')")


@pytest.mark.parametrize("seed", seeds(), ids=lambda seed: f"seed{seed}")
def test_nemesis(seed: int, tmp_path: Path) -> None:
    topology = Topology(TopologySettings(tmp_path, metadata=metadata_of(seed)))
    metadata = tuple(m.process.name for m in topology.metadata.members)
    shape = Shape(tuple(m.process.name for m in topology.storage), tuple(m.process.name for m in topology.brokers),
                  (*metadata, "lookup", "proxy-0"), topology.settings.write_quorum, metadata)
    faults = draw(seed, shape, SECONDS, FAULTS)
    history = FaultHistory(seed)
    executor: Executor | None = None
    # The workload's clients log beside the processes: a stalled subscription's post-mortem needs its
    # consumers' reconnects, which pytest would keep only at WARNING and only in a failure's report.
    client_log = logging.FileHandler(tmp_path / "client.log")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    client_logger = logging.getLogger("herald.client")
    client_logger.addHandler(client_log)
    client_logger.setLevel(logging.INFO)
    topology.start()
    try:
        workload = Workload(topology.service_url, topology.proxy_url, WorkloadSpec()).start()
        eventually_sync(workload.acked, "the workload makes progress before the faults", until=lambda n: n >= 200,
                        timeout=120)
        executor = Executor(topology, faults, history).start()
        executor.join(SECONDS + 300)
        time.sleep(max(0.0, SECONDS - (time.monotonic() - history.started)))  # the workload runs the whole span
        executor.heal_all()
        context = (f"seed {seed} ({metadata_of(seed)} metadata); schedule:\n"
                   + "\n".join(f.describe() for f in faults) + "\n" + history.render())
        assert executor.error is None, f"the nemesis failed: {executor.error!r}\n{context}\n{_replay(seed)}"
        before = workload.acked()
        eventually_sync(workload.acked, "the healed cluster acknowledges again", until=lambda n: n >= before + 200,
                        timeout=180)
        workload.stop_producing()
        workload.drain(120)
        workload.stop()
        workload.save(tmp_path / "workload.json")
        recorded = json.loads((tmp_path / "workload.json").read_text())  # the checker gets plain data only
        retried: list[str] = []
        stored = read_back(topology.service_url, recorded, retried=retried)
        (tmp_path / "read-back.json").write_text(json.dumps(stored))  # for a failure's post-mortem
        report = check(recorded, stored)
        report.read_retries = retried
        summary = os.environ.get("HERALD_NEMESIS_SUMMARY")
        if summary:
            with open(summary, "a") as out:
                out.write(json.dumps({"seed": seed, "metadata": metadata_of(seed), "faults": history.injected_by_kind(),
                                      "unsupported": history.unsupported_by_kind(), "acked": report.acked,
                                      "stored": report.stored, "duplicate_receipts": report.duplicate_receipts,
                                      "redelivered_to_checker": report.redelivered,
                                      "read_retries": retried,
                                      "violations": report.counts}) + "\n")
        assert report.ok, f"{report.render()}\n{context}\n{_replay(seed)}"
    finally:
        if executor is not None:
            executor.stop()
        history.save(tmp_path / "faults.json")  # beside the processes' logs, failing or not
        topology.stop()
        client_logger.removeHandler(client_log)
        client_logger.setLevel(logging.NOTSET)
        client_log.close()
