"""`/v1/jobs`: submit, list, show and cancel jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from service.deps import SessionDep, SettingsDep
from service.jobs import service
from service.jobs.schemas import JobCreate, JobList, JobRead

router = APIRouter(prefix="/jobs", tags=["jobs"])

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=128)]


@router.post("", status_code=201, response_model=JobRead)
def submit_job(
    job_in: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    """Submit a job; replaying the same Idempotency-Key returns the first job (200)."""
    job, created = service.create(
        session=session,
        job_in=job_in,
        owner=service.ANONYMOUS,
        settings=settings,
        idempotency_key=idempotency_key,
    )
    session.commit()
    if not created:
        response.status_code = 200
    return service.to_read(job)


@router.get("", response_model=JobList)
def list_jobs(
    session: SessionDep,
    state: Annotated[str | None, Query(max_length=16)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> JobList:
    """Jobs, newest first."""
    jobs, total = service.list_jobs(session=session, state=state, limit=limit, offset=offset)
    return service.to_list(jobs, total)


@router.get("/{job_id}", response_model=JobRead)
def get_job(job_id: int, session: SessionDep) -> JobRead:
    """One job with its attempts."""
    return service.to_read(service.get(session=session, job_id=job_id))


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(job_id: int, session: SessionDep) -> JobRead:
    """Cancel a pending job, or ask the agent to stop a placed or running one."""
    job = service.cancel(session=session, job=service.get(session=session, job_id=job_id))
    session.commit()
    return service.to_read(job)
