"""The executor's bookkeeping that runs without a cluster: a fault whose storage setting this
checkout lacks is recorded as unsupported, never pretended; corrupting flips bytes in entry logs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.chaos.nemesis import executor as executor_module
from tests.chaos.nemesis.executor import Executor, corrupt_entry_logs, storage_supports
from tests.chaos.nemesis.history import UNSUPPORTED, FaultHistory
from tests.chaos.nemesis.schedule import Fault
from tests.chaos.nemesis.topology import Topology, TopologySettings


def test_storage_supports_reads_the_storage_settings() -> None:
    assert storage_supports("data_dir")
    assert not storage_supports("no_such_setting")


def test_a_fault_without_its_storage_setting_is_recorded_unsupported(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(executor_module.SETTING_FAULTS, "disk-full", ("no_such_setting", "--no-such-flag", "1"))
    topology = Topology(TopologySettings(tmp_path))  # never started: an unsupported fault touches nothing
    history = FaultHistory(seed=5)
    executor = Executor(topology, [], history)
    executor._step(Fault(1.0, "disk-full", "storage-0", 3.0), "begin")
    [record] = history.records
    assert (record.kind, record.target, record.outcome) == ("disk-full", "storage-0", UNSUPPORTED)
    assert "no_such_setting" in record.detail
    assert history.injected_by_kind() == {} and history.unsupported_by_kind() == {"disk-full": 1}
    assert "--no-such-flag" not in topology.process("storage-0").args


def test_corrupt_flips_bytes_in_every_entry_log(tmp_path: Path) -> None:
    log = tmp_path / "entrylog" / "0000000001.entrylog"
    log.parent.mkdir()
    original = bytes(range(256)) * 64
    log.write_bytes(original)
    flipped = corrupt_entry_logs(tmp_path, random.Random(1))
    changed = sum(a != b for a, b in zip(original, log.read_bytes(), strict=True))
    assert flipped > 0 and changed == flipped


def test_a_stopped_executor_takes_no_further_step(tmp_path: Path) -> None:
    """A run torn down early stops the executor before the topology: no fault of the schedule may
    start a process again behind the topology's stop (an interrupted soak once left two running)."""
    topology = Topology(TopologySettings(tmp_path))  # never started: the kill must never run
    history = FaultHistory(seed=5)
    executor = Executor(topology, [Fault(3600.0, "kill", "storage-0", 1.0)], history).start()
    executor.stop()
    assert executor.done and history.records == [] and executor.error is None
