"""The device interface every backend implements; units are in the names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GpuDevice:
    """A GPU as the host sees it; fixed while the agent runs. The estimator describes
    it from these: its compute capability, the driver and the CUDA version that driver
    supports (e.g. 12040 for 12.4), and its bare CUDA context as the agent measured it
    (`agent/context_probe.py`); None where unknown."""

    index: int
    uuid: str
    model: str
    memory_total_mib: int
    compute_capability: tuple[int, int] | None = None
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    context_mib: int | None = None

    def description(self) -> dict[str, object]:
        """The device as registration reports it."""
        capability = self.compute_capability
        return {
            "uuid": self.uuid,
            "index": self.index,
            "model": self.model,
            "memory_total_mib": self.memory_total_mib,
            "compute_capability": ".".join(map(str, capability)) if capability else None,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "context_mib": self.context_mib,
        }


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    used_mib: int


@dataclass(frozen=True)
class GpuSample:
    """One reading of a GPU's state; None where the GPU cannot tell.

    `lost` means the GPU stopped answering (fell off the bus); `xid_errors` are the
    critical XID events seen since the previous sample; `ecc_uncorrected` is the
    volatile count of uncorrected ECC errors since the driver loaded. Whether all this
    makes the GPU unhealthy is the agent's call (`agent.health`), not the backend's.
    """

    uuid: str
    memory_used_mib: int
    utilization_pct: float
    processes: tuple[ProcessMemory, ...]
    lost: bool = False
    memory_utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    mig_enabled: bool | None = None
    ecc_uncorrected: int | None = None
    xid_errors: tuple[int, ...] = ()


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
