"""`POST /v1/estimate`: peak-memory estimates of a TrainingSpec per GPU model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select

from estimator.analytical.model import SpecError
from estimator.estimate import Estimate, Estimator
from estimator.gpus import GPU_MODELS, canonical_gpu_name
from estimator.spec import TrainingSpec
from service.deps import SessionDep
from service.errors import ApiError
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
def estimate(body: EstimateRequest, session: SessionDep, request: Request) -> EstimateList:
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
    estimator: Estimator = request.app.state.estimator
    try:
        return EstimateList(estimates=[estimator.estimate(body.training, m) for m in models])
    except SpecError as exc:
        raise ApiError(422, "invalid_training_spec", str(exc), {"problems": exc.problems}) from exc
