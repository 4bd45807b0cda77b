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
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from estimator.estimate import Estimate, Estimator, proven_peaks
from service.db import utcnow
from service.errors import ApiError
from service.jobs import submission as jobs
from service.jobs.models import Allocation, Attempt, Job, JobEstimate
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

    job_id: int
    problem: str
    for_good: bool


@dataclass(frozen=True)
class WaitingRow:
    """What the write phase needs of a waiting job in the snapshot."""

    id: int
    attempts: int  # how many it had: a new one is numbered next
    reason: str | None  # as stored: rewritten only when it changes


@dataclass(frozen=True)
class SnapshotRows:
    """A snapshot with what the rows it was read from say beyond it (to write a plan
    against), the estimates made for it and the jobs it left out."""

    snapshot: Snapshot
    jobs: dict[int, WaitingRow]  # the waiting jobs in the snapshot, by id
    gpus: dict[int, GpuView]
    new_estimates: dict[int, dict[str, Estimate]]  # by job id, then GPU model
    unschedulable: dict[int, Unschedulable]  # by job id


@dataclass
class _Stored:
    """A stored estimate, as much of it as placement reads."""

    peak_mib: int
    upper_mib: int
    method: str


# A waiting job's columns the snapshot reads: no ORM object is built for it (at
# thousands of jobs and GPUs a second, building them was most of a cycle's reading).
_WAITING = (
    Job.id,
    Job.priority,
    Job.gpus,
    Job.memory_mib,
    Job.reservation_floor_mib,
    Job.spec,
    Job.owner,
    Job.queue,
    Job.not_before,
    Job.reason,
)


def _missing_estimates(
    estimator: Estimator, job: Any, stored: Mapping[str, _Stored], models: list[str]
) -> dict[str, Estimate]:
    """A training job's estimates on GPU models it has none for."""
    if job.memory_mib is not None or not job.spec.get("training"):
        return {}
    missing = [m for m in models if m not in stored]
    if not missing:
        return {}
    training = jobs.training_spec(job)
    assert training is not None
    return jobs.estimate_for(estimator, training, missing, job.owner)


def _pending_view(
    job: Any, estimates: Mapping[str, _Stored | Estimate], room_mib: dict[str, int]
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


@dataclass(frozen=True)
class Held:
    """What active attempts hold: per GPU, the memory reserved and how many hold it;
    per attempt, its GPUs and its largest reservation."""

    reserved_mib: dict[int, int]
    jobs: dict[int, int]
    gpus_of: dict[int, list[int]]
    largest_mib: dict[int, int]


def held_now(session: Session) -> Held:
    """What active attempts hold now, from one statement over their live allocations."""
    rows = session.execute(
        select(Allocation.attempt_id, Allocation.gpu_id, Allocation.reserved_mib)
        .join(Attempt, Attempt.id == Allocation.attempt_id)
        .where(Attempt.state.in_(ACTIVE_ATTEMPT_STATES), Allocation.active.is_(True))
        .order_by(Allocation.id)
    )
    held = Held({}, {}, {}, {})
    for attempt_id, gpu_id, mib in rows:
        held.reserved_mib[gpu_id] = held.reserved_mib.get(gpu_id, 0) + mib
        held.jobs[gpu_id] = held.jobs.get(gpu_id, 0) + 1
        held.gpus_of.setdefault(attempt_id, []).append(gpu_id)
        held.largest_mib[attempt_id] = max(held.largest_mib.get(attempt_id, 0), mib)
    return held


def gpu_view(row: Any, held: Held) -> GpuView:
    used, foreign = row.memory_used_mib, row.memory_foreign_mib
    return GpuView(
        id=row.gpu_id,
        node_id=row.node_id,
        index=row.index,
        model=row.model,
        memory_total_mib=row.memory_total_mib,
        reserved_mib=held.reserved_mib.get(row.gpu_id, 0),
        # as Gpu.jobs_used_mib and Gpu.busy_pct read them
        used_mib=0 if used is None else max(0, used - foreign),
        foreign_mib=foreign,
        utilization_pct=100.0 if row.utilization_pct is None else row.utilization_pct,
        healthy=row.healthy,
        jobs=held.jobs.get(row.gpu_id, 0),
        uuid=row.uuid,
    )


GPU_COLUMNS = (
    Gpu.id.label("gpu_id"),
    Gpu.node_id,
    Gpu.index,
    Gpu.model,
    Gpu.memory_total_mib,
    Gpu.memory_used_mib,
    Gpu.memory_foreign_mib,
    Gpu.utilization_pct,
    Gpu.healthy,
    Gpu.uuid,
)


def _running(session: Session, held: Held) -> tuple[RunningJob, ...]:
    """The active attempts' jobs, as quotas and preemption see them."""
    rows = session.execute(
        select(
            Attempt.id,
            Job.id.label("job_id"),
            Job.priority,
            Job.owner,
            Job.queue,
            Job.spec,
            Job.preempt_requested,
        )
        .join(Job, Job.id == Attempt.job_id)
        .where(Attempt.state.in_(ACTIVE_ATTEMPT_STATES))
        .order_by(Attempt.id)
    )
    return tuple(
        RunningJob(
            id=row.job_id,
            priority=row.priority,
            owner=row.owner,
            queue=row.queue,
            gpu_ids=tuple(held.gpus_of.get(row.id, ())),
            reserved_mib=held.largest_mib.get(row.id, 0),
            preemptible=bool(row.spec.get("preemptible")) and not row.preempt_requested,
        )
        for row in rows
    )


def _stored_estimates(session: Session) -> dict[int, dict[str, _Stored]]:
    """The waiting jobs' stored estimates, by job id and GPU model."""
    rows = session.execute(
        select(JobEstimate.job_id, JobEstimate.gpu_model, JobEstimate.peak_mib)
        .add_columns(JobEstimate.upper_mib, JobEstimate.method)
        .join(Job, Job.id == JobEstimate.job_id)
        .where(Job.state == JobState.PENDING)
    )
    stored: dict[int, dict[str, _Stored]] = {}
    for row in rows:
        stored.setdefault(row.job_id, {})[row.gpu_model] = _Stored(
            row.peak_mib, row.upper_mib, row.method
        )
    return stored


def _attempt_counts(session: Session) -> dict[int, int]:
    """How many attempts each waiting job has had (none: absent)."""
    rows = session.execute(
        select(Attempt.job_id, func.count())
        .join(Job, Job.id == Attempt.job_id)
        .where(Job.state == JobState.PENDING)
        .group_by(Attempt.job_id)
    )
    return {job_id: count for job_id, count in rows}


def read_snapshot(
    session: Session, headroom_mib: int, estimator: Estimator | None = None
) -> SnapshotRows:
    """The snapshot placement decides on; with `estimator`, waiting jobs are estimated
    on the GPU models they lack estimates for.

    Columns, not ORM objects, one statement per kind of row. Nodes and their GPUs come
    from one statement, so a node registering meanwhile is seen whole or not at all.
    One job never stops the reading for the others."""
    rows = session.execute(
        select(Node.id, Node.name, Node.state, Node.admin_state, *GPU_COLUMNS)
        .outerjoin(Gpu, Gpu.node_id == Node.id)
        .order_by(Node.id, Gpu.id)
    ).all()
    nodes = {  # a cordoned or draining node takes no new placements
        row.id: NodeView(row.id, row.name, row.state == "ready" and row.admin_state == "active")
        for row in rows
    }
    held = held_now(session)
    gpus = {row.gpu_id: gpu_view(row, held) for row in rows if row.gpu_id is not None}
    waiting = session.execute(
        select(*_WAITING)
        .where(Job.state == JobState.PENDING, Job.held.is_(False))  # held: until released
        .order_by(Job.id)
    ).all()
    stored = _stored_estimates(session)
    attempts = _attempt_counts(session)
    models = sorted({g.model for g in gpus.values()})
    room = room_by_model(((g.model, g.memory_total_mib) for g in gpus.values()), headroom_mib)
    views: list[PendingJob] = []
    placeable: dict[int, WaitingRow] = {}
    new_estimates: dict[int, dict[str, Estimate]] = {}
    unschedulable: dict[int, Unschedulable] = {}
    for job in waiting:
        kept = stored.get(job.id, {})
        try:
            made = _missing_estimates(estimator, job, kept, models) if estimator is not None else {}
            views.append(_pending_view(job, {**kept, **made}, room))
        except (OperationalError, InterfaceError):
            raise  # the database, not the job: the cycle is retried
        except (ApiError, ValidationError) as exc:
            unschedulable[job.id] = Unschedulable(job.id, str(exc), for_good=True)
            continue
        except Exception as exc:
            unschedulable[job.id] = Unschedulable(job.id, repr(exc), for_good=False)
            log.exception("job %d left out of the snapshot", job.id)
            continue
        placeable[job.id] = WaitingRow(job.id, attempts.get(job.id, 0), job.reason)
        if made:
            new_estimates[job.id] = made
    snapshot = Snapshot(
        nodes=tuple(nodes.values()),
        gpus=tuple(gpus.values()),
        pending=tuple(views),
        running=_running(session, held),
        now=utcnow(),
    )
    return SnapshotRows(snapshot, placeable, gpus, new_estimates, unschedulable)
