"""The fault schedule: a seed gives one schedule, and every schedule keeps the rule that leaves a
run checkable (schedule.py's docstring)."""

from __future__ import annotations

from collections import Counter

from tests.chaos.nemesis.schedule import ISOLATE, KINDS, Fault, Shape, draw

SHAPE = Shape(("storage-0", "storage-1", "storage-2"), ("broker-0", "broker-1"), ("redis", "lookup", "proxy-0"), 2)


def _touched(fault: Fault) -> set[str]:
    if fault.kind == "restart-all":
        return set(SHAPE.processes)
    if fault.kind == "partition" and fault.peer != ISOLATE:
        return {fault.target, fault.peer}
    return {fault.target}


def test_a_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    assert draw(7, SHAPE, 60, 10) == draw(7, SHAPE, 60, 10)
    assert draw(7, SHAPE, 60, 10) != draw(8, SHAPE, 60, 10)


def test_every_schedule_keeps_enough_storage_nodes_and_a_broker() -> None:
    kinds: Counter[str] = Counter()
    for seed in range(300):
        faults = draw(seed, SHAPE, 60, 10)
        kinds.update(f.kind for f in faults)
        assert sum(f.kind == "corrupt" for f in faults) <= 1
        for fault in faults:  # the faults active at each moment one begins
            assert fault.duration >= 0
            active = [f for f in faults if f.at <= fault.at < f.end or f is fault]
            if fault.kind == "restart-all":
                assert [f for f in faults if f.at < fault.end and fault.at < f.end] == [fault], (seed, active)
                continue
            touched = set().union(*(_touched(f) for f in active))
            assert sum(len(_touched(f)) for f in active) == len(touched), (seed, active)  # one fault each
            assert len(touched & set(SHAPE.storage)) <= 1, (seed, active)
            assert len(touched & set(SHAPE.brokers)) <= 1, (seed, active)
            assert sum(f.kind == "partition" for f in active) <= 1, (seed, active)
    assert set(kinds) == {*KINDS, "restart-all"}  # over many seeds every kind is drawn


ETCD_SHAPE = Shape(("storage-0", "storage-1", "storage-2"), ("broker-0", "broker-1"),
                   ("etcd-0", "etcd-1", "etcd-2", "lookup", "proxy-0"), 2, ("etcd-0", "etcd-1", "etcd-2"))


def test_a_majority_of_etcd_members_stays_up_while_any_one_of_them_may_be_faulted() -> None:
    faulted: Counter[str] = Counter()
    for seed in range(300):
        faults = draw(seed, ETCD_SHAPE, 60, 10)
        for fault in faults:
            if fault.kind == "restart-all":
                continue
            active = [f for f in faults if (f.at <= fault.at < f.end or f is fault) and f.kind != "restart-all"]
            members = {f.target for f in active} | {f.peer for f in active}
            assert len(members & set(ETCD_SHAPE.metadata)) <= 1, (seed, active)
            faulted.update(m for m in {fault.target, fault.peer} if m in ETCD_SHAPE.metadata)
    assert set(faulted) == set(ETCD_SHAPE.metadata)  # the leader is whichever member: each one gets faults
