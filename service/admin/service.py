"""Building the cluster view admins query."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from service.admin.schemas import ClusterRead, GpuAllocationRead, GpuRead, NodeRead
from service.jobs.models import Allocation, Attempt
from service.nodes.models import Node
from service.scheduling.views import gpu_views


def cluster(*, session: Session, headroom_mib: int, gpu_model: str | None = None) -> ClusterRead:
    """Every node and GPU (of `gpu_model` only, when named; nodes without one are left
    out) with its reservations, observed and foreign memory; free memory is counted as
    the scheduler counts it."""
    views = gpu_views(session)
    nodes = session.scalars(select(Node).options(selectinload(Node.gpus)).order_by(Node.name))
    active = session.scalars(
        select(Allocation)
        .where(Allocation.active.is_(True))
        .options(selectinload(Allocation.attempt).selectinload(Attempt.job))
    ).all()
    by_gpu: dict[int, list[Allocation]] = {}
    for allocation in active:
        by_gpu.setdefault(allocation.gpu_id, []).append(allocation)
    result = []
    for node in nodes:
        gpus = []
        for gpu in node.gpus:
            if gpu_model is not None and gpu.model != gpu_model:
                continue
            allocations = by_gpu.get(gpu.id, [])
            view = views[gpu.id]
            gpus.append(
                GpuRead(
                    uuid=gpu.uuid,
                    index=gpu.index,
                    model=gpu.model,
                    memory_total_mib=gpu.memory_total_mib,
                    compute_capability=gpu.compute_capability,
                    driver_version=gpu.driver_version,
                    cuda_driver_version=gpu.cuda_driver_version,
                    context_mib=gpu.context_mib,
                    memory_reserved_mib=view.reserved_mib,
                    memory_used_mib=gpu.memory_used_mib,
                    memory_foreign_mib=gpu.memory_foreign_mib,
                    memory_free_mib=max(0, view.free_mib(headroom_mib)),
                    utilization_pct=gpu.utilization_pct,
                    memory_utilization_pct=gpu.memory_utilization_pct,
                    temperature_c=gpu.temperature_c,
                    power_w=gpu.power_w,
                    mig_enabled=gpu.mig_enabled,
                    healthy=gpu.healthy,
                    health_reason=gpu.health_reason,
                    allocations=[
                        GpuAllocationRead(
                            job_id=a.attempt.job_id,
                            job_name=a.attempt.job.name,
                            owner=a.attempt.job.owner,
                            attempt=a.attempt.number,
                            reserved_mib=a.reserved_mib,
                            used_mib=a.used_mib,
                        )
                        for a in allocations
                    ],
                )
            )
        if gpu_model is not None and not gpus:
            continue
        result.append(
            NodeRead(
                id=node.id,
                name=node.name,
                state=node.state,
                admin_state=node.admin_state,
                drain_deadline=node.drain_deadline,
                agent_version=node.agent_version,
                registered_at=node.registered_at,
                last_heartbeat_at=node.last_heartbeat_at,
                gpus=gpus,
            )
        )
    return ClusterRead(nodes=result)
