"""The scheduling framework: plugins come from an explicit registry, prepare their own
state once per cycle, and declare what the candidate index may apply for them; the
core knows none of them by name."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from service.scheduler.framework import (
    OK,
    Context,
    GpuFilter,
    MemoryBound,
    Registry,
    SchedulerConfig,
    Status,
    UnknownPluginError,
)
from service.scheduler.placement import Scheduler
from service.scheduler.plugins import BUILT_IN, Binpack, MemoryFit, PriorityFifo, ScarceModel
from service.scheduler.snapshot import GpuView, PendingJob, Snapshot
from tests.service.test_placement import A100, NO_HEADROOM, NODES, T4, gpu, job


class RefuseEverything:
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        return Status(False, "refuses all")


class TwiceTheRoom:
    """A memory filter of its own: a GPU needs twice the job's demand free."""

    def bound(self, job: PendingJob, model: str, ctx: Context) -> MemoryBound | None:
        demand = job.demand_for(model)
        return None if demand is None else MemoryBound(2 * demand)

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        bound = self.bound(job, gpu.model, ctx)
        free = gpu.free_mib(ctx.config.headroom_mib)
        return OK if bound and free >= bound.free_mib else Status(False, "not twice")


class NotGpuOne(GpuFilter):
    def check_gpu(self, gpu: GpuView, ctx: Context) -> Status:
        return OK if gpu.id != 1 else Status(False, "GPU 1 is out")


@dataclass(frozen=True)
class NotTheLastJobsGpu:
    """Refuses the GPU whose id is the highest pending job id: state only the whole
    cycle's snapshot gives, found by `prepare`."""

    refused: int | None = None

    def prepare(self, snapshot: Snapshot, ctx: Context) -> NotTheLastJobsGpu:
        return NotTheLastJobsGpu(max(j.id for j in snapshot.pending))

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        return OK if gpu.id != self.refused else Status(False, f"kept off GPU {self.refused}")


def registry(**filters: type) -> Registry:
    return Registry({"priority_fifo": PriorityFifo}, filters, {"binpack": Binpack})


def scheduler(reg: Registry, *filters: str) -> Scheduler:
    return Scheduler(SchedulerConfig(headroom_mib=0, filters=filters, scorers={"binpack": 1}), reg)


def test_a_filter_is_found_by_its_name_in_the_registry_not_by_the_core() -> None:
    # a registry may call anything "memory_fit": the core does not read names
    gpus = (gpu(1, 1),)
    assert (
        not scheduler(registry(memory_fit=RefuseEverything), "memory_fit")
        .place(Snapshot(NODES, gpus, (job(1, 1000),)))
        .placements
    )


def test_the_index_applies_a_declared_memory_bound_whatever_its_name() -> None:
    gpus = (gpu(1, 1, reserved_mib=5000, jobs=1), gpu(2, 1, reserved_mib=9000, jobs=1))
    snapshot = Snapshot(NODES, gpus, (job(1, 4000),))
    # binpack alone takes the fuller GPU 2 (6360 free); twice the room needs GPU 1 (10360)
    (placement,) = scheduler(registry(room=TwiceTheRoom), "room").place(snapshot).placements
    assert placement.gpu_ids == (1,)
    (placement,) = scheduler(BUILT_IN, "memory_fit").place(snapshot).placements
    assert placement.gpu_ids == (2,)


def test_a_gpu_filter_keeps_gpus_out_of_the_index_and_explain_says_why() -> None:
    gpus = (gpu(1, 1), gpu(2, 1, reserved_mib=14000, jobs=1))
    snapshot = Snapshot(NODES, gpus, (job(1, 1000),))
    chosen = scheduler(registry(not_one=NotGpuOne), "not_one")
    assert chosen.place(snapshot).placements[0].gpu_ids == (2,)
    one, _two = chosen.explain(snapshot, 1).gpus
    assert one.reasons == ("not_one: GPU 1 is out",)
    full = Snapshot(NODES, (gpu(1, 1),), (job(1, 1000),))
    assert "the most free on an eligible GPU is 0.0 GiB" in chosen.place(full).waiting[1]


def test_each_cycle_prepares_its_own_state_and_leaves_the_scheduler_as_it_was() -> None:
    chosen = scheduler(registry(last=NotTheLastJobsGpu, memory_fit=MemoryFit), "last", "memory_fit")
    gpus = (gpu(1, 1, reserved_mib=14000, jobs=1), gpu(2, 1, reserved_mib=13000, jobs=1))
    two = Snapshot(NODES, gpus, (job(1, 1000), job(2, 1000)))
    one = Snapshot(NODES, gpus, (job(1, 1000),))
    # with two jobs pending GPU 2 is refused: job 1 takes GPU 1, job 2 finds nothing
    plan = chosen.place(two)
    assert [p.gpu_ids for p in plan.placements] == [(1,)]
    assert "kept off GPU 2" in chosen.explain(two, 2).gpus[1].reasons[0]
    # the next cycle's state is its own: GPU 1 is refused, so job 1 takes GPU 2
    assert chosen.place(one).placements[0].gpu_ids == (2,)
    assert chosen.place(two) == plan


def test_scarce_model_keeps_nothing_until_prepared_for_a_cycle() -> None:
    gpus = (gpu(1, 1), gpu(2, 2, 40960, A100))
    big = job(1, 30000)  # fits the A100 only
    small = job(2, 1000)
    ctx = Context(NO_HEADROOM, {node.id: node for node in NODES})
    assert ScarceModel().check(small, gpus[1], ctx).ok
    prepared = ScarceModel().prepare(Snapshot(NODES, gpus, (big, small)), ctx)
    assert prepared.kept_gpus == {2} and prepared.one_model_jobs == {1}
    assert not prepared.check(small, gpus[1], ctx).ok
    assert prepared.check(big, gpus[1], ctx).ok and prepared.check(small, gpus[0], ctx).ok


def test_unknown_plugins_are_named_with_what_the_registry_has() -> None:
    config = SchedulerConfig(queue_sort="lottery", filters=("memory_fit", "telepathy"))
    assert BUILT_IN.unknown(config) == [
        "queue sort 'lottery' (known: priority_fifo)",
        "filter 'telepathy' (known: gpu_health, gpu_model, job_cap, memory_fit, node_ready, "
        "scarce_model, utilization_cap)",
    ]
    with pytest.raises(UnknownPluginError, match="filter 'memory_fit' \\(known: \\)"):
        Scheduler(SchedulerConfig(), Registry({"priority_fifo": PriorityFifo}, {}, {}))


def test_what_the_index_chooses_every_filter_accepts() -> None:
    # the index applies the GPU, model and memory filters for the core: a job is placed
    # exactly when explain, which asks every filter about every GPU, finds one that fits
    rng = random.Random(7)
    placed = 0
    for _ in range(300):
        gpus = tuple(
            gpu(
                i,
                rng.choice((1, 2)),
                *rng.choice(((15360, T4), (40960, A100))),
                reserved_mib=(reserved := rng.choice((0, rng.randint(1000, 30000)))),
                jobs=1 if reserved else rng.choice((0, 0, 4)),
                healthy=rng.random() > 0.1,
                utilization_pct=rng.choice((0.0, 95.0)),
            )
            for i in range(1, rng.randint(1, 5))
        )
        pending = job(
            1,
            rng.choice((None, rng.randint(500, 40000))),
            exclusive=rng.random() < 0.2,
            gpu_models=rng.choice((None, frozenset(), frozenset({T4}), frozenset({A100}))),
        )
        snapshot = Snapshot(NODES, gpus, (pending,))
        plan = Scheduler(NO_HEADROOM).place(snapshot)
        fits = {v.gpu_id for v in Scheduler(NO_HEADROOM).explain(snapshot, 1).gpus if v.fits}
        assert bool(plan.placements) == bool(fits)
        if plan.placements:
            placed += 1
            assert set(plan.placements[0].gpu_ids) <= fits
    assert 20 < placed < 280  # both outcomes were tried
