"""Placement v0 as a pure function of a snapshot."""

from __future__ import annotations

from service.scheduler.placement import place
from service.scheduler.snapshot import GpuView, NodeView, PendingJob, Snapshot


def gpu(gpu_id: int, node_id: int, total: int, model: str = "Tesla T4", **kw: object) -> GpuView:
    fields: dict[str, object] = dict(
        index=gpu_id, reserved_mib=0, foreign_mib=0, healthy=True, jobs=0
    )
    fields.update(kw)
    return GpuView(id=gpu_id, node_id=node_id, model=model, memory_total_mib=total, **fields)  # type: ignore[arg-type]


def job(job_id: int, memory: int, gpus: int = 1, **kw: object) -> PendingJob:
    fields: dict[str, object] = dict(priority=0, exclusive=False, gpu_models=None)
    fields.update(kw)
    return PendingJob(id=job_id, gpus=gpus, memory_mib=memory, **fields)  # type: ignore[arg-type]


NODES = (NodeView(1, "a", True), NodeView(2, "b", True))


def test_best_fit_picks_the_gpu_with_least_memory_left_over() -> None:
    snapshot = Snapshot(NODES, (gpu(1, 1, 40960), gpu(2, 2, 15360)), (job(1, 10000),))
    (placement,) = place(snapshot).placements
    assert placement.gpu_ids == (2,)
    assert placement.reserved_mib == 10000


def test_jobs_share_a_gpu_while_memory_allows_and_wait_after() -> None:
    snapshot = Snapshot(NODES[:1], (gpu(1, 1, 15360),), (job(1, 6000), job(2, 6000), job(3, 6000)))
    plan = place(snapshot)
    assert [p.job_id for p in plan.placements] == [1, 2]
    assert 3 in plan.waiting


def test_reservations_and_foreign_memory_count_against_free_memory() -> None:
    busy = gpu(1, 1, 15360, reserved_mib=8000, foreign_mib=2000, jobs=1)
    plan = place(Snapshot(NODES[:1], (busy,), (job(1, 5361), job(2, 5360))))
    assert [p.job_id for p in plan.placements] == [2]


def test_gang_needs_all_gpus_on_one_node() -> None:
    gpus = (gpu(1, 1, 15360), gpu(2, 2, 15360, index=0), gpu(3, 2, 15360, index=1))
    plan = place(Snapshot(NODES, gpus, (job(1, 1000, gpus=2), job(2, 1000, gpus=3))))
    (placement,) = plan.placements
    assert placement.job_id == 1 and placement.node_id == 2 and placement.gpu_ids == (2, 3)
    assert 2 in plan.waiting


def test_model_constraint_and_health_and_node_readiness() -> None:
    nodes = (NodeView(1, "a", True), NodeView(2, "b", False))
    gpus = (
        gpu(1, 1, 40960, model="NVIDIA A100-SXM4-40GB", healthy=False),
        gpu(2, 1, 15360),
        gpu(3, 2, 40960, model="NVIDIA A100-SXM4-40GB"),
    )
    constrained = job(1, 1000, gpu_models=frozenset({"NVIDIA A100-SXM4-40GB"}))
    plan = place(Snapshot(nodes, gpus, (constrained, job(2, 1000))))
    assert [(p.job_id, p.gpu_ids) for p in plan.placements] == [(2, (2,))]
    assert 1 in plan.waiting


def test_exclusive_jobs_take_an_idle_gpu_whole() -> None:
    gpus = (gpu(1, 1, 15360, reserved_mib=1000, jobs=1), gpu(2, 1, 15360, index=1))
    plan = place(Snapshot(NODES[:1], gpus, (job(1, 0, exclusive=True), job(2, 100))))
    first, second = plan.placements
    assert (first.gpu_ids, first.reserved_mib) == ((2,), 15360)
    assert second.gpu_ids == (1,)


def test_exclusive_job_with_a_floor_needs_a_big_enough_gpu() -> None:
    gpus = (gpu(1, 1, 15360), gpu(2, 2, 40960, model="NVIDIA A100-SXM4-40GB"))
    (placement,) = place(Snapshot(NODES, gpus, (job(1, 18000, exclusive=True),))).placements
    assert placement.gpu_ids == (2,) and placement.reserved_mib == 40960


def test_higher_priority_first_then_oldest() -> None:
    snapshot = Snapshot(
        NODES[:1], (gpu(1, 1, 15360),), (job(1, 10000), job(2, 10000, priority=5), job(3, 10000))
    )
    plan = place(snapshot)
    assert [p.job_id for p in plan.placements] == [2]
    assert set(plan.waiting) == {1, 3}
