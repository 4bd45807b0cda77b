"""The built-in plugins, registered by name (see framework.py)."""

from __future__ import annotations

from collections.abc import Sequence

from service.scheduler.framework import (
    FILTERS,
    OK,
    QUEUE_SORTS,
    SCORERS,
    Context,
    Status,
)
from service.scheduler.snapshot import GpuView, PendingJob


class PriorityFifo:
    """Higher priority first; first submitted first within a priority."""

    def key(self, job: PendingJob) -> tuple[float, ...]:
        return (-job.priority, job.id)


class NodeReady:
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        node = ctx.nodes[gpu.node_id]
        return OK if node.ready else Status(False, f"node {node.name} is not ready")


class GpuHealth:
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        return OK if gpu.healthy else Status(False, "GPU is unhealthy")


class GpuModel:
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        if job.gpu_models is None or gpu.model in job.gpu_models:
            return OK
        return Status(False, f"job wants {', '.join(sorted(job.gpu_models))}, GPU is {gpu.model}")


class JobCap:
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        cap = ctx.config.max_jobs_per_gpu
        return (
            OK
            if gpu.jobs < cap
            else Status(False, f"GPU already runs {gpu.jobs} job(s) (cap {cap})")
        )


class UtilizationCap:
    """Compute-heavy neighbours: a busy GPU takes no further job."""

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        cap = ctx.config.max_utilization_pct
        if gpu.jobs == 0 or gpu.utilization_pct < cap:
            return OK
        return Status(False, f"GPU is {gpu.utilization_pct:.0f}% busy (cap {cap:.0f}%)")


def gib(mib: float) -> str:
    """MiB as GiB with one decimal, as reasons show it."""
    return f"{mib / 1024:.1f} GiB"


class MemoryFit:
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        demand = job.demand_for(gpu.model)
        if demand is None:
            return Status(False, f"no memory estimate for {gpu.model}")
        free = gpu.free_mib(ctx.config.headroom_mib)
        if job.exclusive:
            if gpu.jobs or gpu.reserved_mib:
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


class ScarceModel:
    """GPUs kept for waiting jobs that fit only their GPU model (as many as those jobs
    ask for) take no job that fits another model: otherwise small jobs fill the few
    large GPUs and the jobs that need them starve."""

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        if gpu.id not in ctx.kept_gpus or job.exclusive or job.id in ctx.one_model_jobs:
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


QUEUE_SORTS.update(priority_fifo=PriorityFifo)
FILTERS.update(
    node_ready=NodeReady,
    gpu_health=GpuHealth,
    gpu_model=GpuModel,
    job_cap=JobCap,
    utilization_cap=UtilizationCap,
    memory_fit=MemoryFit,
    scarce_model=ScarceModel,
)
SCORERS.update(binpack=Binpack, spread=Spread, model_fit=ModelFit)
