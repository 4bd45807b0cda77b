"""Database rows -> the core's Snapshot. A read: it writes nothing.

Estimates a waiting job lacks (GPU models that joined the cluster after it) are made in
memory and handed back with the snapshot; the cycle's write phase stores them, explain
only shows them. A job the reading cannot turn into a view is handed back too, with
its problem, for the write phase to fail or hold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, selectinload

from estimator.estimate import Estimate, Estimator, proven_peaks
from service.db import utcnow
from service.errors import ApiError
from service.jobs import submission as jobs
from service.jobs.models import Attempt, Job, JobEstimate
from service.nodes.models import Gpu, Node
from service.scheduler.snapshot import (
    GpuView,
    NodeView,
    PendingJob,
    RunningJob,
    Snapshot,
    pending_job,
    room_by_model,
)
from service.scheduler.states import ACTIVE_ATTEMPT_STATES, JobState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unschedulable:
    """A waiting job left out of the snapshot, and why. `for_good`: its spec is at fault
    (stored before it could be refused), so it fails; otherwise the server met an
    unexpected error on it (a fix or a restart may cure), so it waits."""

    job: Job
    problem: str
    for_good: bool


@dataclass(frozen=True)
class SnapshotRows:
    """A snapshot with the rows it was read from (to write a plan against), the
    estimates made for it and the jobs it left out."""

    snapshot: Snapshot
    jobs: dict[int, Job]  # the waiting jobs in the snapshot, by id
    gpus: dict[int, Gpu]
    new_estimates: dict[int, dict[str, Estimate]]  # by job id, then GPU model
    unschedulable: dict[int, Unschedulable]  # by job id


def _missing_estimates(estimator: Estimator, job: Job, models: list[str]) -> dict[str, Estimate]:
    """A training job's estimates on GPU models it has none for."""
    if job.memory_mib is not None or not job.spec.get("training"):
        return {}
    missing = [m for m in models if m not in {e.gpu_model for e in job.estimates}]
    if not missing:
        return {}
    training = jobs.training_spec(job)
    assert training is not None
    return jobs.estimate_for(estimator, training, missing, job.owner)


def _pending_view(
    job: Job, estimates: Mapping[str, JobEstimate | Estimate], room_mib: dict[str, int]
) -> PendingJob:
    models = job.spec.get("gpu_models")
    return pending_job(
        id=job.id,
        priority=job.priority,
        gpus=job.gpus,
        memory_mib=job.memory_mib,
        upper_mib={model: e.upper_mib for model, e in estimates.items()},
        floor_mib=job.reservation_floor_mib or 0,
        gpu_models=frozenset(models) if models else None,
        owner=job.owner,
        queue=job.queue,
        not_before=job.not_before,
        proven_mib=proven_peaks(estimates),
        room_mib=room_mib,
    )


def active_attempts(session: Session) -> list[Attempt]:
    return list(
        session.scalars(
            select(Attempt)
            .where(Attempt.state.in_(ACTIVE_ATTEMPT_STATES))
            .options(selectinload(Attempt.allocations), selectinload(Attempt.job))
        )
    )


def gpu_views_of(gpus: list[Gpu], active: list[Attempt]) -> tuple[GpuView, ...]:
    """Each GPU with the reservations and job count of the attempts active on it."""
    reserved: dict[int, int] = {}
    count: dict[int, int] = {}
    for attempt in active:
        for allocation in attempt.allocations:
            if allocation.active:
                gpu_id = allocation.gpu_id
                reserved[gpu_id] = reserved.get(gpu_id, 0) + allocation.reserved_mib
                count[gpu_id] = count.get(gpu_id, 0) + 1
    return tuple(
        GpuView(
            id=gpu.id,
            node_id=gpu.node_id,
            index=gpu.index,
            model=gpu.model,
            memory_total_mib=gpu.memory_total_mib,
            reserved_mib=reserved.get(gpu.id, 0),
            used_mib=gpu.jobs_used_mib,
            foreign_mib=gpu.memory_foreign_mib,
            utilization_pct=gpu.busy_pct,
            healthy=gpu.healthy,
            jobs=count.get(gpu.id, 0),
            uuid=gpu.uuid,
        )
        for gpu in gpus
    )


def _running(attempt: Attempt) -> RunningJob:
    job = attempt.job
    live = [a for a in attempt.allocations if a.active]
    return RunningJob(
        id=job.id,
        priority=job.priority,
        owner=job.owner,
        queue=job.queue,
        gpu_ids=tuple(a.gpu_id for a in live),
        reserved_mib=max((a.reserved_mib for a in live), default=0),
        preemptible=bool(job.spec.get("preemptible")) and not job.preempt_requested,
    )


def read_snapshot(
    session: Session, headroom_mib: int, estimator: Estimator | None = None
) -> SnapshotRows:
    """The snapshot placement decides on; with `estimator`, waiting jobs are estimated
    on the GPU models they lack estimates for.

    Nodes and their GPUs come from one statement, so a node registering meanwhile is
    seen whole or not at all. One job never stops the reading for the others."""
    rows = session.execute(select(Node, Gpu).outerjoin(Gpu, Gpu.node_id == Node.id)).all()
    nodes = {node.id: node for node, _gpu in rows}
    gpus = {gpu.id: gpu for _node, gpu in rows if gpu is not None}
    waiting = session.scalars(
        select(Job)
        .where(Job.state == JobState.PENDING)
        .options(selectinload(Job.attempts), selectinload(Job.estimates))
    )
    models = sorted({g.model for g in gpus.values()})
    room = room_by_model(((g.model, g.memory_total_mib) for g in gpus.values()), headroom_mib)
    views: list[PendingJob] = []
    placeable: dict[int, Job] = {}
    new_estimates: dict[int, dict[str, Estimate]] = {}
    unschedulable: dict[int, Unschedulable] = {}
    for job in waiting:
        try:
            made = _missing_estimates(estimator, job, models) if estimator is not None else {}
            stored = {e.gpu_model: e for e in job.estimates}
            views.append(_pending_view(job, {**stored, **made}, room))
        except (OperationalError, InterfaceError):
            raise  # the database, not the job: the cycle is retried
        except (ApiError, ValidationError) as exc:
            unschedulable[job.id] = Unschedulable(job, str(exc), for_good=True)
            continue
        except Exception as exc:
            unschedulable[job.id] = Unschedulable(job, repr(exc), for_good=False)
            log.exception("job %d left out of the snapshot", job.id)
            continue
        placeable[job.id] = job
        if made:
            new_estimates[job.id] = made
    active = active_attempts(session)
    snapshot = Snapshot(
        nodes=tuple(NodeView(n.id, n.name, n.state == "ready") for n in nodes.values()),
        gpus=gpu_views_of(list(gpus.values()), active),
        pending=tuple(views),
        running=tuple(_running(attempt) for attempt in active),
        now=utcnow(),
    )
    return SnapshotRows(snapshot, placeable, gpus, new_estimates, unschedulable)
