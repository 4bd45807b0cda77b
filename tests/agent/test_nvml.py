"""The NVML backend against a fake `pynvml` that mirrors the real module's contract:
the same function names and signatures, the same error classes and result shapes."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
from dataclasses import dataclass
from typing import Any

import pynvml
import pytest

from agent.backends.nvml import MIB, DeviceUnavailable, NvmlBackend

USED = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)
CONSTANTS = (
    "NVML_TEMPERATURE_GPU",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "NVML_DEVICE_MIG_ENABLE",
    "nvmlEventTypeXidCriticalError",
    "nvmlMemory_v2",
)
ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_GpuIsLost",
    "NVMLError_Timeout",
    "NVMLError_LibraryNotFound",
    "NVMLError_DriverNotLoaded",
    "NVMLError_FunctionNotFound",
)


@dataclass
class Memory:  # c_nvmlMemory_t: bytes
    total: int
    free: int
    used: int


@dataclass
class MemoryV2:  # c_nvmlMemory_v2_t: bytes
    version: int
    total: int
    reserved: int
    free: int
    used: int


@dataclass
class Rates:  # c_nvmlUtilization_t: percent
    gpu: int
    memory: int


@dataclass
class Process:  # c_nvmlProcessInfo_t: usedGpuMemory in bytes, or None when unknown
    pid: int
    usedGpuMemory: int | None


@dataclass
class EventData:  # c_nvmlEventData_t: eventData holds the XID
    device: int
    eventType: int
    eventData: int
    gpuInstanceId: int = 0
    computeInstanceId: int = 0


class FakeNvml(types.ModuleType):
    """Two GPUs: an A100 whose utilisation, power and events are not supported, and a
    T4 (no MIG) that can be lost, raise XIDs and count ECC errors."""

    def __init__(self, init_error: str | None = None) -> None:
        super().__init__("pynvml")
        self.NVMLError = type("NVMLError", (Exception,), {})
        for name in ERRORS:
            setattr(self, name, type(name, (self.NVMLError,), {}))
        for name in CONSTANTS:
            setattr(self, name, getattr(pynvml, name))
        self.init_error = init_error
        self.lost = False
        self.xids: list[int] = []
        self.ecc = 0
        self.freed: list[int] = []
        self.graphics: dict[int, list[Process]] = {}  # per GPU index
        self.gpus = [
            ("GPU-aaaa", "NVIDIA A100-SXM4-40GB", 40960),
            ("GPU-bbbb", "Tesla T4", 15360),
        ]

    def nvmlInit(self) -> None:
        if self.init_error:
            raise getattr(self, self.init_error)("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.gpus[handle][0]

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.gpus[handle][1].encode()

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: Any = None) -> Memory | MemoryV2:
        if handle == 1 and self.lost:
            raise self.NVMLError_GpuIsLost()
        total = self.gpus[handle][2] * MIB
        if version is None:  # v1: the driver's reserved memory counts as used
            return Memory(total, total - 5512 * MIB, 5512 * MIB)
        if handle == 1:  # the T4's driver predates nvmlDeviceGetMemoryInfo_v2
            raise self.NVMLError_FunctionNotFound()
        return MemoryV2(version, total, 512 * MIB, total - 5512 * MIB, 5512 * MIB)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Rates:
        if handle == 0:
            raise self.NVMLError_NotSupported()
        return Rates(37, 10)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Process]:
        return [Process(4242, 3000 * MIB), Process(4343, None)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Process]:
        return self.graphics.get(handle, [])

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 41 + handle

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # milliwatts
        if handle == 0:
            raise self.NVMLError_NotSupported()
        return 70_500

    def nvmlDeviceGetMigMode(self, device: int) -> list[int]:  # [current, pending]
        if device == 1:
            raise self.NVMLError_NotSupported()
        return [self.NVML_DEVICE_MIG_ENABLE, self.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetTotalEccErrors(self, handle: int, errorType: int, counterType: int) -> int:
        assert (errorType, counterType) == (
            self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            self.NVML_VOLATILE_ECC,
        )
        return self.ecc if handle == 1 else 0

    def nvmlEventSetCreate(self) -> int:
        return 100 + len(self.freed)

    def nvmlDeviceRegisterEvents(self, handle: int, eventTypes: int, eventSet: int) -> None:
        assert eventTypes == self.nvmlEventTypeXidCriticalError
        if handle == 0:
            raise self.NVMLError_NotSupported()

    def nvmlEventSetWait_v2(self, eventSet: int, timeoutms: int) -> EventData:
        assert timeoutms == 0  # sampling never blocks
        if not self.xids:
            raise self.NVMLError_Timeout()
        return EventData(1, self.nvmlEventTypeXidCriticalError, self.xids.pop(0))

    def nvmlEventSetFree(self, eventSet: int) -> None:
        self.freed.append(eventSet)


def test_the_fake_has_the_real_modules_names_signatures_and_errors() -> None:
    fake = FakeNvml()
    for name in USED:
        real = inspect.signature(getattr(pynvml, name))
        ours = inspect.signature(getattr(fake, name))
        assert list(real.parameters) == list(ours.parameters), name
    for name in ERRORS:
        assert issubclass(getattr(pynvml, name), pynvml.NVMLError)
    memory_fields = [name for name, _type in pynvml.c_nvmlMemory_v2_t._fields_]
    assert memory_fields == list(MemoryV2.__dataclass_fields__)
    result_fields = [name for name, _type in pynvml.c_nvmlEventData_t._fields_]
    assert result_fields == list(EventData.__dataclass_fields__)


def test_devices_and_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = NvmlBackend.open()
    a100, t4 = backend.devices()
    # what jobs can have: the A100's driver reserves 512 MiB; the T4's older driver
    # cannot say (NVML's version 1 call), so all of it
    assert (a100.uuid, a100.model, a100.memory_total_mib) == (
        "GPU-aaaa",
        "NVIDIA A100-SXM4-40GB",
        40960 - 512,
    )
    assert (t4.model, t4.memory_total_mib) == ("Tesla T4", 15360)
    first, second = backend.sample()
    # NotSupported is an explicit "unknown", not a crash, and never 0
    assert first.utilization_pct is None and first.memory_utilization_pct is None
    assert first.power_w is None and first.mig_enabled is True and first.temperature_c == 41
    assert first.memory_used_mib == 5000  # allocated, not the driver's reserved 512 MiB
    assert second.utilization_pct == 37.0 and second.memory_used_mib == 5512
    assert second.memory_utilization_pct == 10 and second.power_w == 70.5
    assert second.mig_enabled is None and second.ecc_uncorrected == 0
    assert [(p.pid, p.used_mib) for p in first.processes] == [(4242, 3000), (4343, None)]
    # graphics contexts count too; a process with both kinds is counted once
    # (with its memory where only one of its listings can attribute it)
    fake.graphics[0] = [Process(4242, None), Process(4343, 900 * MIB), Process(4444, 700 * MIB)]
    assert [(p.pid, p.used_mib) for p in backend.sample()[0].processes] == [
        (4242, 3000),
        (4343, 900),
        (4444, 700),
    ]
    fake.xids += [79, 48]
    fake.ecc = 2
    faulty = backend.sample()[1]
    assert faulty.xid_errors == (79, 48) and faulty.ecc_uncorrected == 2
    assert backend.sample()[1].xid_errors == ()  # each event is seen once
    fake.lost = True
    lost = backend.sample()[1]
    assert lost.lost and lost.memory_used_mib is None and lost.utilization_pct is None
    assert not backend.sample()[0].lost
    backend.close()
    assert len(fake.freed) == 1  # the T4's event set; the A100 had none


@pytest.mark.parametrize("error", ["NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded"])
def test_no_driver_is_a_clear_message(monkeypatch: pytest.MonkeyPatch, error: str) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_error=error))
    with pytest.raises(DeviceUnavailable, match=r"no usable NVIDIA driver.*--simulate"):
        NvmlBackend.open()


def test_the_real_library_on_a_host_without_a_driver() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(DeviceUnavailable, match="no usable NVIDIA driver"):
            NvmlBackend.open()
    else:  # a GPU host: the real devices are listed
        pynvml.nvmlShutdown()
        assert NvmlBackend.open().devices()


def test_the_agent_says_how_to_run_without_a_driver() -> None:
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    except pynvml.NVMLError:
        pass
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "agent", "--server", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--simulate" in result.stderr
    assert "Traceback" not in result.stderr
