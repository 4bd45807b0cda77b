"""Real GPUs through NVML (nvidia-ml-py's `pynvml`): the only module that calls it.

Every NVML call goes through `_call`, which turns `NVMLError_NotSupported` into an
explicit "no value" and a lost GPU into an unhealthy sample rather than a crash (the
approach of nvitop's api/libnvml.py and dcgm-exporter's nvmlprovider).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from agent.backends.base import GpuDevice, GpuSample, ProcessMemory

MIB = 1024 * 1024
T = TypeVar("T")


class DeviceUnavailable(RuntimeError):
    """NVML cannot be used on this host (no driver, no library)."""


class _Lost(Exception):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)."""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlBackend:
    """The GPUs of this host; `open` fails with a clear message where no driver exists."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._handles: list[tuple[GpuDevice, Any]] = []

    @classmethod
    def open(cls) -> NvmlBackend:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py is a dependency; this is a broken install
            raise DeviceUnavailable("the nvidia-ml-py package is not installed") from exc
        backend = cls(pynvml)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise DeviceUnavailable(
                f"NVML could not start ({exc}): this host has no usable NVIDIA driver. "
                "Run the agent on a GPU host, or with --simulate CLUSTER.yaml"
            ) from exc
        backend._discover()
        return backend

    def _discover(self) -> None:
        nvml = self._nvml
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            device = GpuDevice(
                index=index,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                model=_text(nvml.nvmlDeviceGetName(handle)),
                memory_total_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total // MIB),
            )
            self._handles.append((device, handle))

    def close(self) -> None:
        self._nvml.nvmlShutdown()

    def _call(self, function: Callable[..., T], *args: Any) -> T | None:
        """An NVML call; None where the GPU does not support it; _Lost if the GPU is gone."""
        try:
            return function(*args)
        except self._nvml.NVMLError_NotSupported:
            return None
        except self._nvml.NVMLError_GpuIsLost as exc:
            raise _Lost from exc

    def devices(self) -> list[GpuDevice]:
        return [device for device, _handle in self._handles]

    def _sample(self, device: GpuDevice, handle: Any) -> GpuSample:
        nvml = self._nvml
        memory = self._call(nvml.nvmlDeviceGetMemoryInfo, handle)
        rates = self._call(nvml.nvmlDeviceGetUtilizationRates, handle)
        running = self._call(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
        processes = tuple(
            # usedGpuMemory is None where the driver cannot attribute it (e.g. under MIG)
            ProcessMemory(int(p.pid), int((p.usedGpuMemory or 0) // MIB))
            for p in running
        )
        return GpuSample(
            uuid=device.uuid,
            memory_used_mib=int(memory.used // MIB) if memory is not None else 0,
            utilization_pct=float(rates.gpu) if rates is not None else 0.0,
            healthy=True,
            processes=processes,
        )

    def sample(self) -> list[GpuSample]:
        samples = []
        for device, handle in self._handles:
            try:
                samples.append(self._sample(device, handle))
            except _Lost:
                samples.append(GpuSample(device.uuid, 0, 0.0, False, ()))
        return samples

    def job_environment(self) -> dict[str, str]:
        return {}  # real CUDA finds its GPUs through CUDA_VISIBLE_DEVICES alone
