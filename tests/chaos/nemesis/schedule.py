"""A fault schedule drawn from a seed: the same seed gives the same faults at the same moments on the
same targets, so a failing run is replayed by its seed.

The rule that keeps a run checkable (faults overlap, as in reality, within it):
- at any moment at most storage_nodes - write_quorum storage nodes (1 of 3 with Qw = 2) and at most
  brokers - 1 brokers are faulted (killed, paused, restarting, partitioned, corrupted, disk-full,
  slow), so writes can go on and every acknowledged entry keeps a readable copy; of a consensus
  metadata store's members, at most a minority (1 of 3 etcd members, the leader included: a
  majority stays up, which is what etcd promises to survive); a lone Redis may be faulted;
- a process is in at most one fault at a time (its end, a start or a resume, must not meet
  another fault's); at most one partition at a time (healing one never heals another); one corrupt per
  run (two corrupted nodes could hold both copies of an entry: the test's damage, not Herald's);
- restart-all overlaps nothing;
- every fault ends within the run, and the executor heals everything afterwards, so every process
  is up and connected when the checker reads."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.chaos.nemesis.topology import CLIENT, LEASE_EXPIRY

# kind -> weight of drawing it
KINDS = {
    "kill": 4, "pause": 3, "restart": 3, "corrupt": 1, "disk-full": 1, "slow-fsync": 1, "partition": 4,
}
# restart-all overlaps nothing, so it is placed first, in this share of the schedules
RESTART_ALL_SHARE = 0.3
RESTART_ALL_WINDOW = 8.0  # seconds: the executor runs its steps in turn, so a longer restart delays the next
STORAGE_KINDS = ("corrupt", "disk-full", "slow-fsync")
ONE_WAY = "one-way"
DELAY = "delay"
PARTITION_MODES = ("blackhole", "drop", ONE_WAY, DELAY)
ISOLATE = "isolate"


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the workload starts
    kind: str
    target: str  # a process name; "*" for restart-all
    duration: float  # seconds until its end (restart, resume, heal); 0 for kinds done at once
    peer: str = ""  # partition: the other side of the pair, or ISOLATE
    mode: str = ""  # partition: one of PARTITION_MODES

    @property
    def end(self) -> float:
        return self.at + self.duration

    def describe(self) -> str:
        what = f"{self.kind} {self.target}"
        if self.kind == "partition":
            what += f" {'isolated' if self.peer == ISOLATE else 'from ' + self.peer} ({self.mode})"
        return f"{self.at:6.1f}s +{self.duration:4.1f}s {what}"


@dataclass(frozen=True)
class Shape:
    """What the schedule may touch: the topology's process names by role."""

    storage: tuple[str, ...]
    brokers: tuple[str, ...]
    others: tuple[str, ...]  # metadata members, lookup, proxy
    write_quorum: int
    metadata: tuple[str, ...] = ()  # the metadata store's members (also in others)

    @property
    def metadata_budget(self) -> int:
        """Metadata members that may be faulted at once: a minority, or the one member there is."""
        return max(1, (len(self.metadata) - 1) // 2)

    @property
    def processes(self) -> tuple[str, ...]:
        return (*self.storage, *self.brokers, *self.others)


def _draw_one(rng: random.Random, at: float, shape: Shape) -> Fault:
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    if kind in STORAGE_KINDS:
        duration = 3.0 if kind == "corrupt" else rng.uniform(3.0, 8.0)
        return Fault(at, kind, rng.choice(shape.storage), duration)
    if kind == "partition":
        target = rng.choice(shape.processes)
        peers = [p for p in (*shape.processes, CLIENT) if p != target]
        peer = ISOLATE if rng.random() < 0.3 else rng.choice(peers)
        return Fault(at, kind, target, rng.uniform(2.0, 8.0), peer, rng.choice(PARTITION_MODES))
    target = rng.choice(shape.processes)
    if kind == "pause":  # past the lease, so that another broker takes over and the paused one is fenced
        return Fault(at, kind, target, LEASE_EXPIRY + rng.uniform(1.0, 3.0))
    if kind == "kill":
        return Fault(at, kind, target, rng.uniform(0.5, 5.0))
    return Fault(at, kind, target, 3.0)  # restart: the window a graceful restart takes


def _touched(fault: Fault, shape: Shape) -> set[str]:
    if fault.kind == "restart-all":
        return set(shape.processes)
    if fault.kind == "partition" and fault.peer == ISOLATE:
        return {fault.target}
    if fault.kind == "partition":
        return {fault.target, fault.peer}
    return {fault.target}


def _fits(candidate: Fault, chosen: list[Fault], shape: Shape) -> bool:
    overlapping = [f for f in chosen if f.at < candidate.end and candidate.at < f.end]
    if candidate.kind == "restart-all" and overlapping:
        return False
    if any(f.kind == "restart-all" for f in overlapping):
        return False
    if candidate.kind == "corrupt" and any(f.kind == "corrupt" for f in chosen):
        return False
    if candidate.kind == "partition" and any(f.kind == "partition" for f in overlapping):
        return False
    busy = set().union(*(_touched(f, shape) for f in overlapping))
    if busy & _touched(candidate, shape):
        return False  # one fault per process at a time: a second kill of a dead process means nothing
    touched = busy | _touched(candidate, shape)
    storage_budget = len(shape.storage) - shape.write_quorum
    return (len(touched & set(shape.storage)) <= storage_budget
            and len(touched & set(shape.brokers)) <= len(shape.brokers) - 1
            and len(touched & set(shape.metadata)) <= shape.metadata_budget)


def draw(seed: int, shape: Shape, seconds: float, faults: int) -> list[Fault]:
    """`faults` faults (fewer when the rule leaves no room) spread over `seconds`."""
    rng = random.Random(seed)
    chosen: list[Fault] = []
    if rng.random() < RESTART_ALL_SHARE:
        chosen.append(Fault(round(rng.uniform(1.0, seconds * 0.8), 1), "restart-all", "*", RESTART_ALL_WINDOW))
        faults -= 1
    for at in sorted(rng.uniform(1.0, seconds * 0.8) for _ in range(faults)):
        for _ in range(20):  # another draw at the same moment when this one breaks the rule
            candidate = _draw_one(rng, round(at, 1), shape)
            if _fits(candidate, chosen, shape):
                chosen.append(candidate)
                break
    return sorted(chosen, key=lambda fault: fault.at)
