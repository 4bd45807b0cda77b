"""Building the cluster view admins query."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from service.admin.schemas import ClusterRead, GpuAllocationRead, GpuRead, NodeRead
from service.jobs.models import Allocation
from service.nodes.models import Node


def cluster(*, session: Session) -> ClusterRead:
    """Every node and GPU with its reservations, observed and foreign memory."""
    nodes = session.scalars(select(Node).options(selectinload(Node.gpus)).order_by(Node.name))
    active = session.scalars(
        select(Allocation)
        .where(Allocation.active.is_(True))
        .options(selectinload(Allocation.attempt))
    ).all()
    by_gpu: dict[int, list[Allocation]] = {}
    for allocation in active:
        by_gpu.setdefault(allocation.gpu_id, []).append(allocation)
    views = []
    for node in nodes:
        gpus = []
        for gpu in node.gpus:
            allocations = by_gpu.get(gpu.id, [])
            reserved = sum(a.reserved_mib for a in allocations)
            gpus.append(
                GpuRead(
                    uuid=gpu.uuid,
                    index=gpu.index,
                    model=gpu.model,
                    memory_total_mib=gpu.memory_total_mib,
                    memory_reserved_mib=reserved,
                    memory_used_mib=gpu.memory_used_mib,
                    memory_foreign_mib=gpu.memory_foreign_mib,
                    memory_free_mib=gpu.memory_total_mib - reserved - gpu.memory_foreign_mib,
                    utilization_pct=gpu.utilization_pct,
                    healthy=gpu.healthy,
                    allocations=[
                        GpuAllocationRead(
                            job_id=a.attempt.job_id,
                            attempt=a.attempt.number,
                            reserved_mib=a.reserved_mib,
                        )
                        for a in allocations
                    ],
                )
            )
        views.append(
            NodeRead(
                id=node.id,
                name=node.name,
                state=node.state,
                agent_version=node.agent_version,
                registered_at=node.registered_at,
                last_heartbeat_at=node.last_heartbeat_at,
                gpus=gpus,
            )
        )
    return ClusterRead(nodes=views)
