"""`POST /v1/estimate`: peak-memory estimates of a TrainingSpec per GPU model."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select

from estimator.estimate import Estimate, default_estimator
from estimator.gpus import GPU_MODELS, canonical_gpu_name
from estimator.spec import TrainingSpec
from service.auth.deps import UserDep, allow
from service.deps import EstimatorDep, SessionDep
from service.errors import ApiError
from service.estimates import accuracy
from service.estimates.accuracy import RATIO_BUCKETS, AccuracyFilters, AccuracyPoint
from service.estimates.service import PACKAGED, EstimatorState, active_version, versions
from service.filters import GpuModel, Owner, TimeRangeDep, resolve_gpu_model
from service.jobs.service import estimate_for
from service.nodes.models import Gpu

router = APIRouter(tags=["estimates"])


class EstimateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    training: TrainingSpec
    gpu_models: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] | None = (
        Field(default=None, min_length=1, max_length=64)
    )


class EstimateList(BaseModel):
    estimates: list[Estimate]


@router.post("/estimate", response_model=EstimateList)
def estimate(
    body: EstimateRequest, session: SessionDep, estimator: EstimatorDep, caller: UserDep
) -> EstimateList:
    """Estimates for the given GPU models (default: those in the cluster, else all known)."""
    cluster = sorted(set(session.scalars(select(Gpu.model))))
    if body.gpu_models is None:
        models = cluster or [model.name for model in GPU_MODELS]
    else:
        resolved = {name: canonical_gpu_name(name, tuple(cluster)) for name in body.gpu_models}
        unknown = [name for name, canonical in resolved.items() if canonical is None]
        if unknown:
            raise ApiError(
                422,
                "unknown_gpu_model",
                f"unknown GPU model(s): {', '.join(unknown)}",
                {"unknown": unknown, "known": sorted({*(m.name for m in GPU_MODELS), *cluster})},
            )
        models = [canonical for canonical in resolved.values() if canonical is not None]
    estimates = estimate_for(estimator, body.training, models, caller.name)  # caller's history
    return EstimateList(estimates=list(estimates.values()))


class EstimatorVersionRead(BaseModel):
    version: str
    created_at: datetime | None
    active: bool
    observations: int
    validation: dict[str, Any]


class RatioBucket(BaseModel):
    le: float  # observed / estimated peak at most this
    count: int  # cumulative


class ModelAccuracyRead(BaseModel):
    gpu_model: str
    observations: int
    underestimates: int  # observed peak above the reserved bound (upper_mib)
    underestimate_share: float
    mean_ratio: float  # observed / estimated peak
    ratio_buckets: list[RatioBucket]


class EstimatorRead(BaseModel):
    active: str
    versions: list[EstimatorVersionRead]
    observed_peaks: int
    accuracy: list[ModelAccuracyRead]  # per GPU model, over the filtered peaks
    points: list[AccuracyPoint]  # the newest filtered pairs, newest first


class Activate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Annotated[str, StringConstraints(min_length=1, max_length=64)]


def _estimator_read(
    session: SessionDep,
    state: EstimatorState,
    filters: AccuracyFilters | None = None,
    points: int = 0,
) -> EstimatorRead:
    estimator = state.sync(session)
    rows = versions(session)
    packaged = default_estimator()
    listed = [
        EstimatorVersionRead(
            version=PACKAGED,
            created_at=None,
            active=active_version(rows) == PACKAGED,
            observations=0,
            validation=packaged.artifact.manifest["validation"] if packaged.artifact else {},
        ),
        *(
            EstimatorVersionRead(
                version=r.version,
                created_at=r.created_at,
                active=r.active,
                observations=r.observations,
                validation=r.manifest.get("validation", {}),
            )
            for r in rows
        ),
    ]
    return EstimatorRead(
        active=active_version(rows),
        versions=listed,
        observed_peaks=len(estimator.observations),
        accuracy=[
            ModelAccuracyRead(
                gpu_model=m.gpu_model,
                observations=m.observations,
                underestimates=m.underestimates,
                underestimate_share=m.underestimates / m.observations,
                mean_ratio=m.ratio_sum / m.observations,
                ratio_buckets=[
                    RatioBucket(le=bound, count=n)
                    for bound, n in zip(RATIO_BUCKETS, m.ratio_buckets, strict=True)
                ],
            )
            for m in accuracy.by_model(session, filters or AccuracyFilters())
        ],
        points=accuracy.recent_points(session, filters or AccuracyFilters(), points)
        if points
        else [],
    )


@router.get(
    "/admin/estimator",
    response_model=EstimatorRead,
    tags=["admin"],
    dependencies=[Depends(allow("admin"))],
)
def get_estimator(
    session: SessionDep,
    request: Request,
    observed: TimeRangeDep,
    gpu_model: GpuModel = None,
    owner: Owner = None,
    points: Annotated[int, Query(ge=0, le=5000)] = 500,
) -> EstimatorRead:
    """Calibration versions (the packaged one first) and which is active; estimate
    against observed peak per GPU model (of one model or user, observed in a time
    range), with the newest `points` pairs for a scatter."""
    filters = AccuracyFilters(resolve_gpu_model(session, gpu_model), owner, observed)
    return _estimator_read(session, request.app.state.estimator_state, filters, points)


@router.post(
    "/admin/estimator/refit",
    response_model=EstimatorRead,
    tags=["admin"],
    dependencies=[Depends(allow("admin"))],
)
def refit_estimator(session: SessionDep, request: Request) -> EstimatorRead:
    """Retrain the calibration with every observed peak and make it active."""
    state: EstimatorState = request.app.state.estimator_state
    state.refit(session)
    session.commit()
    return _estimator_read(session, state)


@router.post(
    "/admin/estimator/activate",
    response_model=EstimatorRead,
    tags=["admin"],
    dependencies=[Depends(allow("admin"))],
)
def activate_estimator(body: Activate, session: SessionDep, request: Request) -> EstimatorRead:
    """Switch to a recorded calibration version, or back to "packaged"."""
    state: EstimatorState = request.app.state.estimator_state
    state.activate(session, body.version)
    session.commit()
    return _estimator_read(session, state)
