"""What the core does to keep a cycle's work bounded: answers a shape that failed this
cycle at once, parks jobs that cannot fit until a GPU they could use gains room, and
tries at most `max_attempts_per_cycle` jobs, in queue order."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from service.scheduler.framework import Context, MemoryBound, Registry, SchedulerConfig
from service.scheduler.placement import Scheduler
from service.scheduler.plugins import BUILT_IN, MemoryFit
from service.scheduler.snapshot import PendingJob, Snapshot
from tests.service.test_placement import A100, NODES, T4, gpu, job

NO_HOLDS = SchedulerConfig(headroom_mib=0, backfill=False)


class CountingMemoryFit(MemoryFit):
    """MemoryFit that counts the searches it bounds (one call per job and model)."""

    calls = 0

    def bound(self, job: PendingJob, model: str, ctx: Context) -> MemoryBound | None:
        CountingMemoryFit.calls += 1
        return super().bound(job, model, ctx)


def counting() -> Scheduler:
    filters = {**BUILT_IN.filters, "memory_fit": CountingMemoryFit}
    return Scheduler(NO_HOLDS, Registry(BUILT_IN.queue_sorts, filters, BUILT_IN.scorers))


def test_a_second_gang_of_a_failed_shape_is_told_what_a_search_would_tell_it() -> None:
    gpus = (
        gpu(1, 1, index=0),
        gpu(2, 1, index=1, reserved_mib=14000, jobs=1),
        gpu(3, 2, index=0),
    )
    gangs = (job(1, 6000, gpus=2), job(2, 6000, gpus=2))
    CountingMemoryFit.calls = 0
    cached = counting().place(Snapshot(NODES, gpus, gangs))
    assert CountingMemoryFit.calls == 1  # one model, searched for the first gang only
    alone = Scheduler(NO_HOLDS).place(Snapshot(NODES, gpus, gangs[1:]))
    assert cached.waiting[2] == alone.waiting[2] == cached.waiting[1]
    assert alone.waiting[2].startswith("needs 2 GPUs on one node; at most 1 fit")


def test_a_parked_job_waits_unsearched_until_a_gpu_it_could_use_gains_room() -> None:
    gpus = (
        gpu(1, 1, reserved_mib=12000, jobs=1),
        gpu(2, 2, 40960, A100, reserved_mib=30000, jobs=1),
    )
    t4_job = job(1, 8000, gpu_models=frozenset({T4}))
    scheduler = counting()
    first = scheduler.place(Snapshot(NODES, gpus, (t4_job,)))
    assert not first.placements and 1 in first.parked.jobs
    # the A100 frees: the job may not use it, so it stays parked, unsearched
    CountingMemoryFit.calls = 0
    a100_free = (gpus[0], replace(gpus[1], reserved_mib=0, jobs=0))
    second = scheduler.place(Snapshot(NODES, a100_free, (t4_job,)), first.parked)
    assert CountingMemoryFit.calls == 0
    assert second.waiting[1] == first.waiting[1] and 1 in second.parked.jobs
    # the T4 frees: it is searched again and placed
    t4_free = (replace(gpus[0], reserved_mib=0, jobs=0), a100_free[1])
    third = scheduler.place(Snapshot(NODES, t4_free, (t4_job,)), second.parked)
    assert [p.job_id for p in third.placements] == [1] and not third.parked.jobs
    # without the parked set the answer is the same as a fresh search's
    assert Scheduler(NO_HOLDS).place(Snapshot(NODES, a100_free, (t4_job,))).waiting == {
        1: second.waiting[1]
    }


class CountingScheduler(Scheduler):
    """A scheduler that counts the jobs it searches GPUs for."""

    searches = 0

    def _choose(self, job: PendingJob, state: Any) -> Any:
        self.searches += 1
        return super()._choose(job, state)


def test_a_parked_job_is_not_woken_by_room_too_small_for_it() -> None:
    gpus = (gpu(1, 1, reserved_mib=12000, jobs=2), gpu(2, 2, reserved_mib=1000, jobs=1))
    small, whole = job(1, 8000), job(2, None, exclusive=True, default_demand_mib=15360)
    scheduler = CountingScheduler(NO_HOLDS)
    first = scheduler.place(Snapshot(NODES, gpus, (small, whole)))
    assert set(first.parked.jobs) == {2} and [p.job_id for p in first.placements] == [1]
    # GPU 1 gains 4 GB but stays shared: no help to a job that needs a GPU whole
    scheduler.searches = 0
    shared = (replace(gpus[0], reserved_mib=8000, jobs=1), gpus[1])
    second = scheduler.place(Snapshot(NODES, shared, (whole,)), first.parked)
    assert scheduler.searches == 0 and second.waiting[2] == first.waiting[2]
    # a job that needs more room than GPU 1 gained is not searched either
    big = job(3, 15000)
    parked = scheduler.place(Snapshot(NODES, gpus, (big,))).parked
    scheduler.searches = 0
    assert scheduler.place(Snapshot(NODES, shared, (big,)), parked).parked.jobs.keys() == {3}
    assert scheduler.searches == 0
    # GPU 1 empties: both are searched again; the whole-GPU job is first in the queue
    empty = (replace(gpus[0], reserved_mib=0, jobs=0), gpus[1])
    third = scheduler.place(Snapshot(NODES, empty, (whole,)), second.parked)
    assert scheduler.searches == 1 and [p.job_id for p in third.placements] == [2]


def test_a_parked_job_whose_demand_changed_is_searched_again() -> None:
    gpus = (gpu(1, 1, reserved_mib=12000, jobs=1),)
    big = job(1, 8000)
    first = Scheduler(NO_HOLDS).place(Snapshot(NODES, gpus, (big,)))
    smaller = replace(big, default_demand_mib=2000)
    again = Scheduler(NO_HOLDS).place(Snapshot(NODES, gpus, (smaller,)), first.parked)
    assert [p.job_id for p in again.placements] == [1]


def test_bounded_work_defers_the_rest_in_queue_order() -> None:
    gpus = tuple(gpu(i, 1 + i % 2, index=i) for i in range(1, 5))
    jobs = tuple(job(i, 4000, priority=p) for i, p in ((1, 0), (2, 1), (3, 0), (4, 2)))
    config = replace(NO_HOLDS, max_attempts_per_cycle=2)
    plan = Scheduler(config).place(Snapshot(NODES, gpus, jobs))
    assert sorted(p.job_id for p in plan.placements) == [2, 4]  # the two first in order
    assert set(plan.waiting) == {1, 3}
    assert all("not looked at this cycle" in reason for reason in plan.waiting.values())
    # unbounded, every job is placed
    assert len(Scheduler(NO_HOLDS).place(Snapshot(NODES, gpus, jobs)).placements) == 4


def test_answers_known_this_cycle_do_not_spend_the_attempts() -> None:
    gpus = (gpu(1, 1), gpu(2, 2))
    too_big = tuple(job(i, 20000, priority=1) for i in (1, 2, 3))  # one shape
    small = job(4, 4000)
    config = replace(NO_HOLDS, max_attempts_per_cycle=2)
    plan = Scheduler(config).place(Snapshot(NODES, gpus, (*too_big, small)))
    assert [p.job_id for p in plan.placements] == [4]
    assert plan.waiting[3] == plan.waiting[1]


def test_a_job_refused_beside_a_hold_is_not_parked() -> None:
    # the A100 is held for the 38 GB job; scarce_model refuses the 12 GB job the room
    # above the hold (it fits the T4's model too): refused, it does not wait for room
    gpus = (
        gpu(1, 1, 40960, A100, reserved_mib=10000, used_mib=10000, jobs=1),
        gpu(2, 2, reserved_mib=14000, used_mib=14000, jobs=1),
    )
    head, small = job(1, 38000, priority=1), job(2, 12000)
    config = SchedulerConfig(headroom_mib=0)
    first = Scheduler(config).place(Snapshot(NODES, gpus, (head, small)))
    assert first.held == {1: 1} and 2 not in first.parked.jobs
    # the held job is cancelled: no GPU gains room, and the job is placed
    second = Scheduler(config).place(Snapshot(NODES, gpus, (small,)), first.parked)
    assert [p.job_id for p in second.placements] == [2]
