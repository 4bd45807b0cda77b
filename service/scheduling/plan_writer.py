"""A cycle's write phase: what reading the snapshot found, and the Plan placement made,
into rows (estimates, failed or held jobs, attempts and allocations, preemptions).

Placements and waiting reasons, the rows a busy cycle writes by the thousand, are
written in bulk: one executemany per table, not an ORM object per row. Failed, held
and preempted jobs are few and go through the job lifecycle one by one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from service.db import utcnow
from service.events.models import Event
from service.jobs import lifecycle as jobs
from service.jobs.models import Allocation, Attempt, Job
from service.jobs.submission import store_estimates
from service.scheduler.snapshot import Placement, Plan
from service.scheduler.states import AttemptState, JobState
from service.scheduling.snapshot_reader import SnapshotRows, Unschedulable


def write_plan(session: Session, rows: SnapshotRows, plan: Plan) -> None:
    """Commit `plan`, made from `rows`, inside the caller's transaction (which holds the
    placement lock the snapshot was read under)."""
    _left_out(session, rows.unschedulable)
    store_estimates(session, rows.new_estimates)
    _place(session, rows, plan.placements)
    changed = [
        {"id": job_id, "reason": reason}
        for job_id, reason in plan.waiting.items()
        if rows.jobs[job_id].reason != reason
    ]
    if changed:
        session.execute(update(Job), changed)
    if plan.preemptions:  # the victims run, so are not among the rows read: one query
        victims = session.scalars(select(Job).where(Job.id.in_(plan.preemptions)))
        by_id = {victim.id: victim for victim in victims}
        for victim_id, for_job in plan.preemptions.items():
            jobs.preempt(session=session, job=by_id[victim_id], for_job=for_job)


def _left_out(session: Session, unschedulable: dict[int, Unschedulable]) -> None:
    """Fail the jobs whose spec is at fault, hold the others, saying why."""
    if not unschedulable:
        return
    for job in session.scalars(select(Job).where(Job.id.in_(unschedulable))):
        left_out = unschedulable[job.id]
        if left_out.for_good:
            jobs.fail_unschedulable(session=session, job=job, problem=left_out.problem)
        else:
            jobs.hold_unschedulable(session=session, job=job, problem=left_out.problem)


def _place(session: Session, rows: SnapshotRows, placements: list[Placement]) -> None:
    """Each placement a new attempt holding `reserved_mib[i]` on `gpu_ids[i]`, its job
    placed, and a job.placed event naming the GPUs."""
    if not placements:
        return
    now = utcnow()
    numbers = [rows.jobs[p.job_id].attempts + 1 for p in placements]
    attempt_ids = session.scalars(
        insert(Attempt).returning(Attempt.id, sort_by_parameter_order=True),
        [
            {
                "job_id": p.job_id,
                "number": number,
                "node_id": p.node_id,
                "state": AttemptState.PLACED,
                "reserved_mib": max(p.reserved_mib),
                "placed_at": now,
            }
            for p, number in zip(placements, numbers, strict=True)
        ],
    ).all()
    session.execute(
        insert(Allocation),
        [
            {"attempt_id": attempt_id, "gpu_id": gpu_id, "reserved_mib": mib, "active": True}
            for p, attempt_id in zip(placements, attempt_ids, strict=True)
            for gpu_id, mib in zip(p.gpu_ids, p.reserved_mib, strict=True)
        ],
    )
    session.execute(  # one statement: every placed job takes the same values
        update(Job)
        .where(Job.id.in_([p.job_id for p in placements]))
        .values(state=JobState.PLACED, reason=None, updated_at=now)
    )
    session.execute(
        insert(Event),
        [
            _placed_event(rows, p, number, now)
            for p, number in zip(placements, numbers, strict=True)
        ],
    )


def _placed_event(
    rows: SnapshotRows, placement: Placement, number: int, now: Any
) -> dict[str, Any]:
    gpus = [rows.gpus[gpu_id] for gpu_id in placement.gpu_ids]
    where = ", ".join(
        f"{gpu.model} #{gpu.index} ({gpu.uuid}) with {mib} MiB"
        for gpu, mib in zip(gpus, placement.reserved_mib, strict=True)
    )
    return {
        "at": now,
        "kind": "job.placed",
        "job_id": placement.job_id,
        "node_id": placement.node_id,
        "message": f"attempt {number} placed on {where}; score {placement.score}",
        "data": {"attempt": number, "gpus": [gpu.uuid for gpu in gpus]},
    }
