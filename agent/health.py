"""Whether a GPU is fit to take jobs, from what its samples say.

A lost GPU is unhealthy while it stays lost. A critical XID or a rise in the count of
uncorrected ECC errors quarantines the GPU for `quarantine_s` after the last such
fault; it is healthy again once that long has passed without another. XIDs that the
driver raises for an application's own fault (an illegal address, a killed context)
say nothing about the GPU and are ignored, as NVIDIA's k8s device plugin ignores them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.backends.base import GpuSample

# 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
# 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout:
# raised for a faulty or killed application, not a faulty GPU.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass
class _Record:
    ecc_seen: int | None = None
    fault_at: float | None = None
    fault: str | None = None


class HealthTracker:
    def __init__(self, quarantine_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.quarantine_s = quarantine_s
        self._clock = clock
        self._records: dict[str, _Record] = {}

    def assess(self, sample: GpuSample) -> str | None:
        """None when the GPU is healthy, else why it is not."""
        record = self._records.setdefault(sample.uuid, _Record())
        now = self._clock()
        if sample.lost:
            return "GPU lost: it no longer answers the driver"
        faults = [f"XID {xid}" for xid in sample.xid_errors if xid not in APPLICATION_XIDS]
        ecc = sample.ecc_uncorrected
        if ecc is not None:
            # errors counted before the agent first looked are the baseline; a lower
            # count means the counter was reset (driver reload or GPU reset)
            if record.ecc_seen is not None and ecc > record.ecc_seen:
                faults.append(f"{ecc - record.ecc_seen} new uncorrected ECC error(s)")
            record.ecc_seen = ecc
        if faults:
            record.fault_at, record.fault = now, ", ".join(faults)
        if record.fault_at is not None and now - record.fault_at < self.quarantine_s:
            return f"{record.fault}; quarantined for {self.quarantine_s:g} s after the last fault"
        return None
