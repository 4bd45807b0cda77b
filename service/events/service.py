"""Recording and reading events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from service.db import utcnow
from service.events.models import Event
from service.filters import TimeRange
from service.jobs.models import Job

T = TypeVar("T", bound=tuple[Any, ...])


def record(
    *,
    session: Session,
    kind: str,
    message: str,
    job_id: int | None = None,
    node_id: int | None = None,
    data: dict[str, Any] | None = None,
) -> Event:
    """Append one event to the log, inside the caller's transaction."""
    event = Event(
        at=utcnow(), kind=kind, message=message, job_id=job_id, node_id=node_id, data=data or {}
    )
    session.add(event)
    return event


@dataclass(frozen=True)
class EventFilters:
    job_id: int | None = None
    node_id: int | None = None
    kind: str | None = None
    owner: str | None = None  # events of this user's jobs
    at: TimeRange = field(default_factory=TimeRange)


def _filtered(query: Select[T], filters: EventFilters) -> Select[T]:
    if filters.job_id is not None:
        query = query.where(Event.job_id == filters.job_id)
    if filters.node_id is not None:
        query = query.where(Event.node_id == filters.node_id)
    if filters.kind is not None:
        query = query.where(Event.kind == filters.kind)
    if filters.owner is not None:
        query = query.where(Event.job_id.in_(select(Job.id).where(Job.owner == filters.owner)))
    if filters.at.since is not None:
        query = query.where(Event.at >= filters.at.since)
    if filters.at.until is not None:
        query = query.where(Event.at < filters.at.until)
    return query


def list_events(
    *,
    session: Session,
    filters: EventFilters,
    after_id: int = 0,
    limit: int = 100,
    newest_first: bool = False,
) -> list[Event]:
    """Matching events after `after_id`: the oldest `limit` of them in order of
    occurrence, or the newest `limit`, newest first."""
    query = _filtered(select(Event).where(Event.id > after_id), filters)
    order = Event.id.desc() if newest_first else Event.id
    return list(session.scalars(query.order_by(order).limit(limit)))


def count_events(*, session: Session, filters: EventFilters) -> int:
    """How many events match, whatever page is read."""
    query = _filtered(select(func.count()).select_from(Event), filters)
    return session.scalar(query) or 0
