"""`colloc simjob`: a stand-in training process for simulated GPUs.

It allocates its peak memory on every GPU in `CUDA_VISIBLE_DEVICES` (ramping up over
`--ramp-seconds`), holds it for `--seconds`, and when a GPU cannot hold it dies the way
a PyTorch job dies on a CUDA OOM: the same exception line on stderr, exit status 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from agent.backends.simulated_state import STATE_ENV, SimulatedGpuStore, SimulatedOutOfMemory
from estimator.gpus import same_gpu_model

RAMP_STEPS = 10


class SimjobError(ValueError):
    """A simjob that cannot start (bad arguments or no simulated GPU visible)."""


def parse_peaks(text: str) -> int | dict[str, int]:
    """`N` (one peak everywhere) or `MODEL=N,MODEL=N` (a peak per GPU model)."""
    try:
        if "=" not in text:
            return _positive(text)
        peaks: dict[str, int] = {}
        for part in text.split(","):
            model, _, value = part.partition("=")
            if not model.strip():
                raise SimjobError(f"--peak-mib: missing GPU model in {part!r}")
            peaks[model.strip()] = _positive(value)
        return peaks
    except ValueError as exc:
        raise SimjobError(f"--peak-mib: {exc}") from exc


def _positive(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise SimjobError(f"peak must be a positive number of MiB, got {value}")
    return value


def _peak_for(peaks: int | dict[str, int], model: str) -> int:
    if isinstance(peaks, int):
        return peaks
    for name, value in peaks.items():
        if same_gpu_model(name, model):
            return value
    raise SimjobError(f"--peak-mib gives no peak for GPU model {model!r}")


def _oom_message(index: int, error: SimulatedOutOfMemory) -> str:
    """PyTorch's CUDA OOM text (torch/csrc/cuda/CUDACachingAllocator.cpp wording)."""
    gib = 1024.0
    return (
        "Traceback (most recent call last):\n"
        '  File "colloc-simjob", line 1, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. "
        f"Tried to allocate {error.requested_mib / gib:.2f} GiB. "
        f"GPU {index} has a total capacity of {error.total_mib / gib:.2f} GiB of which "
        f"{max(error.free_mib, 0) / gib:.2f} GiB is free. Including non-PyTorch memory, "
        f"this process has {error.own_mib / gib:.2f} GiB memory in use. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signal.SIGTERM)


def run(peaks: int | dict[str, int], seconds: float, ramp_seconds: float, sm_pct: float) -> int:
    """Allocate, hold and release; the process exit status."""
    visible = [uuid for uuid in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if uuid]
    state_dir = os.environ.get(STATE_ENV)
    if not visible or not state_dir:
        raise SimjobError(
            f"no simulated GPU visible: CUDA_VISIBLE_DEVICES and {STATE_ENV} must be set "
            "(the agent sets both when it launches a job)"
        )
    store = SimulatedGpuStore(Path(state_dir))
    try:
        targets = {uuid: _peak_for(peaks, store.model(uuid)) for uuid in visible}
    except KeyError as exc:
        raise SimjobError(str(exc.args[0])) from exc
    signal.signal(signal.SIGTERM, _terminate)
    pid = os.getpid()
    steps = RAMP_STEPS if ramp_seconds > 0 else 1
    try:
        for step in range(1, steps + 1):
            for index, (uuid, peak) in enumerate(targets.items()):
                try:
                    store.set_usage(uuid, pid, peak * step // steps, sm_pct)
                except SimulatedOutOfMemory as error:
                    sys.stderr.write(_oom_message(index, error))
                    return 1
            if step < steps:
                time.sleep(ramp_seconds / steps)
        print(f"simjob: holding {targets} MiB for {seconds:g} s", flush=True)
        time.sleep(seconds)
        print("simjob: done", flush=True)
        return 0
    finally:
        for uuid in targets:
            store.release(uuid, pid)


def run_simjob(args: argparse.Namespace) -> int:
    """`colloc simjob`: bad arguments are one line on stderr and status 2."""
    try:
        return run(parse_peaks(args.peak_mib), args.seconds, args.ramp_seconds, args.sm_pct)
    except SimjobError as exc:
        print(f"colloc: error: {exc}", file=sys.stderr)
        return 2
