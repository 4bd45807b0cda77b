"""Reading jobs: one by id, and a filtered page."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from service.errors import not_found
from service.filters import JobFilters
from service.jobs.models import Allocation, Attempt, Job
from service.nodes.models import Gpu


def get(*, session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise not_found("job", job_id)
    return job


# what the API view of a job reads (views.to_read), loaded with the page
_READ_OPTIONS = (
    selectinload(Job.attempts).options(
        selectinload(Attempt.node),
        selectinload(Attempt.allocations).selectinload(Allocation.gpu),
    ),
    selectinload(Job.estimates),
)


def list_jobs(
    *, session: Session, filters: JobFilters, limit: int = 100, offset: int = 0
) -> tuple[list[Job], int]:
    """Jobs, newest first, with the total matching count."""
    query = select(Job)
    if filters.states:
        query = query.where(Job.state.in_(filters.states))
    if filters.owner is not None:
        query = query.where(Job.owner == filters.owner)
    if filters.queue is not None:
        query = query.where(Job.queue == filters.queue)
    if filters.gpu_model is not None:
        ran_there = (
            select(Attempt.job_id)
            .join(Allocation, Allocation.attempt_id == Attempt.id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .where(Gpu.model == filters.gpu_model)
        )
        query = query.where(Job.id.in_(ran_there))
    if filters.created.since is not None:
        query = query.where(Job.created_at >= filters.created.since)
    if filters.created.until is not None:
        query = query.where(Job.created_at < filters.created.until)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    page = query.order_by(Job.id.desc()).limit(limit).offset(offset)
    jobs = session.scalars(page.options(*_READ_OPTIONS)).all()
    return list(jobs), total
