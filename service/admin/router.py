"""`/v1/admin`: what admins query about the cluster."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.admin import service
from service.admin.schemas import ClusterRead, EventList, EventRead
from service.deps import IdFilter, Offset, SessionDep, SettingsDep
from service.events.service import list_events
from service.jobs import service as jobs
from service.jobs.schemas import JobList

router = APIRouter(prefix="/admin", tags=["admin"])


@router.get("/cluster", response_model=ClusterRead)
def get_cluster(session: SessionDep, settings: SettingsDep) -> ClusterRead:
    """Every node and GPU: capacity, reservations per job, observed and foreign use."""
    return service.cluster(session=session, headroom_mib=settings.memory_headroom_mib)


@router.get("/jobs", response_model=JobList)
def get_jobs(
    session: SessionDep,
    state: Annotated[str | None, Query(max_length=16)] = None,
    owner: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> JobList:
    """Every user's jobs, newest first, optionally of one owner."""
    found, total = jobs.list_jobs(
        session=session, state=state, owner=owner, limit=limit, offset=offset
    )
    return jobs.to_list(found, total)


@router.get("/events", response_model=EventList)
def get_events(
    session: SessionDep,
    job_id: IdFilter = None,
    node_id: IdFilter = None,
    kind: Annotated[str | None, Query(max_length=48)] = None,
    after_id: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventList:
    """The audit log, oldest first; `after_id` pages forward."""
    events = list_events(
        session=session, job_id=job_id, node_id=node_id, kind=kind, after_id=after_id, limit=limit
    )
    return EventList(events=[EventRead.model_validate(e, from_attributes=True) for e in events])
