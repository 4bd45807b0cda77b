"""The built-in plugins, and `BUILT_IN`, the registry that names them (see framework.py)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field

from service.scheduler.framework import (
    OK,
    Context,
    GpuFilter,
    MemoryBound,
    Registry,
    Status,
    is_idle,
)
from service.scheduler.snapshot import GpuView, PendingJob, Snapshot, room_by_model


class PriorityFifo:
    """Higher priority first; first submitted first within a priority."""

    def key(self, job: PendingJob) -> tuple[float, ...]:
        return (-job.priority, job.id)


class NodeReady(GpuFilter):
    def check_gpu(self, gpu: GpuView, ctx: Context) -> Status:
        node = ctx.nodes[gpu.node_id]
        return OK if node.ready else Status(False, f"node {node.name} is not ready")


class GpuHealth(GpuFilter):
    def check_gpu(self, gpu: GpuView, ctx: Context) -> Status:
        return OK if gpu.healthy else Status(False, "GPU is unhealthy")


class GpuModel:
    """The GPU models a job names, if it names any (a `ModelIndex`)."""

    def models(self, job: PendingJob) -> Collection[str] | None:
        return job.gpu_models

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        if job.gpu_models is None or gpu.model in job.gpu_models:
            return OK
        return Status(False, f"job wants {', '.join(sorted(job.gpu_models))}, GPU is {gpu.model}")


class JobCap(GpuFilter):
    def check_gpu(self, gpu: GpuView, ctx: Context) -> Status:
        cap = ctx.config.max_jobs_per_gpu
        return (
            OK
            if gpu.jobs < cap
            else Status(False, f"GPU already runs {gpu.jobs} job(s) (cap {cap})")
        )


class UtilizationCap(GpuFilter):
    """Compute-heavy neighbours: a busy GPU takes no further job."""

    def check_gpu(self, gpu: GpuView, ctx: Context) -> Status:
        cap = ctx.config.max_utilization_pct
        if gpu.jobs == 0 or gpu.utilization_pct < cap:
            return OK
        return Status(False, f"GPU is {gpu.utilization_pct:.0f}% busy (cap {cap:.0f}%)")


def gib(mib: float) -> str:
    """MiB as GiB with one decimal, as reasons show it."""
    return f"{mib / 1024:.1f} GiB"


class MemoryFit:
    """The job's demand fits the GPU's free memory; a job that states no memory takes an
    idle GPU whole (a `MemoryIndex`: this is the one home of that rule)."""

    def bound(self, job: PendingJob, model: str, ctx: Context) -> MemoryBound | None:
        demand = job.demand_for(model)
        return None if demand is None else MemoryBound(demand, idle=job.exclusive)

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        bound = self.bound(job, gpu.model, ctx)
        if bound is None:
            return Status(False, f"no memory estimate for {gpu.model}")
        demand, free = bound.free_mib, gpu.free_mib(ctx.config.headroom_mib)
        if bound.idle:
            if not is_idle(gpu):
                return Status(False, "job needs a whole GPU; this one is shared")
            if free < demand:
                return Status(False, f"job needs a GPU of {gib(demand)}; this has {gib(free)}")
            return OK
        if free >= demand:
            return OK
        return Status(
            False,
            f"needs {gib(demand)}, GPU has {gib(free)} free "
            f"({gib(gpu.memory_total_mib)} total, {gib(gpu.reserved_mib)} "
            f"reserved, {gib(gpu.used_mib)} in use, {gib(gpu.foreign_mib)} "
            "used outside Colloc)",
        )


class _Fits:
    """The GPU models each waiting job shape fits (two at most: enough to know it fits
    more than one), with the room per model they were worked out for. A long queue is
    walked every cycle and its shapes change little, so `ScarceModel` keeps this from
    cycle to cycle for the shapes still waiting; replaced whole, so a cycle and an
    `explain` running at once each see one consistent answer."""

    def __init__(self) -> None:
        self.kept: tuple[dict[str, int], dict[Hashable, tuple[str, ...]]] = ({}, {})


@dataclass(frozen=True)
class ScarceModel:
    """GPUs kept for waiting jobs that fit only their GPU model (as many as those jobs
    ask for) take no job that fits another model: otherwise small jobs fill the few
    large GPUs and the jobs that need them starve. `prepare` finds them each cycle."""

    kept_gpus: frozenset[int] = frozenset()
    one_model_jobs: frozenset[int] = (
        frozenset()
    )  # the jobs they are kept for, and jobs that fit none
    fits: _Fits = field(default_factory=_Fits, compare=False, repr=False)

    def prepare(self, snapshot: Snapshot, ctx: Context) -> ScarceModel:
        """For each GPU model that is the only one some waiting jobs fit, as many of its
        GPUs as those jobs ask for (the ones with the most room: the soonest free); and
        the jobs that fit one GPU model at most."""
        headroom = ctx.config.headroom_mib
        room = room_by_model(((g.model, g.memory_total_mib) for g in snapshot.gpus), headroom)
        was_room, known = self.fits.kept
        if was_room != room:
            known = {}
        fits_by_shape: dict[Hashable, tuple[str, ...]] = {}
        wanted: dict[str, int] = {}
        one_model: set[int] = set()
        for job in snapshot.pending:
            shape = job.shape
            fits = fits_by_shape.get(shape, known.get(shape))
            if fits is None:
                fits = tuple(
                    itertools.islice(
                        (
                            model
                            for model, most in room.items()
                            if (job.gpu_models is None or model in job.gpu_models)
                            and (demand := job.demand_for(model)) is not None
                            and demand <= most
                        ),
                        2,
                    )
                )
            fits_by_shape[shape] = fits
            if len(fits) > 1:
                continue
            one_model.add(job.id)
            if fits and len(room) > 1 and not job.exclusive:
                wanted[fits[0]] = wanted.get(fits[0], 0) + job.gpus
        self.fits.kept = (room, fits_by_shape)
        kept: list[int] = []
        if wanted:
            by_room = sorted(snapshot.gpus, key=lambda g: (-g.free_mib(headroom), g.id))
            for model, count in wanted.items():
                kept.extend(itertools.islice((g.id for g in by_room if g.model == model), count))
        return ScarceModel(frozenset(kept), frozenset(one_model), self.fits)

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        if gpu.id not in self.kept_gpus or job.exclusive or job.id in self.one_model_jobs:
            return OK
        return Status(
            False,
            f"kept for waiting jobs that fit no GPU model but {gpu.model}; this one fits others",
        )


def _left_over(job: PendingJob, gpu: GpuView, ctx: Context) -> float:
    """Share of the GPU left free once the job is placed."""
    free = gpu.free_mib(ctx.config.headroom_mib)
    used = free if job.exclusive else (job.demand_for(gpu.model) or 0)
    return max(0.0, (free - used) / gpu.memory_total_mib)


class Binpack:
    """Tightest fit: fill GPUs before opening new ones."""

    def scores(self, job: PendingJob, gpus: Sequence[GpuView], ctx: Context) -> list[float]:
        return [100.0 * (1.0 - _left_over(job, gpu, ctx)) for gpu in gpus]


class Spread:
    """Most room: spread jobs, trading packing for less interference."""

    def scores(self, job: PendingJob, gpus: Sequence[GpuView], ctx: Context) -> list[float]:
        return [100.0 * _left_over(job, gpu, ctx) for gpu in gpus]


class ModelFit:
    """Do not spend a big GPU on a job a smaller model can hold."""

    def scores(self, job: PendingJob, gpus: Sequence[GpuView], ctx: Context) -> list[float]:
        smallest = min((gpu.memory_total_mib for gpu in gpus), default=1)
        return [100.0 * smallest / gpu.memory_total_mib for gpu in gpus]


BUILT_IN = Registry(
    queue_sorts={"priority_fifo": PriorityFifo},
    filters={
        "node_ready": NodeReady,
        "gpu_health": GpuHealth,
        "gpu_model": GpuModel,
        "job_cap": JobCap,
        "utilization_cap": UtilizationCap,
        "memory_fit": MemoryFit,
        "scarce_model": ScarceModel,
    },
    scorers={"binpack": Binpack, "spread": Spread, "model_fit": ModelFit},
)
