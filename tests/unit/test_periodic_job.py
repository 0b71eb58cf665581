"""broker.core.scheduler.PeriodicJob: a broker's periodic work over its topics in one task
(issue 20 item 4), proven by what runs, never by timing."""

from __future__ import annotations

import asyncio

from herald.broker.core.scheduler import PeriodicJob

from tests.helpers import eventually


async def test_a_request_runs_at_once_whatever_the_interval() -> None:
    ran: list[str] = []

    async def run(member: str) -> None:
        ran.append(member)

    job: PeriodicJob[str] = PeriodicJob("test", 3600.0, run)
    job.add("a")
    job.add("b")
    job.request("b")
    await eventually(lambda: ran == ["b"], "the requested run")
    await job.remove("a")
    await job.remove("b")


async def test_a_pass_runs_every_member_in_bounded_slices() -> None:
    ran: set[int] = set()
    in_flight = peak = 0

    async def run(member: int) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0)
        in_flight -= 1
        ran.add(member)

    job: PeriodicJob[int] = PeriodicJob("test", 0.01, run, slice_size=16)
    for member in range(100):
        job.add(member)
    await eventually(lambda: ran == set(range(100)), "every member run by a pass")
    assert 1 < peak <= 16  # a slice at a time, its members concurrently
    for member in range(100):
        await job.remove(member)


async def test_a_job_of_marked_members_runs_only_those_marked() -> None:
    ran: list[str] = []

    async def run(member: str) -> None:
        ran.append(member)

    job: PeriodicJob[str] = PeriodicJob("test", 0.01, run, every_member=False)
    for member in ("idle-1", "a", "idle-2", "b"):
        job.add(member)
    job.mark("a")
    await eventually(lambda: ran == ["a"], "the marked member's run")
    job.mark("b")
    await eventually(lambda: ran == ["a", "b"], "the next marked member's run")  # the idle ones: never
    for member in ("idle-1", "a", "idle-2", "b"):
        await job.remove(member)


async def test_remove_returns_once_the_run_in_progress_has_finished() -> None:
    started, gate = asyncio.Event(), asyncio.Event()
    finished = False

    async def run(member: str) -> None:
        nonlocal finished
        started.set()
        await gate.wait()
        finished = True

    job: PeriodicJob[str] = PeriodicJob("test", 3600.0, run)
    job.add("a")
    job.request("a")
    await started.wait()
    asyncio.get_running_loop().call_soon(gate.set)
    await job.remove("a")
    assert finished  # never cut off halfway (a cursor's compare-and-set in flight)


async def test_the_task_ends_with_the_last_member_and_starts_with_the_next() -> None:
    ran: list[str] = []

    async def run(member: str) -> None:
        ran.append(member)

    job: PeriodicJob[str] = PeriodicJob("test", 3600.0, run)
    job.add("a")
    assert job.running
    await job.remove("a")
    await eventually(lambda: not job.running, "the job's task ended")
    job.add("b")
    job.request("b")
    await eventually(lambda: ran == ["b"], "a run after the task started again")
    await job.remove("b")


async def test_a_failing_run_is_logged_and_the_job_goes_on() -> None:
    ran: list[str] = []

    async def run(member: str) -> None:
        ran.append(member)
        if member == "bad":
            raise RuntimeError("boom")

    job: PeriodicJob[str] = PeriodicJob("test", 3600.0, run)
    job.add("bad")
    job.add("good")
    job.request("bad")
    await eventually(lambda: ran == ["bad"], "the failing run")
    job.request("good")
    await eventually(lambda: ran == ["bad", "good"], "the next run")
    await job.remove("bad")
    await job.remove("good")
