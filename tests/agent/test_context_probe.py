"""The bare CUDA context probe: parsed from a fake driver, skipped cleanly without one;
and the device description an agent registers with (NVML, simulated)."""

from __future__ import annotations

import ctypes
import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent import context_probe
from agent.backends.nvml import MIB, NvmlBackend
from agent.backends.simulated import SimulatedBackend
from agent.cluster import parse_cluster
from agent.context_probe import ProbeSkipped, measure, parse, probe
from tests.agent.test_nvml import FakeNvml, Memory


class FakeLibcuda:
    """The four driver calls the probe makes, as ctypes sees them (CUresult ints,
    out-parameters through byref). Retaining the context makes it hold `context_mib`."""

    def __init__(self, nvml: ProbeNvml, context_mib: int = 0, fail: str | None = None) -> None:
        self.nvml, self.context_mib, self.fail = nvml, context_mib, fail
        self.released = False

    def _result(self, name: str) -> int:
        return 100 if self.fail == name else 0  # 100: CUDA_ERROR_NO_DEVICE

    def cuInit(self, flags: int) -> int:
        assert flags == 0
        return self._result("cuInit")

    def cuDeviceGet(self, device: Any, ordinal: int) -> int:
        assert ordinal == 0  # the only visible device
        device._obj.value = 7
        return self._result("cuDeviceGet")

    def cuDevicePrimaryCtxRetain(self, context: Any, device: ctypes.c_int) -> int:
        assert device.value == 7
        if self.fail == "cuDevicePrimaryCtxRetain":
            return 2  # CUDA_ERROR_OUT_OF_MEMORY
        context._obj.value = 0xC0FFEE
        self.nvml.held_mib = self.context_mib
        return 0

    def cuDevicePrimaryCtxRelease(self, device: ctypes.c_int) -> int:
        self.released = True
        self.nvml.held_mib = 0
        return 0


@dataclass
class Process:
    pid: int
    usedGpuMemory: int | None


class ProbeNvml(FakeNvml):
    """NVML as the probe sees it: the context's memory appears once it is retained,
    listed under the probe's pid unless `hidden` (a PID namespace of its own)."""

    def __init__(self, pid: int, hidden: bool = False) -> None:
        super().__init__()
        self.pid, self.hidden, self.held_mib = pid, hidden, 0

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return [gpu[0] for gpu in self.gpus].index(uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: Any = None) -> Memory:
        used = (1000 + self.held_mib) * MIB
        return Memory(self.gpus[handle][2] * MIB, self.gpus[handle][2] * MIB - used, used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Process]:  # type: ignore[override]
        if self.hidden or not self.held_mib:
            return [Process(1, 900 * MIB)]
        return [Process(1, 900 * MIB), Process(self.pid, self.held_mib * MIB)]


def test_the_probe_reads_its_own_context_through_nvml() -> None:
    nvml = ProbeNvml(pid=4321)
    cuda = FakeLibcuda(nvml, context_mib=503)
    assert probe("GPU-bbbb", cuda, nvml, 4321) == 503
    assert cuda.released and nvml.held_mib == 0


def test_a_probe_nvml_cannot_attribute_reads_the_device_delta() -> None:
    nvml = ProbeNvml(pid=4321, hidden=True)
    assert probe("GPU-aaaa", FakeLibcuda(nvml, context_mib=420), nvml, 4321) == 420


@pytest.mark.parametrize("call", ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain"])
def test_a_failing_driver_call_is_a_skip_with_its_reason(call: str) -> None:
    nvml = ProbeNvml(pid=1)
    with pytest.raises(ProbeSkipped, match=call):
        probe("GPU-aaaa", FakeLibcuda(nvml, 400, fail=call), nvml, 1)


def test_probe_output_is_parsed_or_skipped() -> None:
    assert parse('{"context_mib": 512}\n') == 512
    with pytest.raises(ProbeSkipped, match="no CUDA driver"):
        parse(json.dumps({"skipped": "no CUDA driver: libcuda.so.1 cannot be loaded"}))
    for garbage in (
        "",
        "Segmentation fault",
        '{"context_mib": -3}',
        "[1]",
        '{"context_mib": true}',
    ):
        with pytest.raises(ProbeSkipped):
            parse(garbage)


def test_measure_runs_the_probe_apart_and_never_fails(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[dict[str, Any]] = []

    def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append({"args": args, **kwargs})
        return subprocess.CompletedProcess(args, 0, '{"context_mib": 611}\n', "")

    assert measure("GPU-aaaa", run) == 611
    (call,) = calls
    assert call["args"][1:] == ["-m", "agent.context_probe", "GPU-aaaa"]
    assert call["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa" and call["timeout"] > 0

    def hangs(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(args, kwargs["timeout"])

    with caplog.at_level(logging.INFO, logger="agent.context_probe"):
        assert measure("GPU-aaaa", hangs) is None
    assert "timed out" in caplog.text


def test_without_a_driver_the_probe_is_skipped_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    """On a host with no NVIDIA driver (CI) the real probe says why and reports None."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this host has a CUDA driver")
    child = subprocess.run(
        [sys.executable, "-m", "agent.context_probe", "GPU-none"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0 and "Traceback" not in child.stderr
    assert "skipped" in json.loads(child.stdout)
    with caplog.at_level(logging.INFO, logger="agent.context_probe"):
        assert measure("GPU-none") is None
    assert "not measured" in caplog.text
    with pytest.raises(ProbeSkipped, match="no CUDA driver"):
        context_probe.load_libcuda()


class DescribedNvml(FakeNvml):
    """A driver that reports its version, its CUDA version and compute capabilities."""

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        if handle == 1:
            raise self.NVMLError_NotSupported()
        return (8, 0)


def test_nvml_discovery_describes_each_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", DescribedNvml())
    measured: list[str] = []

    def fake_probe(uuid: str) -> int | None:
        measured.append(uuid)
        return 480 if uuid == "GPU-aaaa" else None

    a100, t4 = NvmlBackend.open(probe=fake_probe).devices()
    assert measured == ["GPU-aaaa", "GPU-bbbb"]
    assert a100.model_dump() == {
        "uuid": "GPU-aaaa",
        "index": 0,
        "model": "NVIDIA A100-SXM4-40GB",
        "memory_total_mib": 40960 - 512,  # less what its driver reserves
        "compute_capability": "8.0",
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "context_mib": 480,
    }
    assert t4.compute_capability is None and t4.context_mib is None  # not supported/measured
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())  # an old nvidia-ml-py: none of it
    plain, _ = NvmlBackend.open().devices()
    assert (plain.driver_version, plain.cuda_driver_version, plain.context_mib) == (None,) * 3


def test_simulated_devices_are_described_from_the_cluster_file(tmp_path: Path) -> None:
    (node,) = parse_cluster(
        {
            "nodes": [
                {
                    "name": "n",
                    "gpus": [
                        {"model": "A100-40GB"},
                        {"model": "Mystery 1", "memory_mib": 8000, "driver_version": "1.2"},
                    ],
                }
            ]
        }
    )
    known, mystery = SimulatedBackend(node, tmp_path).devices()
    assert known.compute_capability == "8.0"  # the catalog's
    assert (mystery.compute_capability, mystery.driver_version) == (None, "1.2")
