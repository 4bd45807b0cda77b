"""The bare CUDA context of each GPU, measured once when the agent starts.

What a process holds on a GPU before its first tensor depends on the GPU, the driver
and its settings; the estimator's default is a published figure (`estimator/analytical/
context.py`). The agent measures the real one: a short-lived child process creates the
device's primary context through the CUDA driver API (ctypes on libcuda.so.1:
cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain), reads through NVML how much memory it
holds on that device, and releases the context (cuDevicePrimaryCtxRelease). The agent
itself never creates a context, so it holds no GPU memory.

No driver, no GPU, a process NVML cannot see: the probe says why, the agent logs it and
reports the figure as unknown (None). It never fails the agent.

    python -m agent.context_probe GPU-UUID      # prints {"context_mib": N} or {"skipped": ...}
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

MIB = 1024 * 1024
PROBE_TIMEOUT_S = 60.0  # cuInit on a large node takes seconds; a hung driver is cut off
log = logging.getLogger(__name__)


class ProbeSkipped(RuntimeError):
    """The context could not be measured here; the message says why."""


def _check(result: int, call: str) -> None:
    if result != 0:  # CUDA_SUCCESS
        raise ProbeSkipped(f"{call} failed with CUresult {result}")


def load_libcuda() -> Any:
    """The CUDA driver library (ProbeSkipped where none is installed)."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise ProbeSkipped(f"no CUDA driver: libcuda.so.1 cannot be loaded ({exc})") from exc


def _own_mib(nvml: Any, handle: Any, pid: int) -> int | None:
    """What process `pid` holds on the device as NVML lists it (None: not listed, e.g.
    when the agent runs in a PID namespace of its own)."""
    for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if int(process.pid) == pid and process.usedGpuMemory is not None:
            return int(process.usedGpuMemory) // MIB
    return None


def probe(uuid: str, cuda: Any, nvml: Any, pid: int) -> int:
    """The MiB the primary context of the first visible CUDA device holds (the caller
    makes `uuid` the only visible one). Per process where NVML lists this one, else
    the device's used memory before and after."""
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    before = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // MIB
    _check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    _check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    try:
        own = _own_mib(nvml, handle, pid)
        if own is None:
            own = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // MIB - before
    finally:
        cuda.cuDevicePrimaryCtxRelease(device)
    if own <= 0:
        raise ProbeSkipped(f"NVML shows no memory held by the context ({own} MiB)")
    return own


def _child(uuid: str, load: Callable[[], Any] = load_libcuda) -> dict[str, Any]:
    """What the child process prints: the figure, or why there is none."""
    import pynvml  # nvidia-ml-py, a dependency of the agent

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"skipped": f"NVML cannot start ({exc})"}
    try:
        return {"context_mib": probe(uuid, load(), pynvml, os.getpid())}
    except ProbeSkipped as exc:
        return {"skipped": str(exc)}
    except pynvml.NVMLError as exc:
        return {"skipped": f"NVML: {exc}"}
    finally:
        pynvml.nvmlShutdown()


def parse(output: str) -> int:
    """The figure in a probe's output (ProbeSkipped with its reason if there is none)."""
    try:
        answer = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise ProbeSkipped(f"unreadable probe output {output[-200:]!r}") from exc
    if not isinstance(answer, dict):
        raise ProbeSkipped(f"unreadable probe output {output[-200:]!r}")
    mib = answer.get("context_mib")
    if isinstance(mib, int) and not isinstance(mib, bool) and 0 < mib <= 64 * 1024:
        return mib
    raise ProbeSkipped(str(answer.get("skipped") or f"no figure in {answer!r}"))


def measure(
    uuid: str, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> int | None:
    """The bare CUDA context of GPU `uuid` in MiB, measured in a child process; None
    (and a log line saying why) where it cannot be."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    try:
        done = run(
            [sys.executable, "-m", "agent.context_probe", uuid],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=env,
        )
        mib = parse(done.stdout)
    except subprocess.TimeoutExpired:
        log.warning("GPU %s: CUDA context probe timed out; context not measured", uuid)
        return None
    except (OSError, ProbeSkipped) as exc:
        log.info("GPU %s: CUDA context not measured: %s", uuid, exc)
        return None
    log.info("GPU %s: bare CUDA context %d MiB", uuid, mib)
    return mib


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1])))
