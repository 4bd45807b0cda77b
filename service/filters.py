"""The filters the job and admin queries and the dashboard share, as FastAPI dependencies.

Every admin query narrows by the same names (state, owner, queue, GPU model, a time
range), so a dashboard view and the API call behind it always show the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.protocol import UtcTime
from estimator.gpus import canonical_gpu_name
from service.deps import SessionDep
from service.errors import ApiError
from service.nodes.models import Gpu
from service.scheduler.states import JobState

Owner = Annotated[str | None, Query(max_length=128, description="owner (user) name")]
GpuModel = Annotated[
    str | None, Query(max_length=128, description="GPU model; aliases such as A100-40GB work")
]
# in UTC, clamped to what can be stored, as agents' times are (agent/protocol.py)
Since = Annotated[UtcTime | None, Query(description="from this time (inclusive)")]
Until = Annotated[UtcTime | None, Query(description="before this time")]


@dataclass(frozen=True)
class TimeRange:
    since: datetime | None = None
    until: datetime | None = None


def _time_range(since: Since = None, until: Until = None) -> TimeRange:
    if since is not None and until is not None and since >= until:
        raise ApiError(422, "invalid_time_range", "`since` must be before `until`")
    return TimeRange(since, until)


def resolve_gpu_model(session: Session, name: str | None) -> str | None:
    """The cluster's name for `name` (aliases allowed); a name no GPU has stays as given
    (it matches nothing, which is an answer, not an error)."""
    if name is None:
        return None
    known = tuple(sorted(set(session.scalars(select(Gpu.model)))))
    return canonical_gpu_name(name, known) or name


TimeRangeDep = Annotated[TimeRange, Depends(_time_range)]


@dataclass(frozen=True)
class JobFilters:
    """Jobs narrowed by state, owner, queue, the GPU model an attempt ran on, and the
    time they were submitted."""

    states: tuple[JobState, ...] = ()  # any of these (none: every state)
    owner: str | None = None
    queue: str | None = None
    gpu_model: str | None = None
    created: TimeRange = field(default_factory=TimeRange)


def _job_filters(
    session: SessionDep,
    created: TimeRangeDep,
    state: Annotated[
        list[JobState] | None, Query(max_length=8, description="any of these states (repeat it)")
    ] = None,
    owner: Owner = None,
    queue: Annotated[str | None, Query(max_length=64)] = None,
    gpu_model: GpuModel = None,
) -> JobFilters:
    states = tuple(dict.fromkeys(state or ()))
    return JobFilters(states, owner, queue, resolve_gpu_model(session, gpu_model), created)


JobFiltersDep = Annotated[JobFilters, Depends(_job_filters)]
