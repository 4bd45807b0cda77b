"""Placement v0: first job in priority order, best-fitting GPUs on one node.

Pure: it reads a `Snapshot` and returns a `Plan`, so the service, a simulator and
unit tests run the same code.
"""

from __future__ import annotations

from dataclasses import replace

from service.scheduler.snapshot import GpuView, PendingJob, Placement, Plan, Snapshot


def _fits(job: PendingJob, gpu: GpuView) -> bool:
    if not gpu.healthy:
        return False
    if job.gpu_models is not None and gpu.model not in job.gpu_models:
        return False
    if job.exclusive:
        return gpu.jobs == 0 and gpu.free_mib >= job.memory_mib
    return gpu.free_mib >= job.memory_mib


def _reservation(job: PendingJob, gpu: GpuView) -> int:
    return gpu.memory_total_mib if job.exclusive else job.memory_mib


def _choose(job: PendingJob, snapshot: Snapshot, gpus: dict[int, GpuView]) -> Placement | None:
    """The node whose fitting GPUs leave the least memory over, and those GPUs."""
    best: tuple[int, int, tuple[GpuView, ...]] | None = None
    for node in snapshot.nodes:
        if not node.ready:
            continue
        fitting = sorted(
            (gpu for gpu in gpus.values() if gpu.node_id == node.id and _fits(job, gpu)),
            key=lambda gpu: (gpu.free_mib - _reservation(job, gpu), gpu.index),
        )
        if len(fitting) < job.gpus:
            continue
        chosen = tuple(fitting[: job.gpus])
        leftover = sum(gpu.free_mib - _reservation(job, gpu) for gpu in chosen)
        if best is None or (leftover, node.id) < (best[0], best[1]):
            best = (leftover, node.id, chosen)
    if best is None:
        return None
    _leftover, node_id, chosen = best
    return Placement(job.id, node_id, tuple(g.id for g in chosen), _reservation(job, chosen[0]))


def place(snapshot: Snapshot) -> Plan:
    """Place pending jobs, highest priority first, oldest first within a priority."""
    gpus = {gpu.id: gpu for gpu in snapshot.gpus}
    plan = Plan()
    for job in sorted(snapshot.pending, key=lambda j: (-j.priority, j.id)):
        placement = _choose(job, snapshot, gpus)
        if placement is None:
            need = "idle GPU(s)" if job.exclusive else f"GPU(s) with {job.memory_mib} MiB free"
            plan.waiting[job.id] = f"no ready node has {job.gpus} {need} that match the job"
            continue
        plan.placements.append(placement)
        for gpu_id in placement.gpu_ids:
            gpu = gpus[gpu_id]
            gpus[gpu_id] = replace(
                gpu, reserved_mib=gpu.reserved_mib + placement.reserved_mib, jobs=gpu.jobs + 1
            )
    return plan
