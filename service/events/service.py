"""Recording and reading events."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import utcnow
from service.events.models import Event


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


def list_events(
    *,
    session: Session,
    job_id: int | None = None,
    node_id: int | None = None,
    kind: str | None = None,
    after_id: int = 0,
    limit: int = 100,
) -> list[Event]:
    """Events in order of occurrence, optionally filtered."""
    query = select(Event).where(Event.id > after_id).order_by(Event.id).limit(limit)
    if job_id is not None:
        query = query.where(Event.job_id == job_id)
    if node_id is not None:
        query = query.where(Event.node_id == node_id)
    if kind is not None:
        query = query.where(Event.kind == kind)
    return list(session.scalars(query))
