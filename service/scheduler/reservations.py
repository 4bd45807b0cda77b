"""How reservations move once jobs run: the rules the service applies to attempts, kept
pure so that the trace-driven simulator applies exactly the same ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ReservationRules:
    """The settings these rules read (service/config.py documents each)."""

    margin: float = 0.10  # reservation_margin
    stable_s: float = 120.0  # reservation_stable_s
    oom_factor: float = 1.2  # oom_reservation_factor
    oom_backoff_s: float = 10.0  # oom_backoff_s


def followed_reservation(
    rules: ReservationRules, *, used_mib: int, reserved_mib: int, steady_s: float
) -> int | None:
    """The new reservation of a running job that peaked at `used_mib`, or None to keep it.

    It grows at once when the job passes it, and shrinks to the peak plus the margin once
    that peak has held for `stable_s`, so packing improves as jobs reveal themselves.
    """
    target = math.ceil(round(used_mib * (1 + rules.margin), 6))
    if used_mib > reserved_mib:
        return target
    if steady_s >= rules.stable_s and target < reserved_mib:
        return target
    return None


def oom_retry_floor(
    rules: ReservationRules, *, reserved_mib: int, peak_mib: int, available_mib: int
) -> int:
    """The least a retry after an OOM reserves per GPU: more than the attempt needed, and
    a CUDA OOM means it needed more than it reserved, reached or could have had."""
    return math.ceil(max(reserved_mib, peak_mib, available_mib) * rules.oom_factor)


def retry_backoff_s(rules: ReservationRules, failures: int) -> float:
    """The wait before a retry, doubling with each failed attempt."""
    return float(rules.oom_backoff_s * 2.0 ** (failures - 1))
