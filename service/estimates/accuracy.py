"""How the estimates the scheduler reserved by compare with the peaks agents observed.

Each observed peak (one attempt on one GPU) is paired with the estimate the job got for
that GPU model. The ratio observed / estimated peak is bucketed in SQL, so the admin
query and the Prometheus histogram read the same numbers at any history length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Select, case, func, select
from sqlalchemy.orm import Session

from service.filters import TimeRange
from service.jobs.models import Attempt, Job, JobEstimate, Observation

# upper bounds of the observed / estimated-peak buckets (Prometheus `le`)
RATIO_BUCKETS = (0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0)


@dataclass(frozen=True)
class AccuracyFilters:
    gpu_model: str | None = None
    owner: str | None = None
    observed: TimeRange = field(default_factory=TimeRange)


@dataclass(frozen=True)
class ModelAccuracy:
    gpu_model: str
    observations: int
    underestimates: int  # observed above the reserved bound (`upper_mib`)
    ratio_sum: float  # of observed / estimated peak
    ratio_buckets: tuple[int, ...]  # cumulative counts, one per RATIO_BUCKETS bound


class AccuracyPoint(BaseModel):
    """One observed peak beside the estimate its job got for that GPU model."""

    job_id: int
    attempt: int
    gpu_model: str
    observed_mib: int
    peak_mib: int
    upper_mib: int
    model_version: str
    at: datetime


def _paired(columns: list[Any], filters: AccuracyFilters) -> Select[Any]:
    query = (
        select(*columns)
        .select_from(Observation)
        .join(Attempt, Attempt.id == Observation.attempt_id)
        .join(Job, Job.id == Attempt.job_id)
        .join(
            JobEstimate,
            (JobEstimate.job_id == Job.id) & (JobEstimate.gpu_model == Observation.gpu_model),
        )
        .where(JobEstimate.peak_mib > 0)
    )
    if filters.gpu_model is not None:
        query = query.where(Observation.gpu_model == filters.gpu_model)
    if filters.owner is not None:
        query = query.where(Job.owner == filters.owner)
    if filters.observed.since is not None:
        query = query.where(Observation.created_at >= filters.observed.since)
    if filters.observed.until is not None:
        query = query.where(Observation.created_at < filters.observed.until)
    return query


def _count_where(condition: Any) -> Any:
    return func.sum(case((condition, 1), else_=0))


def by_model(session: Session, filters: AccuracyFilters) -> list[ModelAccuracy]:
    """Per GPU model: how many peaks, how many above the bound, the ratio histogram."""
    observed, peak = Observation.peak_mib, JobEstimate.peak_mib
    columns = [
        Observation.gpu_model,
        func.count(),
        _count_where(observed > JobEstimate.upper_mib),
        func.sum(observed * 1.0 / peak),
        *(_count_where(observed <= peak * bound) for bound in RATIO_BUCKETS),
    ]
    query = _paired(columns, filters).group_by(Observation.gpu_model)
    return [
        ModelAccuracy(
            gpu_model=row[0],
            observations=row[1],
            underestimates=int(row[2]),
            ratio_sum=float(row[3]),
            ratio_buckets=tuple(int(n) for n in row[4:]),
        )
        for row in session.execute(query.order_by(Observation.gpu_model))
    ]


def recent_points(session: Session, filters: AccuracyFilters, limit: int) -> list[AccuracyPoint]:
    """The newest `limit` pairs, for a scatter of estimate against observed peak."""
    columns = [
        Job.id.label("job_id"),
        Attempt.number.label("attempt"),
        Observation.gpu_model,
        Observation.peak_mib.label("observed_mib"),
        JobEstimate.peak_mib,
        JobEstimate.upper_mib,
        JobEstimate.model_version,
        Observation.created_at.label("at"),
    ]
    query = _paired(columns, filters).order_by(Observation.id.desc()).limit(limit)
    return [AccuracyPoint(**row._asdict()) for row in session.execute(query)]
