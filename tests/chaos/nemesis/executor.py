"""Runs a fault schedule against a topology from a background thread, recording every step in the
fault history; afterwards heals everything (resume, start, reconnect, lift every cap)."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from pathlib import Path

from herald.storage.node.settings import StorageSettings

from tests.chaos.nemesis.faultproxy import Mode
from tests.chaos.nemesis.history import DONE, FAILED, UNSUPPORTED, FaultHistory
from tests.chaos.nemesis.schedule import DELAY, ISOLATE, ONE_WAY, Fault
from tests.chaos.nemesis.topology import Topology

# Storage faults that need a storage setting: kind -> (setting, flag, value while faulted).
# A kind whose setting this checkout lacks is recorded as unsupported, never pretended.
SETTING_FAULTS = {
    "disk-full": ("max_data_bytes", "--max-data-bytes", "1"),
    "slow-fsync": ("fault_fsync_delay_ms", "--fault-fsync-delay-ms", "200"),
}
DELAY_MS = 200  # each way, on every chunk: a slow link, not a cut one


def storage_supports(setting: str) -> bool:
    return setting in {f.name for f in dataclasses.fields(StorageSettings)}


def corrupt_entry_logs(data_dir: Path, rng: random.Random) -> int:
    """Flip a run of bytes in each entry-log file (the checksums must catch it); how many flipped."""
    flipped = 0
    for log_file in sorted(data_dir.rglob("*.entrylog")):
        data = bytearray(log_file.read_bytes())
        if len(data) < 128:
            continue
        start = rng.randrange(64, len(data) - 32)
        for offset in range(start, min(len(data), start + 4096), 97):
            data[offset] ^= 0xFF
            flipped += 1
        log_file.write_bytes(bytes(data))
    return flipped


class Executor:
    def __init__(self, topology: Topology, faults: list[Fault], history: FaultHistory) -> None:
        self.topology = topology
        self.faults = faults
        self.history = history
        self.rng = random.Random(history.seed)  # corrupt offsets: replayed with the seed too
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Executor:
        self.history.started = time.monotonic()
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def stop(self) -> None:
        """No further step (its current one ends first): a run that is torn down early (a failure,
        Ctrl-C) must not have its processes started again behind the topology's stop."""
        self._stop.set()
        self._thread.join(300)

    def _run(self) -> None:
        steps = sorted([(f.at, 0, i, "begin") for i, f in enumerate(self.faults)]
                       + [(f.end, 1, i, "end") for i, f in enumerate(self.faults) if f.duration > 0])
        try:
            for at, _, index, phase in steps:
                wait = at - (time.monotonic() - self.history.started)
                if wait > 0 and self._stop.wait(wait):
                    return
                fault = self.faults[index]
                self._step(fault, phase)
        except BaseException as exc:  # the test reports it; a dead nemesis must not pass silently
            self.error = exc

    def _step(self, fault: Fault, phase: str) -> None:
        kind, target = fault.kind, fault.target
        try:
            detail = getattr(self, "_" + kind.replace("-", "_"))(fault, phase)
        except Exception as exc:  # recorded as the fault's outcome; final heal retries
            self.history.record(kind, target, phase, FAILED, repr(exc)[:200])
            return
        outcome, text = detail if isinstance(detail, tuple) else (DONE, detail or "")
        self.history.record(kind, self._target_text(fault), phase, outcome, text)

    @staticmethod
    def _target_text(fault: Fault) -> str:
        return f"{fault.target}|{fault.peer}" if fault.peer else fault.target

    # ---- one method per kind: phase "begin" or "end" ----

    def _kill(self, fault: Fault, phase: str) -> None:
        process = self.topology.process(fault.target)
        if phase == "begin":
            process.kill()
        elif not process.running:  # never a second copy of a process that is up
            process.start()

    def _pause(self, fault: Fault, phase: str) -> None:
        process = self.topology.process(fault.target)
        if phase == "begin":
            process.pause()
        else:
            process.resume()

    def _restart(self, fault: Fault, phase: str) -> None:
        if phase == "begin":
            self.topology.process(fault.target).restart()

    def _restart_all(self, fault: Fault, phase: str) -> None:
        if phase == "begin":
            for member in reversed(self.topology.members):
                member.process.stop()
            self.topology.start_processes()

    def _corrupt(self, fault: Fault, phase: str) -> str:
        if phase != "begin":
            return ""
        process = self.topology.process(fault.target)
        process.stop()  # a clean stop checkpoints: its entries now live in its entry logs
        flipped = corrupt_entry_logs(self.topology.base / fault.target, self.rng)
        process.start()
        return f"{flipped} bytes flipped"

    def _setting_fault(self, fault: Fault, phase: str) -> tuple[str, str]:
        setting, flag, value = SETTING_FAULTS[fault.kind]
        if not storage_supports(setting):
            return UNSUPPORTED, f"StorageSettings has no {setting} in this checkout"
        process = self.topology.process(fault.target)
        if phase == "begin":
            process.args = [*process.args, flag, value]
        else:
            at = process.args.index(flag)
            process.args = process.args[:at] + process.args[at + 2:]
        process.restart()
        return DONE, f"{flag} {value}" if phase == "begin" else "lifted"

    _disk_full = _setting_fault
    _slow_fsync = _setting_fault

    def _partition(self, fault: Fault, phase: str) -> None:
        """blackhole / drop / delay: both directions of each pair; one-way: what the target sends
        gets through, nothing comes back. The end heals the same pairs."""
        peers = self.topology.peers(fault.target) if fault.peer == ISOLATE else [fault.peer]
        for peer in peers:
            if phase != "begin":
                self.topology.partition(fault.target, peer, Mode.PASS)
            elif fault.mode == ONE_WAY:
                self.topology.one_way(fault.target, peer)
            elif fault.mode == DELAY:
                self.topology.partition(fault.target, peer, Mode.DELAY, DELAY_MS)
            else:
                self.topology.partition(fault.target, peer, Mode(fault.mode))

    # ---- afterwards ----

    def heal_all(self) -> None:
        """Everything back: every process resumed and running with its own flags, every link open."""
        self.stop()
        self.topology.heal()
        for _, flag, _ in SETTING_FAULTS.values():
            for member in self.topology.storage:
                process = member.process
                if flag in process.args:
                    at = process.args.index(flag)
                    process.args = process.args[:at] + process.args[at + 2:]
                    process.restart()
                    self.history.record("heal", process.name, "final-heal", DONE, f"{flag} lifted")
        for member in self.topology.members:
            process = member.process
            process.resume()
            if not process.running:
                process.start()
                self.history.record("heal", process.name, "final-heal", DONE, "started")
