"""`/v1/cluster`: the cluster as any authenticated user may read it."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.auth.deps import allow
from service.cluster import service
from service.cluster.schemas import ClusterSummary
from service.deps import SessionDep, SettingsDep
from service.filters import GpuModel, resolve_gpu_model

router = APIRouter(tags=["cluster"], dependencies=[Depends(allow("user"))])


@router.get("/cluster", response_model=ClusterSummary)
def get_cluster(
    session: SessionDep, settings: SettingsDep, gpu_model: GpuModel = None
) -> ClusterSummary:
    """Every node (with a GPU of one model, if named): state, GPUs, free, reserved and
    total memory, running job counts. Other users' jobs are not named."""
    return service.summary(
        session=session,
        headroom_mib=settings.memory_headroom_mib,
        gpu_model=resolve_gpu_model(session, gpu_model),
    )
