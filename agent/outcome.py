"""How a job's exit is classified: success, failure, or out of GPU memory."""

from __future__ import annotations

import re
from pathlib import Path

from agent.protocol import Outcome

# What the frameworks print when the device allocator fails:
# PyTorch (c10 OutOfMemoryError / CUDACachingAllocator), TensorFlow
# (ResourceExhaustedError "OOM when allocating tensor"), JAX/XLA ("RESOURCE_EXHAUSTED:
# Out of memory"), and the CUDA runtime's own error string.
OOM_PATTERNS = re.compile(
    r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|OOM when allocating tensor"
    r"|RESOURCE_EXHAUSTED: Out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation",
)

TAIL_BYTES = 64 * 1024


def stderr_tail(path: Path) -> str:
    """The last 64 KiB of a log file (an OOM report sits at its end)."""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - TAIL_BYTES))
            return log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def classify(
    exit_code: int | None, stderr: str, *, cancelled: bool, gpu_full: str | None = None
) -> tuple[Outcome, str | None]:
    """(outcome, reason) of a finished job process.

    `exit_code` is None when the job's supervisor was killed with it, so its status is
    unknown. A job that fails without an OOM message while its GPU was full
    (`gpu_full` says how full) most likely died of it all the same: the CUDA driver
    or a framework's allocator can abort without printing one.
    """
    if cancelled:
        return "cancelled", "stopped on request"
    if exit_code == 0:
        return "succeeded", None
    match = OOM_PATTERNS.search(stderr)
    if match:
        line = next((ln for ln in stderr.splitlines() if match.group(0) in ln), match.group(0))
        return "oom", line.strip()[:1000]
    if gpu_full is not None:
        return "oom", f"died while its GPU was full ({gpu_full})"
    if exit_code is None:
        return "failed", "its supervisor was killed; the exit status is unknown"
    if exit_code < 0:
        return "failed", f"killed by signal {-exit_code}"
    return "failed", f"exited with status {exit_code}"
