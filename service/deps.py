"""FastAPI dependencies shared by the routers, as `Annotated` aliases.

Those that only read the app's state are `async def`: FastAPI runs a plain `def`
dependency on a worker thread, and a request hops between threads once per such call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from sqlalchemy.orm import Session

from estimator.estimate import Estimator
from service.config import Settings
from service.ids import MAX_ID
from service.scheduler.placement import Scheduler


def _session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _scheduler(request: Request) -> Scheduler:
    scheduler: Scheduler = request.app.state.scheduler
    return scheduler


JobId = Annotated[int, Path(ge=1, le=MAX_ID)]
NodeId = Annotated[int, Path(ge=1, le=MAX_ID)]
IdFilter = Annotated[int | None, Query(ge=1, le=MAX_ID)]
Offset = Annotated[int, Query(ge=0, le=MAX_ID)]

SessionDep = Annotated[Session, Depends(_session)]
SettingsDep = Annotated[Settings, Depends(_settings)]
SchedulerDep = Annotated[Scheduler, Depends(_scheduler)]


def _estimator(request: Request, session: SessionDep) -> Estimator:
    """The active estimator, with every observed peak so far."""
    estimator: Estimator = request.app.state.estimator_state.sync(session)
    return estimator


EstimatorDep = Annotated[Estimator, Depends(_estimator)]
