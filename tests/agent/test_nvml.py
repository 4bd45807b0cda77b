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
)
ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_GpuIsLost",
    "NVMLError_LibraryNotFound",
    "NVMLError_DriverNotLoaded",
)


@dataclass
class Memory:  # c_nvmlMemory_t: bytes
    total: int
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


class FakeNvml(types.ModuleType):
    """Two GPUs: an A100 whose utilisation is not supported, and a T4 that can be lost."""

    def __init__(self, init_error: str | None = None) -> None:
        super().__init__("pynvml")
        self.NVMLError = type("NVMLError", (Exception,), {})
        for name in ERRORS:
            setattr(self, name, type(name, (self.NVMLError,), {}))
        self.init_error = init_error
        self.lost = False
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

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: Any = None) -> Memory:
        if handle == 1 and self.lost:
            raise self.NVMLError_GpuIsLost()
        total = self.gpus[handle][2] * MIB
        return Memory(total, total - 5000 * MIB, 5000 * MIB)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Rates:
        if handle == 0:
            raise self.NVMLError_NotSupported()
        return Rates(37, 10)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Process]:
        return [Process(4242, 3000 * MIB), Process(4343, None)]


def test_the_fake_has_the_real_modules_names_signatures_and_errors() -> None:
    fake = FakeNvml()
    for name in USED:
        real = inspect.signature(getattr(pynvml, name))
        ours = inspect.signature(getattr(fake, name))
        assert list(real.parameters) == list(ours.parameters), name
    for name in ERRORS:
        assert issubclass(getattr(pynvml, name), pynvml.NVMLError)


def test_devices_and_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = NvmlBackend.open()
    a100, t4 = backend.devices()
    assert (a100.uuid, a100.model, a100.memory_total_mib) == (
        "GPU-aaaa",
        "NVIDIA A100-SXM4-40GB",
        40960,
    )
    assert t4.model == "Tesla T4"
    first, second = backend.sample()
    assert first.utilization_pct == 0.0  # NotSupported is a value, not a crash
    assert second.utilization_pct == 37.0 and second.memory_used_mib == 5000
    assert [(p.pid, p.used_mib) for p in first.processes] == [(4242, 3000), (4343, 0)]
    fake.lost = True
    lost = backend.sample()[1]
    assert not lost.healthy and lost.memory_used_mib == 0 and backend.sample()[0].healthy
    backend.close()


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
