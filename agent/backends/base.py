"""The device interface every backend implements; units are in the names. A GPU is
described as registration reports it (`agent.protocol.GpuInfo`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.protocol import GpuInfo


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    used_mib: int | None  # None where the driver cannot attribute it (e.g. under MIG)


@dataclass(frozen=True)
class GpuSample:
    """One reading of a GPU's state; None where the GPU cannot tell (never 0: a GPU
    whose use is unknown must not look free).

    `lost` means the GPU stopped answering (fell off the bus); `xid_errors` are the
    critical XID events seen since the previous sample; `ecc_uncorrected` is the
    volatile count of uncorrected ECC errors since the driver loaded. Whether all this
    makes the GPU unhealthy is the agent's call (`agent.health`), not the backend's.
    """

    uuid: str
    memory_used_mib: int | None
    utilization_pct: float | None
    processes: tuple[ProcessMemory, ...]
    lost: bool = False
    memory_utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    mig_enabled: bool | None = None
    ecc_uncorrected: int | None = None
    xid_errors: tuple[int, ...] = ()

    @classmethod
    def of_lost(cls, uuid: str) -> GpuSample:
        """A GPU that stopped answering: nothing of it is known."""
        return cls(uuid, None, None, (), lost=True)


class DeviceBackend(Protocol):
    def devices(self) -> list[GpuInfo]:
        """Every GPU of this node."""
        ...

    def sample(self) -> list[GpuSample]:
        """The current state of every GPU, with per-process memory."""
        ...

    def job_environment(self) -> dict[str, str]:
        """Extra environment a job needs to reach these GPUs."""
        ...
