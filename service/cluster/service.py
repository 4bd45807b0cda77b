"""The users' cluster view, cut down from the admins' one so both count alike."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.admin.service import cluster
from service.cluster.schemas import ClusterSummary, GpuSummary, NodeSummary


def summary(*, session: Session, headroom_mib: int, gpu_model: str | None = None) -> ClusterSummary:
    """Every node's state and GPUs with memory and job counts; job ids, names, owners,
    observed use and agent details stay in the admin view."""
    nodes = []
    for node in cluster(session=session, headroom_mib=headroom_mib, gpu_model=gpu_model).nodes:
        gpus = [
            GpuSummary(
                index=gpu.index,
                model=gpu.model,
                memory_total_mib=gpu.memory_total_mib,
                memory_reserved_mib=gpu.memory_reserved_mib,
                memory_free_mib=gpu.memory_free_mib,
                healthy=gpu.healthy,
                running_jobs=len({a.job_id for a in gpu.allocations}),
            )
            for gpu in node.gpus
        ]
        jobs = {a.job_id for gpu in node.gpus for a in gpu.allocations}
        nodes.append(
            NodeSummary(name=node.name, state=node.state, gpus=gpus, running_jobs=len(jobs))
        )
    return ClusterSummary(nodes=nodes)
