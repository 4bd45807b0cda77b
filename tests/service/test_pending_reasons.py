"""A waiting job's reason names the cause that really keeps it waiting."""

from __future__ import annotations

from service.scheduler.framework import SchedulerConfig
from service.scheduler.placement import Scheduler
from service.scheduler.snapshot import Snapshot
from tests.service.test_placement import A100, NO_HEADROOM, NODES, T4, gpu, job, place

A80 = "NVIDIA A100-SXM4-80GB"


def test_a_job_kept_off_gpus_for_one_model_jobs_says_so_not_memory() -> None:
    # two big jobs fit the A100-80GBs only (both nearly full): those GPUs are kept for
    # them; the small job would fit there but fits the (full) T4 too, so it waits
    gpus = (
        gpu(1, 1, reserved_mib=15000, jobs=1),
        gpu(2, 2, 81920, A80, reserved_mib=40000, jobs=1),
        gpu(3, 2, 81920, A80, reserved_mib=40000, jobs=1),
    )
    big = tuple(job(i, demand_mib={A80: 50000, T4: 50000}) for i in (1, 2))
    small = job(3, 5000)
    plan = place(gpus, (*big, small))
    assert not plan.placements
    assert "kept for waiting jobs that fit no GPU model but" in plan.waiting[3]
    assert "GiB free" not in plan.waiting[3] and "the most free" not in plan.waiting[3]
    summary = Scheduler(NO_HEADROOM).explain(Snapshot(NODES, gpus, (*big, small)), 3).summary
    assert summary == plan.waiting[3]


def test_a_gang_job_says_it_waits_for_gpus_on_one_node() -> None:
    # a waiting job that fits T4s only keeps the T4 with room; the 2-GPU job would fit
    # that T4's memory, but no node has two GPUs it may take
    gpus = (
        gpu(1, 1, reserved_mib=14000, jobs=1, index=0),
        gpu(2, 1, reserved_mib=3000, jobs=1, index=1),
        gpu(3, 2, 40960, A100, reserved_mib=40000, jobs=1, index=0),
    )
    t4_only = job(1, 14000, gpu_models=frozenset({T4}))
    gang = job(2, 7000, gpus=2)
    plan = place(gpus, (t4_only, gang), SchedulerConfig(headroom_mib=0, backfill=False))
    assert plan.waiting[2].startswith("needs 2 GPUs on one node")
    assert "kept for waiting jobs" in plan.waiting[2]
    assert "the most free" not in plan.waiting[2]
