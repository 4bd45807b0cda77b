"""Real GPUs through NVML (nvidia-ml-py's `pynvml`): the only module that calls it.

Every NVML call goes through `_call`, which turns `NVMLError_NotSupported` (and any
other per-metric failure) into an explicit "no value" and a lost GPU into a sample
marked lost rather than a crash (the approach of nvitop's api/libnvml.py and
dcgm-exporter's nvmlprovider). Critical XID events come from one NVML event set per
GPU, drained without waiting on every sample.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.backends.base import GpuSample, ProcessMemory
from agent.protocol import GpuInfo

MIB = 1024 * 1024
T = TypeVar("T")
log = logging.getLogger(__name__)


class DeviceUnavailable(RuntimeError):
    """NVML cannot be used on this host (no driver, no library)."""


class _Lost(Exception):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)."""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class _Gpu:
    device: GpuInfo
    handle: Any
    events: Any = None  # the GPU's XID event set, where it supports one


class NvmlBackend:
    """The GPUs of this host; `open` fails with a clear message where no driver exists."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._gpus: list[_Gpu] = []
        self._warned: set[tuple[str, str]] = set()

    @classmethod
    def open(cls, probe: Callable[[str], int | None] | None = None) -> NvmlBackend:
        """The host's GPUs; `probe(uuid)` measures each one's bare CUDA context
        (`agent.context_probe.measure`; None: not measured)."""
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
        if probe is not None:
            for gpu in backend._gpus:
                gpu.device = gpu.device.model_copy(update={"context_mib": probe(gpu.device.uuid)})
        return backend

    def _optional(self, name: str, *args: Any) -> Any:
        """An NVML query that may be missing (older nvidia-ml-py, older driver) or
        unsupported: its answer, or None (logged once)."""
        function = getattr(self._nvml, name, None)
        if function is None:
            return None
        try:
            return function(*args)
        except self._nvml.NVMLError as exc:
            log.info("NVML %s: %s", name, exc)
            return None

    def _discover(self) -> None:
        nvml = self._nvml
        driver = self._optional("nvmlSystemGetDriverVersion")
        cuda = self._optional("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = self._optional("nvmlSystemGetCudaDriverVersion")
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            capability = self._optional("nvmlDeviceGetCudaComputeCapability", handle)
            device = GpuInfo(
                index=index,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                model=_text(nvml.nvmlDeviceGetName(handle)),
                memory_total_mib=self._read_memory(handle)[0],
                compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
                driver_version=_text(driver) if driver else None,
                cuda_driver_version=int(cuda) if cuda else None,
            )
            self._gpus.append(_Gpu(device, handle, self._xid_events(device, handle)))

    def _xid_events(self, device: GpuInfo, handle: Any) -> Any:
        """An event set receiving the GPU's critical XIDs; None where NVML has none."""
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        except nvml.NVMLError as exc:
            log.info("GPU %s: no XID events (%s)", device.uuid, exc)
            return None
        return events

    def close(self) -> None:
        for gpu in self._gpus:
            if gpu.events is not None:
                self._nvml.nvmlEventSetFree(gpu.events)
        self._nvml.nvmlShutdown()

    def _call(self, gpu: _Gpu, function: Callable[..., T], *args: Any) -> T | None:
        """An NVML call; None where the GPU cannot answer it; _Lost if the GPU is gone."""
        nvml = self._nvml
        try:
            return function(*args)
        except nvml.NVMLError_NotSupported:
            return None
        except nvml.NVMLError_GpuIsLost as exc:
            raise _Lost from exc
        except nvml.NVMLError as exc:
            if (gpu.device.uuid, function.__name__) not in self._warned:
                self._warned.add((gpu.device.uuid, function.__name__))
                log.warning("GPU %s: %s failed: %s", gpu.device.uuid, function.__name__, exc)
            return None

    def devices(self) -> list[GpuInfo]:
        return [gpu.device for gpu in self._gpus]

    def _drain_xids(self, gpu: _Gpu) -> tuple[int, ...]:
        nvml = self._nvml
        xids: list[int] = []
        while gpu.events is not None:
            try:
                data = nvml.nvmlEventSetWait_v2(gpu.events, 0)
            except nvml.NVMLError_Timeout:
                break  # nothing more pending
            except nvml.NVMLError_GpuIsLost as exc:
                raise _Lost from exc
            except nvml.NVMLError as exc:
                log.warning("GPU %s: reading XID events failed: %s", gpu.device.uuid, exc)
                break
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                xids.append(int(data.eventData))
        return tuple(xids)

    def _read_memory(self, handle: Any) -> tuple[int, int]:
        """(MiB that jobs can have, MiB of it allocated). Version 2 of the call states what
        the driver and firmware reserve (drivers from R510 on): no process can allocate it,
        yet version 1 counts it used ("Sum of Reserved and Allocated", NVML's
        nvmlMemory_t), so an idle GPU would show hundreds of MiB in use that no job can
        ever get (scitix/sichek PR 113, checked on H20, B200 and B300: a few hundred MB
        to ~1 GB used on an idle GPU). Allocated is usable less
        free, which holds whether a driver's v2 `used` counts the reserved memory or not
        (NVML's reference has said both)."""
        nvml = self._nvml
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            usable = memory.total - memory.reserved
        except nvml.NVMLError_GpuIsLost:
            raise
        except nvml.NVMLError:  # a driver before R510, or one that cannot answer version 2
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            usable = memory.total
        return int(usable // MIB), int(max(0, usable - memory.free) // MIB)

    def _sample(self, gpu: _Gpu) -> GpuSample:
        nvml, handle = self._nvml, gpu.handle
        memory = self._call(gpu, self._read_memory, handle)
        rates = self._call(gpu, nvml.nvmlDeviceGetUtilizationRates, handle)
        running = [
            *(self._call(gpu, nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []),
            *(self._call(gpu, nvml.nvmlDeviceGetGraphicsRunningProcesses, handle) or []),
        ]
        temperature = self._call(
            gpu, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
        )
        power_mw = self._call(gpu, nvml.nvmlDeviceGetPowerUsage, handle)
        mig = self._call(gpu, nvml.nvmlDeviceGetMigMode, handle)  # [current, pending]
        ecc = self._call(
            gpu,
            nvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        # usedGpuMemory is None where the driver cannot attribute it (e.g. under MIG),
        # and stays unknown; a process with both a compute and a graphics context is
        # listed in both, with the memory of its whole context each time
        used: dict[int, int | None] = {}
        for process in running:
            pid = int(process.pid)
            mib = None if process.usedGpuMemory is None else int(process.usedGpuMemory // MIB)
            seen = used.get(pid)
            used[pid] = mib if seen is None else seen if mib is None else max(seen, mib)
        processes = tuple(ProcessMemory(pid, mib) for pid, mib in used.items())
        return GpuSample(
            uuid=gpu.device.uuid,
            memory_used_mib=memory[1] if memory is not None else None,
            utilization_pct=float(rates.gpu) if rates is not None else None,
            processes=processes,
            memory_utilization_pct=float(rates.memory) if rates is not None else None,
            temperature_c=float(temperature) if temperature is not None else None,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            mig_enabled=bool(mig[0] == nvml.NVML_DEVICE_MIG_ENABLE) if mig is not None else None,
            ecc_uncorrected=int(ecc) if ecc is not None else None,
            xid_errors=self._drain_xids(gpu),
        )

    def sample(self) -> list[GpuSample]:
        samples = []
        for gpu in self._gpus:
            try:
                samples.append(self._sample(gpu))
            except _Lost:
                samples.append(GpuSample.of_lost(gpu.device.uuid))
        return samples

    def job_environment(self) -> dict[str, str]:
        return {}  # real CUDA finds its GPUs through CUDA_VISIBLE_DEVICES alone
