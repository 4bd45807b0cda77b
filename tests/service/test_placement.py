"""The scheduler core as a pure function of a snapshot."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from service.scheduler.framework import Limit, Quotas, SchedulerConfig, UnknownPluginError
from service.scheduler.placement import Scheduler
from service.scheduler.snapshot import (
    GpuView,
    NodeView,
    PendingJob,
    RunningJob,
    Snapshot,
    pending_job,
)

T4, A100 = "Tesla T4", "NVIDIA A100-SXM4-40GB"
NODES = (NodeView(1, "a", True), NodeView(2, "b", True))
NO_HEADROOM = SchedulerConfig(headroom_mib=0)


def gpu(gpu_id: int, node_id: int, total: int = 15360, model: str = T4, **kw: Any) -> GpuView:
    fields: dict[str, Any] = dict(
        index=gpu_id,
        reserved_mib=0,
        used_mib=0,
        foreign_mib=0,
        utilization_pct=0.0,
        healthy=True,
        jobs=0,
    )
    fields.update(kw)
    return GpuView(id=gpu_id, node_id=node_id, model=model, memory_total_mib=total, **fields)


def job(job_id: int, memory: int | None = None, gpus: int = 1, **kw: Any) -> PendingJob:
    fields: dict[str, Any] = dict(priority=0, demand_mib={}, default_demand_mib=memory)
    fields.update(kw)
    return PendingJob(id=job_id, gpus=gpus, **fields)


def place(
    gpus: tuple[GpuView, ...],
    jobs: tuple[PendingJob, ...],
    config: SchedulerConfig = NO_HEADROOM,
    nodes: tuple[NodeView, ...] = NODES,
    **kw: Any,
) -> Any:
    return Scheduler(config).place(Snapshot(nodes, gpus, jobs, **kw))


def test_binpack_fills_the_fullest_gpu_that_still_fits() -> None:
    gpus = (gpu(1, 1), gpu(2, 1, reserved_mib=8000, jobs=1), gpu(3, 1, reserved_mib=12000, jobs=1))
    (placement,) = place(gpus, (job(1, 5000),)).placements
    assert placement.gpu_ids == (2,) and placement.reserved_mib == (5000,)


def test_spread_takes_the_emptiest_gpu() -> None:
    gpus = (gpu(1, 1), gpu(2, 1, reserved_mib=8000, jobs=1))
    spread = SchedulerConfig(headroom_mib=0, scorers={"spread": 1.0})
    assert place(gpus, (job(1, 5000),), spread).placements[0].gpu_ids == (1,)


def test_model_fit_keeps_big_gpus_for_big_jobs() -> None:
    gpus = (gpu(1, 1, 40960, A100, reserved_mib=28000, jobs=1), gpu(2, 2))
    assert place(gpus, (job(1, 10000),)).placements[0].gpu_ids == (2,)
    binpack_only = SchedulerConfig(headroom_mib=0, scorers={"binpack": 1.0})
    assert place(gpus, (job(1, 10000),), binpack_only).placements[0].gpu_ids == (1,)


def test_a_peak_reached_before_that_fits_a_gpu_asks_for_all_of_it() -> None:
    def demand(**kw: Any) -> dict[str, int]:
        base: dict[str, Any] = dict(
            id=1, priority=0, gpus=1, memory_mib=None, upper_mib={A100: 41400}, floor_mib=0
        )
        return dict(pending_job(**{**base, **kw}).demand_mib)

    room = {A100: 40704}
    # it peaked at 37,600 MiB on this model: the bound (+10%) does not fit, the peak does
    assert demand(proven_mib={A100: 37600}, room_mib=room) == {A100: 40704}
    assert demand(room_mib=room) == {A100: 41400}  # never ran: the bound stands
    assert demand(proven_mib={A100: 40800}, room_mib=room) == {A100: 41400}  # did not fit
    assert demand(upper_mib={A100: 30000}, proven_mib={A100: 27000}, room_mib=room) == {A100: 30000}
    assert demand(proven_mib={A100: 37600}, room_mib=room, floor_mib=45000) == {A100: 45000}
    # placed alone on an empty GPU of the model, and on nothing less
    gpus = (gpu(1, 1, 40960, A100), gpu(2, 2, 40960, A100, reserved_mib=1000, jobs=1))
    config = SchedulerConfig(headroom_mib=256)
    pending = pending_job(
        id=1,
        priority=0,
        gpus=1,
        memory_mib=None,
        upper_mib={A100: 41400},
        floor_mib=0,
        proven_mib={A100: 37600},
        room_mib=room,
    )
    (placement,) = place(gpus, (pending,), config).placements
    assert placement.gpu_ids == (1,) and placement.reserved_mib == (40704,)


def test_a_job_whose_bound_fits_no_gpu_runs_alone_where_its_estimate_fits() -> None:
    a80, t4 = "NVIDIA A100-SXM4-80GB", "Tesla T4"
    room = {A100: 40704, a80: 81664, t4: 14800}

    def demand(
        upper: dict[str, int],
        peak: dict[str, int],
        floor: int = 0,
        models: frozenset[str] | None = None,
    ) -> dict[str, int]:
        return dict(
            pending_job(
                id=1,
                priority=0,
                gpus=1,
                memory_mib=None,
                upper_mib=upper,
                floor_mib=floor,
                gpu_models=models,
                room_mib=room,
                peak_mib=peak,
            ).demand_mib
        )

    # a bound carried up from a run that spiked: above every GPU, the estimate is not;
    # the T4 cannot hold the estimate and keeps the bound (a gang never counts it in)
    upper = {A100: 90000, a80: 90000, t4: 90000}
    peak = {A100: 36000, a80: 36000, t4: 36000}
    assert demand(upper, peak) == {A100: 40704, a80: 81664, t4: 90000}
    # an OOM's floor above the 40 GB card leaves the 80 GB one only
    assert demand(upper, peak, floor=45000) == {A100: 90000, a80: 81664, t4: 90000}
    assert demand({**upper, a80: 81000}, peak, floor=45000) == {A100: 90000, a80: 81000, t4: 90000}
    # the estimate fits nowhere either: the bound stands (the service refuses it)
    assert demand(upper, {A100: 85000, a80: 85000, t4: 85000}) == upper
    # a bound that fits some GPU is kept as it is
    assert demand({A100: 50000, a80: 50000}, {A100: 36000, a80: 36000}) == {A100: 50000, a80: 50000}
    # ... but only a GPU model the job may use counts
    only_a100 = frozenset({A100})
    fits_a80 = {A100: 50000, a80: 50000}
    assert demand(fits_a80, peak, models=only_a100) == {A100: 40704, a80: 50000}


def test_gpus_are_kept_for_waiting_jobs_that_fit_one_gpu_model_only() -> None:
    a80 = "NVIDIA A100-SXM4-80GB"
    gpus = (
        gpu(1, 1, 40960, A100),
        gpu(2, 2, 81920, a80, reserved_mib=76000, jobs=1),
        gpu(3, 2, 81920, a80, reserved_mib=76000, jobs=1),
    )
    big = [job(i, demand_mib={A100: 50000, a80: 50000}) for i in (1, 2)]
    small = job(3, 5000)
    # binpack alone puts the small job on an A100-80GB, where the big ones need the room
    without = SchedulerConfig(
        headroom_mib=0, filters=tuple(f for f in NO_HEADROOM.filters if f != "scarce_model")
    )
    assert place(gpus, (*big, small), without).placements[0].gpu_ids in {(2,), (3,)}
    (placement,) = place(gpus, (*big, small)).placements
    assert placement.job_id == 3 and placement.gpu_ids == (1,)
    verdict = Scheduler(NO_HEADROOM).explain(Snapshot(NODES, gpus, (*big, small)), 3).gpus[2]
    assert (
        not verdict.fits
        and "kept for waiting jobs that fit no GPU model but" in (verdict.reasons[0])
    )
    # one big job waiting keeps one GPU (the one it is also held for), not the model;
    # with none waiting, the model is open to all
    (placement,) = place(gpus, (big[0], small)).placements
    assert placement.job_id == 3 and placement.gpu_ids == (3,)
    assert place(gpus, (small,)).placements[0].gpu_ids in {(2,), (3,)}
    # a job that fits that model only may use the kept GPUs
    only_big = job(4, demand_mib={a80: 4000})
    assert place(gpus, (*big, only_big)).placements[0].gpu_ids in {(2,), (3,)}


def test_jobs_collocate_until_memory_or_the_job_cap_runs_out() -> None:
    jobs = tuple(job(i, 3000) for i in range(1, 7))
    plan = place((gpu(1, 1),), jobs, SchedulerConfig(headroom_mib=0, max_jobs_per_gpu=4))
    assert [p.job_id for p in plan.placements] == [1, 2, 3, 4]
    assert (
        "cap 4"
        in Scheduler(NO_HEADROOM)
        .explain(
            Snapshot(NODES, (gpu(1, 1, jobs=4, reserved_mib=12000),), (job(9, 1000),)),
            9,
        )
        .gpus[0]
        .reasons[0]
    )


def test_accounting_counts_observed_use_foreign_memory_and_headroom() -> None:
    over = gpu(1, 1, reserved_mib=4000, used_mib=9000, jobs=1)  # a job above its reservation
    assert place((over,), (job(1, 6361),)).waiting
    assert place((over,), (job(1, 6360),)).placements
    foreign = gpu(1, 1, foreign_mib=5000)
    config = SchedulerConfig(headroom_mib=360)
    assert place((foreign,), (job(1, 10001),), config).waiting
    assert place((foreign,), (job(1, 10000),), config).placements


def test_per_model_demands_from_the_estimator() -> None:
    gpus = (gpu(1, 1, 40960, A100), gpu(2, 2))
    needs_more_on_t4 = job(1, demand_mib={T4: 16000, A100: 15000}, default_demand_mib=None)
    assert place(gpus, (needs_more_on_t4,)).placements[0].gpu_ids == (1,)
    no_estimate = job(2, demand_mib={A100: 15000}, default_demand_mib=None)
    plan = place((gpu(2, 2),), (no_estimate,))
    assert 2 in plan.waiting


def test_gang_jobs_take_all_their_gpus_on_one_node_or_wait() -> None:
    gpus = (gpu(1, 1), gpu(2, 2, index=0), gpu(3, 2, index=1))
    plan = place(gpus, (job(1, 1000, gpus=2), job(2, 1000, gpus=3)))
    (placement,) = plan.placements
    assert placement.node_id == 2 and placement.gpu_ids == (2, 3)
    assert "at most 2 fit on any node" in plan.waiting[2] or "on one node" in plan.waiting[2]
    spanning = place(gpus, (job(3, 1000, gpus=3, multi_node=True),))
    assert sorted(spanning.placements[0].gpu_ids) == [1, 2, 3]


def test_health_readiness_models_and_busy_gpus_are_filtered() -> None:
    nodes = (NodeView(1, "a", True), NodeView(2, "b", False))
    gpus = (
        gpu(1, 1, healthy=False),
        gpu(2, 1, utilization_pct=95.0, jobs=1, reserved_mib=100),
        gpu(3, 2),
        gpu(4, 1, 40960, A100),
    )
    plan = place(gpus, (job(1, 1000, gpu_models=frozenset({T4})), job(2, 1000)), nodes=nodes)
    assert 1 in plan.waiting
    assert plan.placements[0].gpu_ids == (4,)


def test_busy_gpus_do_not_hide_idle_room_behind_the_candidate_limit() -> None:
    """The few GPUs with the least room are all too busy; the job still finds the one
    with room and a low utilisation (busy GPUs never enter the candidate index)."""
    busy = tuple(
        gpu(i, 1, reserved_mib=reserved, jobs=1, utilization_pct=95.0)
        for i, reserved in enumerate((11000, 10500, 1000, 500), start=1)
    )
    calm = gpu(5, 2, reserved_mib=6000, jobs=1, utilization_pct=30.0)
    (placement,) = place((*busy, calm), (job(1, 4000),)).placements
    assert placement.gpu_ids == (5,)


def test_identical_jobs_that_cannot_fit_wait_for_the_same_reason() -> None:
    plan = place((gpu(1, 1, reserved_mib=14000, jobs=1),), (job(1, 4000), job(2, 4000)))
    assert not plan.placements
    reason = "needs 3.9 GiB per GPU; the most free on an eligible GPU is 1.3 GiB"
    assert plan.waiting[1].startswith(reason) and plan.waiting[2] == reason


def test_exclusive_jobs_take_an_idle_gpu_whole() -> None:
    gpus = (gpu(1, 1, reserved_mib=1000, jobs=1), gpu(2, 1, index=1))
    plan = place(gpus, (job(1, 0, exclusive=True), job(2, 100)))
    first, second = plan.placements
    assert (first.gpu_ids, first.reserved_mib) == ((2,), (15360,))
    assert second.gpu_ids == (1,)


def test_priority_then_fifo_and_backfill_keeps_gpus_for_the_blocked_head() -> None:
    gpus = (gpu(1, 1, reserved_mib=10000, jobs=1), gpu(2, 2, reserved_mib=3000, jobs=1))
    jobs = (job(1, 14000, priority=5), job(2, 2000), job(3, 2000), job(4, 2000, priority=1))
    plan = place(gpus, jobs)
    # job 1 (highest priority) fits nowhere now; GPU 2, where it fits soonest, is held
    assert "held" in plan.waiting[1] and plan.held == {2: 1}
    assert all(p.gpu_ids == (1,) for p in plan.placements)
    assert [p.job_id for p in plan.placements] == [4, 2]  # priority, then FIFO
    no_backfill = SchedulerConfig(headroom_mib=0, backfill=False)
    assert {p.gpu_ids for p in place(gpus, jobs, no_backfill).placements} == {(1,), (2,)}


def test_a_gang_head_keeps_its_memory_on_held_gpus_and_smaller_jobs_take_the_rest() -> None:
    # node 1: GPUs 1 and 2 have room for the head's 8000 MiB each, 3 and 4 do not yet
    busy: dict[str, Any] = dict(reserved_mib=12000, jobs=1)
    gpus = (
        gpu(1, 1, reserved_mib=1000, jobs=1),  # 6360 MiB free above the head's 8000
        gpu(2, 1, reserved_mib=4000, jobs=1),  # 3360 MiB free above it
        gpu(3, 1, **busy),
        gpu(4, 1, **busy),
        gpu(5, 2, **busy),  # node 2: too few GPUs for the head
    )
    head = job(1, 8000, gpus=4)
    plan = place(gpus, (head, job(2, 5000), job(3, 5000)))
    assert plan.held == {1: 1, 2: 1, 3: 1, 4: 1}
    assert "held for it" in plan.waiting[1]
    # binpack would pick GPU 2, the tighter fit, but there 5000 MiB would eat the head's
    (placement,) = plan.placements
    assert (placement.job_id, placement.gpu_ids) == (2, (1,))
    # GPU 1 now has 1360 MiB above the head's memory: job 3 waits for the head
    assert plan.waiting[3] == (
        "the GPUs that would fit are held for job(s) 1 ahead of it in the queue "
        "(at most 3.3 GiB free above the memory kept for them)"
    )
    # the head is not delayed: once GPUs 3 and 4 empty, it fits beside job 2
    after = (
        replace(gpus[0], reserved_mib=6000, jobs=2),
        gpus[1],
        gpu(3, 1),
        gpu(4, 1),
        gpus[4],
    )
    (placement,) = place(after, (head,)).placements
    assert placement.gpu_ids == (1, 2, 3, 4)


def test_a_held_gpu_keeps_a_job_slot_for_its_head() -> None:
    """Backfill above a held job's memory leaves the job cap room for that job."""
    config = SchedulerConfig(headroom_mib=0, max_jobs_per_gpu=2)
    gpus = (gpu(1, 1, reserved_mib=1000, jobs=1), gpu(2, 1, reserved_mib=12000, jobs=1))
    plan = place(gpus, (job(1, 4000, gpus=2), job(2, 1000)), config)
    assert plan.held == {1: 1, 2: 1} and not plan.placements
    assert plan.waiting[2].startswith("the GPUs that would fit are held for job(s) 1")
    # with a cap of 3, job 2 and the head both find a slot on GPU 1
    (placement,) = place(gpus, (job(1, 4000, gpus=2), job(2, 1000))).placements
    assert placement.gpu_ids == (1,)


def test_a_head_whose_memory_is_free_everywhere_holds_its_gpus_whole() -> None:
    """It waits for a busy GPU's utilisation: a job placed above its memory would keep
    that GPU busy, and the head waiting, as long as such jobs keep coming."""
    config = SchedulerConfig(headroom_mib=0, max_utilization_pct=90)
    gpus = (gpu(1, 1, reserved_mib=1000, jobs=1), gpu(2, 1, reserved_mib=1000, jobs=1))
    busy = (gpus[0], replace(gpus[1], utilization_pct=95.0))
    plan = place(busy, (job(1, 4000, gpus=2), job(2, 1000)), config)
    assert plan.held == {1: 1, 2: 1} and not plan.placements
    # waiting for memory on GPU 2 instead, the head lets job 2 above its memory on GPU 1
    short = (gpus[0], replace(gpus[1], reserved_mib=12000))
    (placement,) = place(short, (job(1, 4000, gpus=2), job(2, 1000)), config).placements
    assert (placement.job_id, placement.gpu_ids) == (2, (1,))


def test_an_exclusive_head_holds_its_gpus_whole() -> None:
    gpus = (gpu(1, 1), gpu(2, 1, reserved_mib=12000, jobs=1))
    plan = place(gpus, (job(1, 0, gpus=2, exclusive=True), job(2, 1000)))
    assert plan.held == {1: 1, 2: 1} and not plan.placements
    assert plan.waiting[2] == (
        "the GPUs that would fit are held for job(s) 1 ahead of it in the queue"
    )


def test_quotas_per_user_and_queue() -> None:
    quotas = Quotas(users={"ann": Limit(gpus=2)}, queues={"small": Limit(memory_mib=5000)})
    config = SchedulerConfig(headroom_mib=0, quotas=quotas)
    running = (RunningJob(9, 0, "ann", "default", (1,), 1000),)
    gpus = (gpu(1, 1, reserved_mib=1000, jobs=1), gpu(2, 1, index=1), gpu(3, 1, index=2))
    jobs = (
        job(1, 1000, owner="ann"),
        job(2, 1000, owner="ann"),
        job(3, 3000, queue="small"),
        job(4, 3000, queue="small"),
        job(5, 1000, owner="bob"),
    )
    plan = place(gpus, jobs, config, running=running)
    assert {p.job_id for p in plan.placements} == {1, 3, 5}
    assert "user ann quota: 2 of 2 GPUs" in plan.waiting[2]
    assert "queue small quota" in plan.waiting[4]


def test_preemption_only_of_lower_priority_preemptible_jobs() -> None:
    gpus = (gpu(1, 1, reserved_mib=12000, jobs=1), gpu(2, 2, reserved_mib=12000, jobs=1))
    running = (
        RunningJob(7, 0, "x", "default", (1,), 12000, preemptible=False),
        RunningJob(8, 0, "x", "default", (2,), 12000, preemptible=True),
        RunningJob(9, 9, "x", "default", (2,), 0, preemptible=True),
    )
    urgent = job(1, 10000, priority=5)
    config = SchedulerConfig(headroom_mib=0, preemption=True)
    plan = place(gpus, (urgent,), config, running=running)
    assert plan.preemptions == {8: 1} and plan.held == {2: 1}
    assert place(gpus, (urgent,), NO_HEADROOM, running=running).preemptions == {}


def test_jobs_backing_off_wait() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = job(1, 1000, not_before=now + timedelta(seconds=30))
    plan = place((gpu(1, 1),), (later,), now=now)
    assert "backing off" in plan.waiting[1]
    assert place((gpu(1, 1),), (replace(later, not_before=now),), now=now).placements


def test_explain_gives_numbers_per_gpu() -> None:
    gpus = (gpu(1, 1, reserved_mib=12000, jobs=1), gpu(2, 2, 40960, A100))
    snapshot = Snapshot(NODES, gpus, (job(1, 8000, gpu_models=frozenset({T4})),))
    explanation = Scheduler(NO_HEADROOM).explain(snapshot, 1)
    t4, a100 = explanation.gpus
    assert not t4.fits and "needs 7.8 GiB, GPU has 3.3 GiB free" in t4.reasons[0]
    assert not a100.fits and "job wants Tesla T4" in a100.reasons[0]
    assert "needs 7.8 GiB per GPU" in explanation.summary
    with pytest.raises(KeyError):
        Scheduler(NO_HEADROOM).explain(snapshot, 99)


def test_plugins_come_from_the_registry() -> None:
    with pytest.raises(UnknownPluginError, match="scorer 'magic'"):
        Scheduler(SchedulerConfig(scorers={"magic": 1.0}))
