"""The device interface every backend implements; units are in the names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GpuDevice:
    """A GPU as the host sees it; fixed while the agent runs."""

    index: int
    uuid: str
    model: str
    memory_total_mib: int


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    used_mib: int


@dataclass(frozen=True)
class GpuSample:
    """One reading of a GPU's state."""

    uuid: str
    memory_used_mib: int
    utilization_pct: float
    healthy: bool
    processes: tuple[ProcessMemory, ...]


class DeviceBackend(Protocol):
    def devices(self) -> list[GpuDevice]:
        """Every GPU of this node."""
        ...

    def sample(self) -> list[GpuSample]:
        """The current state of every GPU, with per-process memory."""
        ...

    def job_environment(self) -> dict[str, str]:
        """Extra environment a job needs to reach these GPUs."""
        ...
