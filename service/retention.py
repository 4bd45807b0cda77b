"""Pruning what the cluster no longer needs: finished jobs, events, log chunks and usage
samples past their age or count limits (settings `retention_*`), in the background.

Each kind is pruned oldest first in batches of `retention_batch_rows`: a batch is found
by reading, then deleted in one short transaction, so a backlog never holds the write
lock for long. Nothing of a
job that is not finished is ever removed.

The estimator rebuilds its history at start-up from credible peaks of succeeded or OOM
attempts joined to their jobs' specs (estimates/service.py), so a finished job with
such a peak keeps its job, attempt, observation and estimate rows whatever its age;
only its events, allocations and logs go. Every other finished job goes whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, exists, func, select
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db import read_transaction, transaction, utcnow
from service.events.models import Event
from service.jobs.models import Allocation, Attempt, Job, JobEstimate, Observation
from service.logs.models import LogChunk
from service.periodic import Periodic
from service.scheduler.states import ENDED_ATTEMPT_STATES, FINAL_JOB_STATES, AttemptState
from service.usage.models import UsageSample

log = logging.getLogger(__name__)

# the attempts whose credible peaks the estimator learns from (EstimatorState.sync)
LEARNED_ATTEMPT_STATES = (AttemptState.SUCCEEDED, AttemptState.OOM)


def _learned_from() -> ColumnElement[bool]:
    """Whether a job holds a peak the estimator learns from."""
    return exists().where(
        Observation.attempt_id == Attempt.id,
        Attempt.job_id == Job.id,
        Observation.credible.is_(True),
        Attempt.state.in_(LEARNED_ATTEMPT_STATES),
    )


def _finished_jobs() -> ColumnElement[bool]:
    return Job.state.in_(FINAL_JOB_STATES) & Job.finished_at.is_not(None)


def _over_count(session: Session, ordered: Any, keep: int) -> Any:
    """The value of the ordering column at the `keep`-th newest row of `ordered`
    (a select of one column, newest first): rows older than it are past the count."""
    return session.scalar(ordered.offset(keep).limit(1))


def find_jobs(session: Session, settings: Settings, now: datetime) -> list[int]:
    """Ids of finished jobs past their age or the count, not learned from, oldest first."""
    cutoff = now - timedelta(days=settings.retention_job_days)
    newest_first = (
        select(Job.finished_at)
        .where(_finished_jobs(), ~_learned_from())
        .order_by(Job.finished_at.desc())
    )
    past_count = _over_count(session, newest_first, settings.retention_max_finished_jobs)
    if past_count is not None:
        cutoff = max(cutoff, past_count + timedelta(microseconds=1))
    return list(
        session.scalars(
            select(Job.id)
            .where(_finished_jobs(), Job.finished_at < cutoff, ~_learned_from())
            .order_by(Job.finished_at, Job.id)
            .limit(settings.retention_batch_rows)
        )
    )


def delete_jobs(session: Session, found: list[int]) -> None:
    """Remove these jobs (those still finished) and every row that refers to them."""
    job_ids = list(session.scalars(select(Job.id).where(Job.id.in_(found), _finished_jobs())))
    attempts = select(Attempt.id).where(Attempt.job_id.in_(job_ids))
    for model in (LogChunk, Allocation, Observation):
        session.execute(delete(model).where(model.attempt_id.in_(attempts)))
    session.execute(delete(Attempt).where(Attempt.job_id.in_(job_ids)))
    for owned in (JobEstimate, Event):
        session.execute(delete(owned).where(owned.job_id.in_(job_ids)))
    session.execute(delete(Job).where(Job.id.in_(job_ids)))


def _active_job() -> ColumnElement[bool]:
    return exists().where(Job.id == Event.job_id, Job.state.not_in(FINAL_JOB_STATES))


def find_events(session: Session, settings: Settings, now: datetime) -> list[int]:
    """A batch of events past their age or the count (never an unfinished job's)."""
    cutoff_id = session.scalar(
        select(Event.id).where(Event.at < now - timedelta(days=settings.retention_event_days))
        .order_by(Event.id.desc()).limit(1)
    ) or 0  # fmt: skip
    past_count = _over_count(
        session, select(Event.id).order_by(Event.id.desc()), settings.retention_max_events
    )
    cutoff_id = max(cutoff_id, past_count or 0)
    ids = list(
        session.scalars(
            select(Event.id)
            .where(Event.id <= cutoff_id, ~_active_job())
            .order_by(Event.id)
            .limit(settings.retention_batch_rows)
        )
    )
    return ids


def _ended() -> ColumnElement[bool]:
    return Attempt.state.in_(ENDED_ATTEMPT_STATES) & Attempt.finished_at.is_not(None)


def delete_logs(session: Session, attempt_ids: list[int]) -> None:
    session.execute(delete(LogChunk).where(LogChunk.attempt_id.in_(attempt_ids)))


def find_old_logs(session: Session, settings: Settings, now: datetime) -> list[int]:
    """A batch of attempts that ended before the age limit and hold logs."""
    cutoff = now - timedelta(days=settings.retention_log_days)
    ids = session.scalars(
        select(Attempt.id)
        .where(_ended(), Attempt.finished_at < cutoff)
        .where(exists().where(LogChunk.attempt_id == Attempt.id))
        .order_by(Attempt.finished_at, Attempt.id)
        .limit(settings.retention_batch_rows)
    )
    return list(ids)


def find_logs_past_total(session: Session, settings: Settings, now: datetime) -> list[int]:
    """While all logs together hold more than `retention_max_log_bytes`, the attempts
    that ended first whose logs bring it within (a batch at most)."""
    held = session.scalar(select(func.coalesce(func.sum(LogChunk.size), 0)))
    excess = int(held or 0) - settings.retention_max_log_bytes
    if excess <= 0:
        return []
    ids = []
    sizes = session.execute(
        select(Attempt.id, func.sum(LogChunk.size))
        .join(LogChunk, LogChunk.attempt_id == Attempt.id)
        .where(_ended())
        .group_by(Attempt.id, Attempt.finished_at)
        .order_by(Attempt.finished_at, Attempt.id)
        .limit(settings.retention_batch_rows)
    )
    for attempt_id, size in sizes:
        if excess <= 0:
            break
        ids.append(attempt_id)
        excess -= int(size)
    return ids


def find_usage(session: Session, settings: Settings, now: datetime) -> list[int]:
    """A batch of usage samples past the count (the sampler drops them by age)."""
    past_count = _over_count(
        session, select(UsageSample.id).order_by(UsageSample.id.desc()),
        settings.retention_max_usage_samples,
    )  # fmt: skip
    if past_count is None:
        return []
    return list(
        session.scalars(
            select(UsageSample.id)
            .where(UsageSample.id <= past_count)
            .order_by(UsageSample.id)
            .limit(settings.retention_batch_rows)
        )
    )


def _deleting(model: type[Event] | type[UsageSample]) -> Callable[[Session, list[int]], None]:
    def delete_rows(session: Session, ids: list[int]) -> None:
        session.execute(delete(model).where(model.id.in_(ids)))

    return delete_rows


Find = Callable[[Session, Settings, datetime], list[int]]
# what each kind's rows past their limits are (ids), and how they are removed
PRUNERS: dict[str, tuple[Find, Callable[[Session, list[int]], None]]] = {
    "jobs": (find_jobs, delete_jobs),
    "events": (find_events, _deleting(Event)),
    "logs": (find_old_logs, delete_logs),
    "logs past the total": (find_logs_past_total, delete_logs),
    "usage samples": (find_usage, _deleting(UsageSample)),
}


def prune_all(
    sessions: sessionmaker[Session], settings: Settings, now: datetime | None = None
) -> dict[str, int]:
    """Prune every kind, a batch at a time, until none is left past its limits at `now`
    (the present unless a simulation says); returns how many of each went (attempts for
    logs). Each batch is found in a read transaction and removed in a write one, so
    SQLite's write lock is held only while rows are deleted."""
    removed = dict.fromkeys(PRUNERS, 0)
    now = now or utcnow()
    for kind, (find, remove) in PRUNERS.items():
        while True:
            with read_transaction(sessions) as session:
                ids = find(session, settings, now)
            if ids:
                with transaction(sessions) as session:
                    remove(session, ids)
            removed[kind] += len(ids)
            if len(ids) < settings.retention_batch_rows:
                break
    return removed


def pruner(sessions: sessionmaker[Session], settings: Settings) -> Periodic:
    """Prunes every `retention_interval_s`, first at start-up."""

    def tick() -> None:
        removed = prune_all(sessions, settings)
        if any(removed.values()):
            log.info("pruned %s", ", ".join(f"{n} {kind}" for kind, n in removed.items() if n))

    return Periodic("retention", settings.retention_interval_s, tick, at_once=True)
