"""A job's attempts, as the scheduler places them and agents report them: every
function changes state inside the caller's transaction and records the matching
event, so a state change and its audit entry commit together. What an ended attempt
means for its job is decided by the pure rules of `service/scheduler/lifecycle.py`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.config import Settings
from service.db import utcnow
from service.errors import ApiError
from service.events.service import record
from service.jobs import observations
from service.jobs.models import Allocation, Attempt, Job
from service.nodes.makeup import cluster_gpus
from service.scheduler.lifecycle import (
    Ending,
    GpuHeld,
    JobHistory,
    ended_as,
    followed_reservation,
    settle,
)
from service.scheduler.states import (
    ACTIVE_ATTEMPT_STATES,
    FINAL_JOB_STATES,
    AttemptState,
    JobState,
)

PROBLEM_MAX_CHARS = 4096  # as much of a failure's reason as agents may send


def fail_unschedulable(*, session: Session, job: Job, problem: str) -> None:
    """End a waiting job the scheduler cannot handle (a spec stored before it could be
    refused, an estimate that fails): it alone fails, with the reason, and the cycle
    goes on for the others."""
    now = utcnow()
    job.state = JobState.FAILED
    # the problem may quote the spec: kept storable (no NUL) and readable (bounded)
    job.reason = f"cannot be scheduled: {problem.replace(chr(0), '')[:PROBLEM_MAX_CHARS]}"
    job.finished_at = job.updated_at = now
    record(session=session, kind="job.failed", job_id=job.id, message=job.reason)


def hold_unschedulable(*, session: Session, job: Job, problem: str) -> None:
    """Keep a waiting job the scheduler met an unexpected error on waiting, saying why
    (an event when the reason changes, not every cycle)."""
    reason = f"waiting: the scheduler cannot handle it now ({problem.replace(chr(0), '')})"
    reason = reason[:PROBLEM_MAX_CHARS]
    if job.reason != reason:
        job.reason = reason
        record(session=session, kind="job.unschedulable", job_id=job.id, message=reason)


def cancel(*, session: Session, job: Job) -> Job:
    """Cancel a pending job at once; ask the agent to stop an active one."""
    if job.state in FINAL_JOB_STATES:
        raise ApiError(409, "already_finished", f"job {job.id} already ended ({job.state})")
    now = utcnow()
    if job.state == JobState.PENDING:
        job.state = JobState.CANCELLED
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


def preempt(*, session: Session, job: Job, for_job: int) -> None:
    """Ask the agent to stop `job` so that `for_job` can have its GPUs; it waits again."""
    if job.preempt_requested or job.state not in (JobState.PLACED, JobState.RUNNING):
        return
    job.preempt_requested = True
    job.updated_at = utcnow()
    record(
        session=session,
        kind="job.preempting",
        job_id=job.id,
        message=f"preempted to make room for job {for_job}",
        data={"for_job": for_job},
    )


def mark_running(*, session: Session, attempt: Attempt, started_at: datetime | None) -> None:
    if attempt.state != AttemptState.PLACED:
        return
    attempt.state = AttemptState.RUNNING
    attempt.started_at = started_at or utcnow()
    attempt.job.state = JobState.RUNNING
    attempt.job.updated_at = utcnow()
    record(
        session=session,
        kind="job.running",
        job_id=attempt.job_id,
        node_id=attempt.node_id,
        message=f"attempt {attempt.number} started",
    )


def track_usage(
    *,
    session: Session,
    attempt: Attempt,
    peak_mib_by_gpu: dict[str, int],
    settings: Settings,
    current_mib_by_gpu: dict[str, int] | None = None,
) -> None:
    """Keep what a running attempt uses now, and let its reservation follow its peak.

    It grows at once when the job passes it, and shrinks to the observed peak plus the
    margin once that peak has held for `reservation_stable_s`, so packing improves as
    jobs reveal themselves.
    """
    for allocation in attempt.allocations:
        current = (current_mib_by_gpu or {}).get(allocation.gpu.uuid)
        if current is not None:
            allocation.used_mib = current
    if not peak_mib_by_gpu:
        return
    now = utcnow()
    peak = max(peak_mib_by_gpu.values())
    if peak > (attempt.peak_mib or 0):
        attempt.peak_mib = peak
        attempt.peak_changed_at = now
    steady_since = attempt.peak_changed_at or attempt.started_at or now
    steady_s = (now - steady_since).total_seconds()
    rules = settings.reservation_rules()
    for allocation in attempt.allocations:
        used = peak_mib_by_gpu.get(allocation.gpu.uuid)
        if used is None:
            continue
        target = followed_reservation(
            rules, used_mib=used, reserved_mib=allocation.reserved_mib, steady_s=steady_s
        )
        if target is not None:
            grow = used > allocation.reserved_mib
            record(
                session=session,
                kind="job.reservation",
                job_id=attempt.job_id,
                node_id=attempt.node_id,
                message=f"reservation on GPU {allocation.gpu.uuid} "
                f"{'grown' if grow else 'shrunk'} from {allocation.reserved_mib} to {target} "
                f"MiB (peak {used} MiB" + (")" if grow else f", steady for {steady_s:.0f} s)"),
            )
            allocation.reserved_mib = target
    attempt.reserved_mib = max(a.reserved_mib for a in attempt.allocations)


def end_attempt(
    *,
    session: Session,
    attempt: Attempt,
    outcome: AttemptState,
    settings: Settings,
    exit_code: int | None = None,
    reason: str | None = None,
    peak_mib_by_gpu: dict[str, int] | None = None,
    finished_at: datetime | None = None,
) -> None:
    """Close an attempt: release its GPUs, keep its peaks, and settle the job as the
    lifecycle rules decide (done, failed, or waiting again)."""
    if attempt.state not in ACTIVE_ATTEMPT_STATES:
        return
    job = attempt.job
    outcome = ended_as(
        outcome, preempt_requested=job.preempt_requested, cancel_requested=job.cancel_requested
    )
    now = utcnow()
    peaks = observations.store(
        session=session,
        attempt=attempt,
        outcome=outcome,
        peak_mib_by_gpu=peak_mib_by_gpu or {},
        now=now,
        finished_at=finished_at or now,
        settings=settings,
    )
    held = _gpus_held(session, attempt)
    earlier = [AttemptState(a.state) for a in job.attempts if a is not attempt]
    attempt.state = outcome
    attempt.finished_at = finished_at or now
    attempt.exit_code = exit_code
    attempt.reason = reason
    attempt.peak_mib = max(peaks) if peaks else attempt.peak_mib
    for allocation in attempt.allocations:
        allocation.active = False
    job.updated_at = now
    job.exit_code = exit_code
    job.preempt_requested = False
    message = f"attempt {attempt.number} ended {outcome}" + (f": {reason}" if reason else "")
    record(
        session=session,
        kind=f"job.{outcome}",
        job_id=job.id,
        node_id=attempt.node_id,
        message=message,
        data={"attempt": attempt.number, "exit_code": exit_code, "peak_mib": attempt.peak_mib},
    )
    decision = settle(
        settings.reservation_rules(),
        ending=Ending(outcome, reason, attempt.reserved_mib, attempt.peak_mib or 0, held),
        job=JobHistory(
            gpus=job.gpus,
            gpu_models=job.spec.get("gpu_models"),
            max_attempts=job.max_attempts,
            floor_mib=job.reservation_floor_mib,
            earlier=earlier,
        ),
        cluster=cluster_gpus(session),
        headroom_mib=settings.memory_headroom_mib,
    )
    job.reservation_floor_mib = decision.floor_mib
    if decision.backoff_s is not None:
        job.not_before = now + timedelta(seconds=decision.backoff_s)
    if decision.job_state == JobState.PENDING:
        _requeue(session, job, decision.reason or "", now)
        return
    job.state = decision.job_state
    job.finished_at = now
    job.reason = decision.reason


def _gpus_held(session: Session, attempt: Attempt) -> list[GpuHeld]:
    """The attempt's GPUs as it ended: capacity, foreign memory, and what its active
    neighbours reserve there."""
    held = []
    for allocation in attempt.allocations:
        neighbours = session.scalar(
            select(func.coalesce(func.sum(Allocation.reserved_mib), 0)).where(
                Allocation.gpu_id == allocation.gpu_id,
                Allocation.active.is_(True),
                Allocation.attempt_id != attempt.id,
            )
        )
        gpu = allocation.gpu
        held.append(GpuHeld(gpu.memory_total_mib, gpu.memory_foreign_mib, int(neighbours or 0)))
    return held


def _requeue(session: Session, job: Job, reason: str, now: datetime) -> None:
    job.state = JobState.PENDING
    job.reason = reason
    job.updated_at = now
    record(session=session, kind="job.requeued", job_id=job.id, message=reason)
