"""The read-only view of the cluster that placement decides on, and the plan it returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuView:
    id: int
    node_id: int
    index: int
    model: str
    memory_total_mib: int
    reserved_mib: int
    foreign_mib: int
    healthy: bool
    jobs: int

    @property
    def free_mib(self) -> int:
        """Capacity left after reservations and memory of processes Colloc did not start."""
        return self.memory_total_mib - self.reserved_mib - self.foreign_mib


@dataclass(frozen=True)
class NodeView:
    id: int
    name: str
    ready: bool


@dataclass(frozen=True)
class PendingJob:
    """A job waiting for GPUs.

    `exclusive` jobs (no memory claim) need idle GPUs and reserve them whole;
    `memory_mib` is then the least capacity such a GPU must have.
    """

    id: int
    priority: int
    gpus: int
    memory_mib: int
    exclusive: bool
    gpu_models: frozenset[str] | None = None


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeView, ...]
    gpus: tuple[GpuView, ...]
    pending: tuple[PendingJob, ...]


@dataclass(frozen=True)
class Placement:
    job_id: int
    node_id: int
    gpu_ids: tuple[int, ...]
    reserved_mib: int


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  # job id -> why it waits
