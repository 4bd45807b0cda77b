"""An admin's controls on a node: cordon (no new placements), drain (no new placements;
its running jobs finish, or are requeued once a deadline passes) and resume.

The scheduler reads the node's `admin_state` through its snapshot (only an `active`
node is placeable); the scheduling loop calls `enforce_drain_deadlines` each tick.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import utcnow
from service.errors import not_found
from service.events.service import record
from service.jobs import lifecycle
from service.jobs.models import Attempt, Job
from service.nodes.models import Node
from service.scheduler.states import ACTIVE_ATTEMPT_STATES

ADMIN_STATES = ("active", "cordoned", "draining")


def by_name(session: Session, name: str) -> Node:
    node = session.scalar(select(Node).where(Node.name == name))
    if node is None:
        raise not_found("node", name)
    return node


def _set(session: Session, node: Node, state: str, message: str) -> Node:
    node.admin_state = state
    record(session=session, kind=f"node.{state}", node_id=node.id, message=message)
    return node


def cordon(*, session: Session, node: Node, by: str) -> Node:
    """No new placements on `node`; what runs there goes on."""
    node.drain_deadline = None
    return _set(session, node, "cordoned", f"node {node.name} cordoned by {by}")


def drain(*, session: Session, node: Node, by: str, deadline_s: int | None) -> Node:
    """No new placements on `node`; its running jobs finish, or with `deadline_s` are
    requeued once that many seconds have passed."""
    node.drain_deadline = None if deadline_s is None else utcnow() + timedelta(seconds=deadline_s)
    after = "" if deadline_s is None else f"; jobs still running in {deadline_s} s are requeued"
    return _set(session, node, "draining", f"node {node.name} drained by {by}{after}")


def resume(*, session: Session, node: Node, by: str) -> Node:
    """Placements on `node` again."""
    node.drain_deadline = None
    return _set(session, node, "active", f"node {node.name} resumed by {by}")


def enforce_drain_deadlines(*, session: Session, now: datetime) -> list[int]:
    """Requeue the jobs still active on draining nodes whose deadline passed; returns
    their ids. Each deadline is enforced once (the node stays draining, without one)."""
    nodes = session.scalars(
        select(Node).where(Node.admin_state == "draining", Node.drain_deadline <= now)
    ).all()
    requeued = []
    for node in nodes:
        node.drain_deadline = None
        jobs = session.scalars(
            select(Job)
            .join(Attempt, Attempt.job_id == Job.id)
            .where(Attempt.node_id == node.id, Attempt.state.in_(ACTIVE_ATTEMPT_STATES))
            .order_by(Job.id)
        ).all()
        for job in jobs:
            why = f"node {node.name} is draining and its deadline passed: requeued"
            lifecycle.requeue(session=session, job=job, why=why)
            requeued.append(job.id)
        record(
            session=session,
            kind="node.drain_deadline",
            node_id=node.id,
            message=f"node {node.name}'s drain deadline passed: {len(jobs)} job(s) requeued",
            data={"jobs": [job.id for job in jobs]},
        )
    return requeued
