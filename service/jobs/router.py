"""`/v1/jobs`: submit, list, show and cancel jobs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response

from service.deps import (
    MAX_ID,
    EstimatorDep,
    JobId,
    Offset,
    SchedulerDep,
    SessionDep,
    SettingsDep,
)
from service.errors import ApiError
from service.events.service import EventFilters, list_events
from service.filters import JobFiltersDep
from service.jobs import service
from service.jobs.schemas import (
    ExplanationRead,
    GpuVerdictRead,
    JobCreate,
    JobList,
    JobRead,
)
from service.logs import service as logs
from service.logs.schemas import LogPage
from service.scheduler.cycle import explain_job

router = APIRouter(prefix="/jobs", tags=["jobs"])

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=128)]


@router.post("", status_code=201, response_model=JobRead)
def submit_job(
    job_in: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    estimator: EstimatorDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    """Submit a job; replaying the same Idempotency-Key returns the first job (200)."""
    job, created = service.create(
        session=session,
        job_in=job_in,
        owner=service.ANONYMOUS,
        settings=settings,
        estimator=estimator,
        idempotency_key=idempotency_key,
    )
    session.commit()
    if not created:
        response.status_code = 200
    return service.to_read(job)


@router.get("", response_model=JobList)
def list_jobs(
    session: SessionDep,
    filters: JobFiltersDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> JobList:
    """Jobs, newest first."""
    jobs, total = service.list_jobs(session=session, filters=filters, limit=limit, offset=offset)
    return service.to_list(jobs, total)


@router.get("/{job_id}", response_model=JobRead)
def get_job(job_id: JobId, session: SessionDep) -> JobRead:
    """One job with its attempts."""
    return service.to_read(service.get(session=session, job_id=job_id))


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(job_id: JobId, session: SessionDep) -> JobRead:
    """Cancel a pending job, or ask the agent to stop a placed or running one."""
    job = service.cancel(session=session, job=service.get(session=session, job_id=job_id))
    session.commit()
    return service.to_read(job)


@router.get("/{job_id}/explain", response_model=ExplanationRead)
def explain(
    job_id: JobId, session: SessionDep, scheduler: SchedulerDep, estimator: EstimatorDep
) -> ExplanationRead:
    """Per candidate GPU, why a pending job does or does not fit there; for a job that
    was placed, where and why."""
    job = service.get(session=session, job_id=job_id)
    if job.state != "pending":
        placed = list_events(
            session=session,
            filters=EventFilters(job_id=job_id, kind="job.placed"),
            limit=1,
            newest_first=True,
        )
        summary = placed[0].message if placed else "never placed"
        return ExplanationRead(job_id=job_id, state=job.state, summary=summary, gpus=[])
    explanation = explain_job(session, scheduler, job_id, estimator)
    session.commit()  # estimates made for GPU models new to this job are kept
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
    attempt: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    stream: Literal["stdout", "stderr"] = "stdout",
    offset: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=4 * 1024 * 1024)] = 1024 * 1024,
) -> LogPage:
    """A page of an attempt's stdout or stderr (the latest attempt unless one is named).

    Page on with `offset=next_offset` until it reaches `end_offset`."""
    job = service.get(session=session, job_id=job_id)
    if not job.attempts:
        raise ApiError(404, "no_attempt", f"job {job_id} has not been placed yet: no output")
    number = attempt or job.attempts[-1].number
    chosen = next((a for a in job.attempts if a.number == number), None)
    if chosen is None:
        raise ApiError(
            404, "not_found", f"job {job_id} has no attempt {number} (it has {len(job.attempts)})"
        )
    return logs.read(session, chosen, stream, offset, limit)
