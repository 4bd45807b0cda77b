"""What the agent does when a job uses a GPU it was not given.

`CUDA_VISIBLE_DEVICES` only tells CUDA which GPUs to show; a job can unset it, or open
another GPU's device file, and take memory the scheduler placed someone else on. The
agent sees every GPU's processes (NVML, or the simulated store) and finds their jobs
through the process tree, so such use is seen whatever the job did to hide it. It is
always reported (the server counts it as use of that GPU, so nothing is packed onto
memory that is really taken, and records an event); policy `stop` also kills the job,
whose attempt ends `failed` with the reason.
"""

from __future__ import annotations

from typing import Literal

Policy = Literal["report", "stop"]


def describe(gpu_uuid: str, used_mib: int | None, given: list[str], policy: Policy) -> str:
    action = "stopped by the agent" if policy == "stop" else "reported"
    amount = "memory the driver cannot attribute" if used_mib is None else f"{used_mib} MiB"
    return (
        f"used {amount} on GPU {gpu_uuid}, which it was not given "
        f"(its GPUs: {', '.join(given) or 'none'}); {action}"
    )
