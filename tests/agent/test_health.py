"""GPU health from samples: lost GPUs, critical XIDs and ECC errors quarantine a GPU."""

from __future__ import annotations

from agent.backends.base import GpuSample
from agent.health import HealthTracker


def sample(**fields: object) -> GpuSample:
    return GpuSample("GPU-x", 100, 0.0, (), **fields)  # type: ignore[arg-type]


def test_xid_quarantines_until_the_window_passes_without_another() -> None:
    now = [0.0]
    tracker = HealthTracker(quarantine_s=60, clock=lambda: now[0])
    assert tracker.assess(sample()) is None
    assert "XID 79" in (tracker.assess(sample(xid_errors=(79,))) or "")
    now[0] = 59
    assert tracker.assess(sample()) is not None
    assert tracker.assess(sample(xid_errors=(48,))) is not None  # a new fault restarts it
    now[0] = 100
    assert tracker.assess(sample()) is not None
    now[0] = 120
    assert tracker.assess(sample()) is None


def test_application_xids_say_nothing_about_the_gpu() -> None:
    tracker = HealthTracker(quarantine_s=60, clock=lambda: 0.0)
    assert tracker.assess(sample(xid_errors=(13, 31, 43, 45))) is None


def test_new_uncorrected_ecc_errors_quarantine_but_old_ones_do_not() -> None:
    now = [0.0]
    tracker = HealthTracker(quarantine_s=10, clock=lambda: now[0])
    assert tracker.assess(sample(ecc_uncorrected=5)) is None  # counted before we looked
    assert "2 new uncorrected ECC" in (tracker.assess(sample(ecc_uncorrected=7)) or "")
    now[0] = 11
    assert tracker.assess(sample(ecc_uncorrected=7)) is None
    assert tracker.assess(sample(ecc_uncorrected=0)) is None  # counter reset


def test_a_lost_gpu_is_unhealthy_while_lost() -> None:
    tracker = HealthTracker(quarantine_s=0, clock=lambda: 0.0)
    assert "lost" in (tracker.assess(sample(lost=True)) or "")
    assert tracker.assess(sample()) is None
