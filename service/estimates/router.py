"""`POST /v1/estimate`: peak-memory estimates of a TrainingSpec per GPU model; the
admin view of the estimator (calibration versions, accuracy, learned fixed costs)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select

from estimator.estimate import Estimate, default_estimator
from estimator.gpus import GPU_MODELS, describe, parse_compute_capability
from estimator.spec import TrainingSpec
from service.auth.deps import UserDep, allow
from service.deps import EstimatorDep, SessionDep
from service.errors import ApiError
from service.estimates import accuracy
from service.estimates.accuracy import RATIO_BUCKETS, AccuracyFilters, AccuracyPoint
from service.estimates.models import FixedCostOffset
from service.estimates.service import PACKAGED, EstimatorState, active_version, versions
from service.filters import GpuModel, Owner, TimeRangeDep, resolve_gpu_model
from service.jobs.submission import estimate_for
from service.nodes.models import Gpu

router = APIRouter(tags=["estimates"])


class GpuQuery(BaseModel):
    """A GPU to estimate on, described as far as the caller knows it; what is left
    out comes from the cluster's reports, the catalog, or stated generic defaults."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"\S")]
    memory_total_mib: int | None = Field(default=None, ge=1, le=16 * 1024 * 1024)
    compute_capability: (
        Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]?\.[0-9]{1,2}$")] | None
    ) = None


class EstimateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    training: TrainingSpec
    # any GPU names (a name nobody reported or catalogued gets generic defaults, said
    # in the estimate's `notes`), or `gpus` with what is known of each
    gpu_models: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] | None = (
        Field(default=None, min_length=1, max_length=64)
    )
    gpus: list[GpuQuery] | None = Field(default=None, min_length=1, max_length=64)


class EstimateList(BaseModel):
    estimates: list[Estimate]


@router.post("/estimate", response_model=EstimateList)
def estimate(
    body: EstimateRequest, session: SessionDep, estimator: EstimatorDep, caller: UserDep
) -> EstimateList:
    """Estimates for the given GPUs (default: the cluster's models, else every
    catalogued one). Any GPU name is estimated: as the cluster's agents reported it,
    as catalogued, or from stated generic defaults (see each estimate's `notes`)."""
    if body.gpu_models is not None and body.gpus is not None:
        raise ApiError(422, "invalid_request", "give gpu_models or gpus, not both")
    if body.gpus is not None:
        given = [
            describe(
                gpu.model,
                gpu.memory_total_mib,
                parse_compute_capability(gpu.compute_capability)
                if gpu.compute_capability
                else None,
            )
            for gpu in body.gpus
        ]
        estimator = replace(estimator, gpus={**estimator.gpus, **{g.name: g for g in given}})
        models = list(dict.fromkeys(g.name for g in given))
    elif body.gpu_models is not None:
        models = list(dict.fromkeys(estimator.describe(name).name for name in body.gpu_models))
    else:
        cluster = sorted(set(session.scalars(select(Gpu.model))))
        models = cluster or [model.name for model in GPU_MODELS]
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


class FixedCostOffsetRead(BaseModel):
    """One environment's learned fixed-cost offset (`estimator/offsets.py`)."""

    environment: str
    gpu_model: str
    driver_version: str | None
    observations: int  # successful training runs taken in
    offset_mib: float  # added to the default fixed cost of every process there
    margin_mib: float  # added to bounds there: the offset's own spread
    in_force: bool  # enough corroborated runs to be used (estimator.offsets)
    updated_at: datetime


class EstimatorRead(BaseModel):
    active: str
    model_version: str  # what estimates now carry: calibration + offsets in force
    versions: list[EstimatorVersionRead]
    fixed_cost_offsets: list[FixedCostOffsetRead]
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
        model_version=estimator.version,
        versions=listed,
        fixed_cost_offsets=[
            FixedCostOffsetRead(
                environment=o.environment,
                gpu_model=o.gpu_model,
                driver_version=o.driver_version,
                observations=o.observations,
                offset_mib=round(estimator.offsets.offset_mib(o.environment), 1),
                margin_mib=round(estimator.offsets.margin_mib(o.environment), 1),
                in_force=estimator.offsets.in_force(o.environment),
                updated_at=o.updated_at,
            )
            for o in session.scalars(select(FixedCostOffset).order_by(FixedCostOffset.environment))
        ],
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
