"""What a user may see of the cluster: capacity and load, not other users' jobs."""

from __future__ import annotations

from pydantic import BaseModel


class GpuSummary(BaseModel):
    index: int
    model: str
    memory_total_mib: int
    memory_reserved_mib: int
    memory_free_mib: int  # as the scheduler counts it (headroom and foreign use taken off)
    healthy: bool
    running_jobs: int  # jobs holding a reservation on this GPU


class NodeSummary(BaseModel):
    name: str
    state: str
    gpus: list[GpuSummary]
    running_jobs: int  # distinct jobs holding a reservation on any of the node's GPUs


class ClusterSummary(BaseModel):
    nodes: list[NodeSummary]
