"""Job lifecycle: submission, cancellation, placement and attempt outcomes.

Every function here changes state inside the caller's transaction and records the
matching event, so a state change and its audit entry commit together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from estimator.gpus import GPU_MODELS, canonical_gpu_name
from service.config import Settings
from service.db import utcnow
from service.errors import ApiError, not_found
from service.events.service import record
from service.jobs.models import (
    ACTIVE_ATTEMPT_STATES,
    FINAL_JOB_STATES,
    Allocation,
    Attempt,
    Job,
    Observation,
)
from service.jobs.schemas import AttemptGpu, AttemptRead, JobCreate, JobList, JobRead
from service.nodes.models import Gpu

ANONYMOUS = "anonymous"


def _cluster_gpus(session: Session) -> list[tuple[int, str, int]]:
    """(node id, model, memory total) of every GPU ever registered."""
    rows = session.execute(select(Gpu.node_id, Gpu.model, Gpu.memory_total_mib))
    return [(node_id, model, total) for node_id, model, total in rows]


def _canonical_models(requested: list[str], known: Sequence[str]) -> list[str]:
    resolved: list[str] = []
    unknown: list[str] = []
    for name in requested:
        canonical = canonical_gpu_name(name, tuple(known))
        if canonical is None:
            unknown.append(name)
        elif canonical not in resolved:
            resolved.append(canonical)
    if unknown:
        choices = sorted({*(m.name for m in GPU_MODELS), *known})
        raise ApiError(
            422,
            "unknown_gpu_model",
            f"unknown GPU model(s): {', '.join(unknown)}",
            {"unknown": unknown, "known": choices},
        )
    return resolved


def _check_can_ever_fit(
    spec: JobCreate, models: list[str] | None, cluster: list[tuple[int, str, int]]
) -> None:
    """Refuse a job no node of the registered cluster could ever hold."""
    if not cluster:
        return  # nothing registered yet: the job waits for nodes
    eligible = [(node, total) for node, model, total in cluster if not models or model in models]
    per_node: dict[int, list[int]] = {}
    for node, total in eligible:
        if spec.memory_mib is None or total >= spec.memory_mib:
            per_node.setdefault(node, []).append(total)
    if any(len(totals) >= spec.gpus for totals in per_node.values()):
        return
    largest = max((total for _node, total in eligible), default=0)
    wanted = f"{spec.gpus} GPU(s)" + (
        f" with {spec.memory_mib} MiB each" if spec.memory_mib else ""
    )
    where = f" of model {', '.join(models)}" if models else ""
    raise ApiError(
        422,
        "never_fits",
        f"no node in the cluster can ever hold {wanted}{where}",
        {"largest_gpu_mib": largest, "gpus_requested": spec.gpus},
    )


def create(
    *,
    session: Session,
    job_in: JobCreate,
    owner: str,
    settings: Settings,
    idempotency_key: str | None = None,
) -> tuple[Job, bool]:
    """Submit a job; returns it and whether it is new (False: an idempotent replay)."""
    spec = job_in.model_dump(mode="json")
    if idempotency_key is not None:
        existing = session.scalar(
            select(Job).where(Job.owner == owner, Job.idempotency_key == idempotency_key)
        )
        if existing is not None:
            if existing.spec != spec:
                raise ApiError(
                    409,
                    "idempotency_conflict",
                    f"Idempotency-Key {idempotency_key!r} was used for a different job "
                    f"({existing.id})",
                )
            return existing, False
    cluster = _cluster_gpus(session)
    models = None
    if job_in.gpu_models is not None:
        models = _canonical_models(job_in.gpu_models, sorted({m for _n, m, _t in cluster}))
    _check_can_ever_fit(job_in, models, cluster)
    now = utcnow()
    job = Job(
        name=job_in.name,
        owner=owner,
        queue=job_in.queue,
        priority=job_in.priority,
        state="pending",
        spec={**spec, "gpu_models": models},
        gpus=job_in.gpus,
        memory_mib=job_in.memory_mib,
        reservation_floor_mib=None,
        max_attempts=job_in.max_attempts or settings.default_max_attempts,
        cancel_requested=False,
        idempotency_key=idempotency_key,
        created_at=now,
        updated_at=now,
    )
    session.add(job)
    session.flush()
    record(session=session, kind="job.submitted", job_id=job.id, message=f"job {job.id} submitted")
    return job, True


def get(*, session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise not_found("job", job_id)
    return job


def list_jobs(
    *,
    session: Session,
    state: str | None = None,
    owner: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[Job], int]:
    """Jobs, newest first, with the total matching count."""
    query = select(Job)
    if state is not None:
        query = query.where(Job.state == state)
    if owner is not None:
        query = query.where(Job.owner == owner)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    page = query.order_by(Job.id.desc()).limit(limit).offset(offset)
    jobs = session.scalars(page.options(_READ_OPTIONS)).all()
    return list(jobs), total


def cancel(*, session: Session, job: Job) -> Job:
    """Cancel a pending job at once; ask the agent to stop an active one."""
    if job.state in FINAL_JOB_STATES:
        raise ApiError(409, "already_finished", f"job {job.id} already ended ({job.state})")
    now = utcnow()
    if job.state == "pending":
        job.state = "cancelled"
        job.finished_at = now
        job.reason = "cancelled before it was placed"
        record(session=session, kind="job.cancelled", job_id=job.id, message=job.reason)
    elif not job.cancel_requested:
        job.cancel_requested = True
        record(
            session=session,
            kind="job.cancel_requested",
            job_id=job.id,
            message=f"cancellation of job {job.id} sent to its agent",
        )
    job.updated_at = now
    return job


def current_attempt(job: Job) -> Attempt | None:
    return job.attempts[-1] if job.attempts else None


def start_attempt(
    *, session: Session, job: Job, node_id: int, gpus: list[Gpu], reserved_mib: int
) -> Attempt:
    """Place a pending job: a new attempt holding `reserved_mib` on each of `gpus`."""
    now = utcnow()
    attempt = Attempt(
        job_id=job.id,
        number=len(job.attempts) + 1,
        node_id=node_id,
        state="placed",
        reserved_mib=reserved_mib,
        placed_at=now,
    )
    session.add(attempt)
    job.attempts.append(attempt)
    for gpu in gpus:
        session.add(Allocation(attempt=attempt, gpu_id=gpu.id, reserved_mib=reserved_mib))
    job.state = "placed"
    job.reason = None
    job.updated_at = now
    where = ", ".join(f"{gpu.model} #{gpu.index} ({gpu.uuid})" for gpu in gpus)
    record(
        session=session,
        kind="job.placed",
        job_id=job.id,
        node_id=node_id,
        message=f"attempt {attempt.number} placed on {where}, {reserved_mib} MiB per GPU",
        data={"attempt": attempt.number, "gpus": [gpu.uuid for gpu in gpus]},
    )
    return attempt


def mark_running(*, session: Session, attempt: Attempt, started_at: datetime | None) -> None:
    if attempt.state != "placed":
        return
    attempt.state = "running"
    attempt.started_at = started_at or utcnow()
    attempt.job.state = "running"
    attempt.job.updated_at = utcnow()
    record(
        session=session,
        kind="job.running",
        job_id=attempt.job_id,
        node_id=attempt.node_id,
        message=f"attempt {attempt.number} started",
    )


def end_attempt(
    *,
    session: Session,
    attempt: Attempt,
    outcome: str,
    settings: Settings,
    exit_code: int | None = None,
    reason: str | None = None,
    peak_mib_by_gpu: dict[str, int] | None = None,
    finished_at: datetime | None = None,
) -> None:
    """Close an attempt: release its GPUs, keep its peaks, and settle the job.

    An `oom` or `lost` attempt is retried while the job's attempt budget lasts; after an
    OOM no later attempt reserves less than the factor times what this one needed.
    """
    if attempt.state not in ACTIVE_ATTEMPT_STATES:
        return
    job = attempt.job
    if job.cancel_requested and outcome != "succeeded":
        outcome = "cancelled"
    now = utcnow()
    peaks = _store_observations(session, attempt, peak_mib_by_gpu or {}, now)
    attempt.state = outcome
    attempt.finished_at = finished_at or now
    attempt.exit_code = exit_code
    attempt.reason = reason
    attempt.peak_mib = max(peaks) if peaks else None
    for allocation in attempt.allocations:
        allocation.active = False
    job.updated_at = now
    job.exit_code = exit_code
    message = f"attempt {attempt.number} ended {outcome}" + (f": {reason}" if reason else "")
    record(
        session=session,
        kind=f"job.{outcome}",
        job_id=job.id,
        node_id=attempt.node_id,
        message=message,
        data={"attempt": attempt.number, "exit_code": exit_code, "peak_mib": attempt.peak_mib},
    )
    retry = outcome in ("oom", "lost") and attempt.number < job.max_attempts
    if retry and outcome == "oom":
        needed = max(attempt.reserved_mib, attempt.peak_mib or 0)
        floor = math.ceil(needed * settings.oom_reservation_factor)
        job.reservation_floor_mib = max(floor, job.reservation_floor_mib or 0)
        retry = _largest_eligible_gpu_mib(session, job) >= job.reservation_floor_mib
        reason = (
            f"requeued with at least {job.reservation_floor_mib} MiB per GPU"
            if retry
            else f"needs at least {job.reservation_floor_mib} MiB per GPU, "
            "more than any eligible GPU has"
        )
    elif retry:
        reason = "requeued after the attempt was lost"
    if retry:
        job.state = "pending"
        job.reason = reason
        record(
            session=session,
            kind="job.requeued",
            job_id=job.id,
            message=f"{reason} (attempt {attempt.number + 1} of {job.max_attempts})",
        )
        return
    job.state = outcome
    job.finished_at = now
    job.reason = reason


def _store_observations(
    session: Session, attempt: Attempt, peak_mib_by_gpu: dict[str, int], now: datetime
) -> list[int]:
    """Record the observed peak on each of the attempt's GPUs; returns the peaks kept."""
    peaks = []
    for allocation in attempt.allocations:
        peak = peak_mib_by_gpu.get(allocation.gpu.uuid)
        if peak is None:
            continue
        peaks.append(peak)
        session.add(
            Observation(
                attempt_id=attempt.id,
                gpu_id=allocation.gpu_id,
                gpu_model=allocation.gpu.model,
                peak_mib=peak,
                created_at=now,
            )
        )
    return peaks


def _largest_eligible_gpu_mib(session: Session, job: Job) -> int:
    models = job.spec.get("gpu_models")
    query = select(func.max(Gpu.memory_total_mib))
    if models:
        query = query.where(Gpu.model.in_(models))
    return session.scalar(query) or 0


_READ_OPTIONS = selectinload(Job.attempts).options(
    selectinload(Attempt.node),
    selectinload(Attempt.allocations).selectinload(Allocation.gpu),
)


def to_read(job: Job) -> JobRead:
    """The API view of a job, its attempts and their GPUs."""
    return JobRead(
        id=job.id,
        name=job.name,
        owner=job.owner,
        queue=job.queue,
        priority=job.priority,
        state=job.state,
        command=job.spec["command"],
        gpus=job.gpus,
        gpu_models=job.spec.get("gpu_models"),
        memory_mib=job.memory_mib,
        reservation_floor_mib=job.reservation_floor_mib,
        max_attempts=job.max_attempts,
        cancel_requested=job.cancel_requested,
        exit_code=job.exit_code,
        reason=job.reason,
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
        attempts=[
            AttemptRead(
                number=attempt.number,
                state=attempt.state,
                node=attempt.node.name,
                gpus=[
                    AttemptGpu(
                        uuid=a.gpu.uuid,
                        index=a.gpu.index,
                        model=a.gpu.model,
                        reserved_mib=a.reserved_mib,
                    )
                    for a in sorted(attempt.allocations, key=lambda a: a.gpu.index)
                ],
                reserved_mib=attempt.reserved_mib,
                placed_at=attempt.placed_at,
                started_at=attempt.started_at,
                finished_at=attempt.finished_at,
                exit_code=attempt.exit_code,
                reason=attempt.reason,
                peak_mib=attempt.peak_mib,
            )
            for attempt in job.attempts
        ],
    )


def to_list(jobs: list[Job], total: int) -> JobList:
    return JobList(jobs=[to_read(job) for job in jobs], total=total)
