"""What the agent does when a job uses more GPU memory than it was placed with.

The scheduler packs jobs by their reservations; a job that grows past its own by
more than the tolerance eats into its neighbours' and can push them into an OOM.
Policy `warn` reports it; `kill` also stops the job at once, and the attempt ends
`oom` so that it is retried with a larger reservation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Policy = Literal["warn", "kill"]


@dataclass(frozen=True)
class Enforcement:
    policy: Policy = "warn"
    tolerance: float = 0.10  # a share of the reservation
    min_tolerance_mib: int = 256  # small reservations get at least this much slack

    def limit_mib(self, reserved_mib: int) -> int:
        """The most a job reserving `reserved_mib` may use before it is over."""
        slack = max(math.ceil(reserved_mib * self.tolerance), self.min_tolerance_mib)
        return reserved_mib + slack

    def describe(self, gpu_uuid: str, used_mib: int, reserved_mib: int) -> str:
        action = "killed by the agent" if self.policy == "kill" else "over its reservation"
        return (
            f"{action}: used {used_mib} MiB on GPU {gpu_uuid}, more than its reservation of "
            f"{reserved_mib} MiB plus the tolerance (limit {self.limit_mib(reserved_mib)} MiB)"
        )
