"""A cycle's write phase: what reading the snapshot found, and the Plan placement made,
into rows (estimates, failed or held jobs, attempts and allocations, preemptions)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.jobs import lifecycle as jobs
from service.jobs.models import Job
from service.jobs.submission import store_estimates
from service.scheduler.snapshot import Plan
from service.scheduling.snapshot_reader import SnapshotRows


def write_plan(session: Session, rows: SnapshotRows, plan: Plan) -> None:
    """Commit `plan`, made from `rows`, inside the caller's transaction (which holds the
    placement lock the snapshot was read under)."""
    for left_out in rows.unschedulable.values():
        if left_out.for_good:
            jobs.fail_unschedulable(session=session, job=left_out.job, problem=left_out.problem)
        else:
            jobs.hold_unschedulable(session=session, job=left_out.job, problem=left_out.problem)
    for job_id, estimates in rows.new_estimates.items():
        store_estimates(session, rows.jobs[job_id], estimates)
    for placement in plan.placements:
        jobs.start_attempt(
            session=session,
            job=rows.jobs[placement.job_id],
            node_id=placement.node_id,
            gpus=[rows.gpus[gpu_id] for gpu_id in placement.gpu_ids],
            reserved_mib=placement.reserved_mib,
            why=f"score {placement.score}",
        )
    for job_id, reason in plan.waiting.items():
        rows.jobs[job_id].reason = reason
    if plan.preemptions:  # the victims run, so are not among the rows read: one query
        victims = session.scalars(select(Job).where(Job.id.in_(plan.preemptions)))
        by_id = {victim.id: victim for victim in victims}
        for victim_id, for_job in plan.preemptions.items():
            jobs.preempt(session=session, job=by_id[victim_id], for_job=for_job)
