"""Placement views the domains read: GPUs as placement counts them, and why a job waits.
Reads only, without the placement lock; the loop is elsewhere (`loop`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from estimator.estimate import Estimator
from service.scheduler.placement import Explanation, Scheduler
from service.scheduler.snapshot import GpuView
from service.scheduling.snapshot_reader import held_now, read_cluster, read_snapshot


def gpu_views(session: Session) -> dict[int, GpuView]:
    """Every GPU as the scheduler accounts for it, by id."""
    return read_cluster(session, held_now(session))[1]


def explain_job(
    session: Session, scheduler: Scheduler, job_id: int, estimator: Estimator | None = None
) -> Explanation:
    """Why waiting job `job_id` waits, or where the next cycle would place it, from the
    cluster as it is now; estimates it lacks are made for this answer, not stored."""
    rows = read_snapshot(session, scheduler.config.headroom_mib, estimator)
    if job_id in rows.jobs:
        return scheduler.explain(rows.snapshot, job_id)
    if job_id not in rows.unschedulable:  # placed or ended since the caller looked
        return Explanation(job_id, "no longer waiting", ())
    why = rows.unschedulable[job_id]
    fate = "cannot be scheduled" if why.for_good else "the scheduler cannot handle it now"
    return Explanation(job_id, f"{fate}: {why.problem}", ())
