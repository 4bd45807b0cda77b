"""`/v1/jobs`: submit, list, show, cancel, hold, release and requeue jobs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from estimator.estimate import Estimator
from service.auth.deps import UserDep, allow
from service.auth.tokens import Principal
from service.deps import (
    EstimatorDep,
    JobId,
    Offset,
    SchedulerDep,
    SessionDep,
    SettingsDep,
)
from service.errors import ApiError, not_found
from service.events.service import EventFilters, list_events
from service.filters import JobFiltersDep
from service.ids import MAX_ID
from service.jobs import lifecycle, observations, queries, submission
from service.jobs.models import Job
from service.jobs.schemas import (
    ExplanationRead,
    GpuVerdictRead,
    JobCreate,
    JobList,
    JobPriority,
    JobRead,
    JobSummary,
    TrustedPeaks,
)
from service.logs import service as logs
from service.logs.schemas import LogPage
from service.scheduler.states import JobState
from service.scheduling.views import explain_job

router = APIRouter(prefix="/jobs", tags=["jobs"])
AdminDep = Annotated[Principal, Depends(allow())]


def _visible_job(session: Session, job_id: int, caller: Principal) -> Job:
    """The job, if the caller may see it: admins see every job, users their own (to a
    user, another's job does not exist)."""
    job = queries.get(session=session, job_id=job_id)
    if caller.role != "admin" and job.owner != caller.name:
        raise not_found("job", job_id)
    return job


IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=128)]


async def _estimator_when_needed(request: Request, session: SessionDep) -> Callable[[], Estimator]:
    """The active estimator, brought up to date only when called: a job without a
    training spec is never estimated, and bringing it up to date reads the learnable
    observations, the active version, the reported GPUs and the offsets (7 of a plain
    submit's 12 statements, issue 19)."""
    return lambda: request.app.state.estimator_state.sync(session)


@router.post("", status_code=201, response_model=JobRead)
def submit_job(
    job_in: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    estimator: Annotated[Callable[[], Estimator], Depends(_estimator_when_needed)],
    response: Response,
    caller: UserDep,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    """Submit a job; replaying the same Idempotency-Key returns the first job (200)."""

    def create() -> tuple[Job, bool]:
        return submission.create(
            session=session,
            job_in=job_in,
            owner=caller.name,
            settings=settings,
            estimator=estimator,
            idempotency_key=idempotency_key,
            admin=caller.role == "admin",
        )

    try:
        job, created = create()
        session.commit()
    except IntegrityError:
        if idempotency_key is None:
            raise
        session.rollback()  # a concurrent retry with this key made the job first: its answer
        job, created = create()
    if not created:
        response.status_code = 200
    return JobRead.model_validate(job)


@router.get("", response_model=JobList)
def list_jobs(
    session: SessionDep,
    filters: JobFiltersDep,
    caller: UserDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> JobList:
    """Jobs, newest first: a user's own, or with an admin token everyone's."""
    if caller.role != "admin":
        filters = replace(filters, owner=caller.name)
    jobs, total = queries.list_jobs(session=session, filters=filters, limit=limit, offset=offset)
    return JobList(jobs=[JobSummary.model_validate(job) for job in jobs], total=total)


@router.get("/{job_id}", response_model=JobRead)
def get_job(job_id: JobId, session: SessionDep, caller: UserDep) -> JobRead:
    """One job with its attempts."""
    return JobRead.model_validate(_visible_job(session, job_id, caller))


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(job_id: JobId, session: SessionDep, caller: UserDep) -> JobRead:
    """Cancel a pending job, or ask the agent to stop a placed or running one."""
    job = lifecycle.cancel(session=session, job=_visible_job(session, job_id, caller))
    session.commit()
    return JobRead.model_validate(job)


@router.post("/{job_id}/hold", response_model=JobRead)
def hold_job(job_id: JobId, session: SessionDep, caller: UserDep) -> JobRead:
    """Keep a pending job from being scheduled until it is released (its owner or an
    admin)."""
    job = lifecycle.hold(session=session, job=_visible_job(session, job_id, caller), by=caller.name)
    session.commit()
    return JobRead.model_validate(job)


@router.post("/{job_id}/release", response_model=JobRead)
def release_job(job_id: JobId, session: SessionDep, caller: UserDep) -> JobRead:
    """Let a held job be scheduled again (its owner or an admin)."""
    job = _visible_job(session, job_id, caller)
    lifecycle.release(session=session, job=job, by=caller.name)
    session.commit()
    return JobRead.model_validate(job)


@router.post("/{job_id}/requeue", response_model=JobRead)
def requeue_job(job_id: JobId, session: SessionDep, caller: UserDep) -> JobRead:
    """Stop a placed or running job's attempt and let the job wait again (its owner or
    an admin); the stopped attempt ends `preempted` and does not count as a try."""
    job = _visible_job(session, job_id, caller)
    lifecycle.requeue(session=session, job=job, why=f"requeued by {caller.name}")
    session.commit()
    return JobRead.model_validate(job)


@router.post("/{job_id}/priority", response_model=JobRead)
def set_priority(
    job_id: JobId, body: JobPriority, session: SessionDep, caller: AdminDep
) -> JobRead:
    """Change a job's priority (admins only: users set theirs at submission, up to their
    queue's maximum)."""
    job = queries.get(session=session, job_id=job_id)
    submission.set_priority(session=session, job=job, priority=body.priority, by=caller.name)
    session.commit()
    return JobRead.model_validate(job)


@router.post("/{job_id}/trust", response_model=TrustedPeaks)
def trust_peaks(job_id: JobId, session: SessionDep, caller: AdminDep) -> TrustedPeaks:
    """Vouch for a job's observed peaks (admins only): until then they answer only for
    their owner's jobs, and others' only where another owner's run of the spec on the
    same GPU model agrees with them (estimator/history.py)."""
    count = observations.trust(session=session, job=queries.get(session=session, job_id=job_id))
    session.commit()
    return TrustedPeaks(job_id=job_id, trusted_peaks=count)


@router.get("/{job_id}/explain", response_model=ExplanationRead)
def explain(
    job_id: JobId,
    session: SessionDep,
    scheduler: SchedulerDep,
    estimator: EstimatorDep,
    caller: UserDep,
) -> ExplanationRead:
    """Per candidate GPU, why a pending job does or does not fit there; for a job that
    was placed, where and why."""
    job = _visible_job(session, job_id, caller)
    if job.state != JobState.PENDING:
        placed = list_events(
            session=session,
            filters=EventFilters(job_id=job_id, kind="job.placed"),
            limit=1,
            newest_first=True,
        )
        summary = placed[0].message if placed else "never placed"
        return ExplanationRead(job_id=job_id, state=job.state, summary=summary, gpus=[])
    if job.held:  # left out of the scheduler's snapshot until released
        summary = f"{job.reason}: not scheduled until released"
        return ExplanationRead(job_id=job_id, state=job.state, summary=summary, gpus=[])
    explanation = explain_job(session, scheduler, job_id, estimator)
    return ExplanationRead(
        job_id=job_id,
        state=job.state,
        summary=explanation.summary,
        gpus=[
            GpuVerdictRead(
                node=v.node,
                gpu_index=v.index,
                model=v.model,
                free_mib=v.free_mib,
                demand_mib=v.demand_mib,
                fits=v.fits,
                reasons=list(v.reasons),
                score=v.score,
                held_for_job=v.held_for,
            )
            for v in explanation.gpus
        ],
    )


@router.get("/{job_id}/logs", response_model=LogPage)
def job_logs(
    job_id: JobId,
    session: SessionDep,
    caller: UserDep,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    stream: Literal["stdout", "stderr"] = "stdout",
    offset: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=4 * 1024 * 1024)] = 1024 * 1024,
) -> LogPage:
    """A page of an attempt's stdout or stderr (the latest attempt unless one is named).

    Page on with `offset=next_offset` until it reaches `end_offset`."""
    job = _visible_job(session, job_id, caller)
    if not job.attempts:
        raise ApiError(404, "no_attempt", f"job {job_id} has not been placed yet: no output")
    number = attempt or job.attempts[-1].number
    chosen = next((a for a in job.attempts if a.number == number), None)
    if chosen is None:
        raise ApiError(
            404, "not_found", f"job {job_id} has no attempt {number} (it has {len(job.attempts)})"
        )
    return logs.read(session, chosen, stream, offset, limit)
