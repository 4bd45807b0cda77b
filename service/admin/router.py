"""`/v1/admin`: what admins query about the cluster, with the dashboard's filters."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from service.admin import service
from service.admin.schemas import (
    ClusterRead,
    EventList,
    EventRead,
    UsagePoint,
    UsageSeries,
    UtilizationRead,
)
from service.auth.deps import allow
from service.db import utcnow
from service.deps import IdFilter, Offset, SessionDep, SettingsDep
from service.events.service import EventFilters, count_events, list_events
from service.filters import GpuModel, JobFiltersDep, Owner, TimeRangeDep, resolve_gpu_model
from service.jobs import queries as jobs
from service.jobs.schemas import JobList, JobSummary
from service.usage.service import series

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(allow("admin"))])

# a utilisation query returns at most this many points per series
MAX_POINTS = 1000


@router.get("/cluster", response_model=ClusterRead)
def get_cluster(
    session: SessionDep, settings: SettingsDep, gpu_model: GpuModel = None
) -> ClusterRead:
    """Every node and GPU (of one model, if named): capacity, reservations per job,
    observed and foreign use, health."""
    return service.cluster(
        session=session,
        headroom_mib=settings.memory_headroom_mib,
        gpu_model=resolve_gpu_model(session, gpu_model),
    )


@router.get("/jobs", response_model=JobList)
def get_jobs(
    session: SessionDep,
    filters: JobFiltersDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> JobList:
    """Every user's jobs, newest first: by state, owner, queue, the GPU model an
    attempt ran on, and submission time (`since` inclusive, `until` exclusive)."""
    found, total = jobs.list_jobs(session=session, filters=filters, limit=limit, offset=offset)
    return JobList(jobs=[JobSummary.model_validate(job) for job in found], total=total)


@router.get("/utilization", response_model=UtilizationRead)
def get_utilization(
    session: SessionDep,
    settings: SettingsDep,
    time_range: TimeRangeDep,
    group_by: Literal["gpu_model", "owner"] = "gpu_model",
    gpu_model: GpuModel = None,
    owner: Owner = None,
    step_s: Annotated[float | None, Query(gt=0, le=86400 * 30)] = None,
) -> UtilizationRead:
    """Memory reserved and used over time, per GPU model or per user (default: the
    last hour, in steps of the sampling interval or longer, at most 1,000 points)."""
    until = time_range.until or utcnow()
    since = time_range.since or until - timedelta(hours=1)
    span_s = (until - since).total_seconds()
    step = max(step_s or settings.usage_sample_interval_s, span_s / MAX_POINTS)
    found = series(
        session,
        group_by=group_by,
        since=since,
        until=until,
        step_s=step,
        gpu_model=resolve_gpu_model(session, gpu_model),
        owner=owner,
    )
    return UtilizationRead(
        group_by=group_by,
        since=since,
        until=until,
        step_s=step,
        sample_interval_s=settings.usage_sample_interval_s,
        series=[
            UsageSeries(key=key, points=[UsagePoint(at=p.at, **p.values) for p in points])
            for key, points in found.items()
        ],
    )


@router.get("/events", response_model=EventList)
def get_events(
    session: SessionDep,
    time_range: TimeRangeDep,
    job_id: IdFilter = None,
    node_id: IdFilter = None,
    kind: Annotated[str | None, Query(max_length=48)] = None,
    owner: Owner = None,
    after_id: Offset = 0,
    order: Literal["oldest", "newest"] = "oldest",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventList:
    """The audit log: the oldest matching events after `after_id` (page forward with
    the last id), or with `order=newest` the newest ones, newest first."""
    filters = EventFilters(job_id=job_id, node_id=node_id, kind=kind, owner=owner, at=time_range)
    events = list_events(
        session=session,
        filters=filters,
        after_id=after_id,
        limit=limit,
        newest_first=order == "newest",
    )
    return EventList(
        events=[EventRead.model_validate(e, from_attributes=True) for e in events],
        total=count_events(session=session, filters=filters),
    )
