"""One scheduling cycle: read a snapshot from the database, place, commit the plan.

The cycle runs in one transaction; on PostgreSQL it first takes a transaction-level
advisory lock, so scheduler replicas sharing a database take turns and never commit
plans made from the same stale snapshot.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, selectinload, sessionmaker

from service.config import Settings
from service.db import transaction
from service.jobs import service as jobs
from service.jobs.models import Allocation, Job
from service.nodes.models import Gpu, Node
from service.scheduler.placement import place
from service.scheduler.snapshot import GpuView, NodeView, PendingJob, Plan, Snapshot

log = logging.getLogger(__name__)

SCHEDULER_LOCK_ID = 0x636F6C6C  # "coll"


def _pending_view(job: Job) -> PendingJob:
    floor = job.reservation_floor_mib or 0
    models = job.spec.get("gpu_models")
    return PendingJob(
        id=job.id,
        priority=job.priority,
        gpus=job.gpus,
        memory_mib=max(job.memory_mib or 0, floor),
        exclusive=job.memory_mib is None,
        gpu_models=frozenset(models) if models else None,
    )


def read_snapshot(session: Session) -> tuple[Snapshot, dict[int, Job], dict[int, Gpu]]:
    """The snapshot, plus the rows it was read from (to commit a plan against)."""
    nodes = session.scalars(select(Node)).all()
    gpus = {gpu.id: gpu for gpu in session.scalars(select(Gpu))}
    usage = {
        gpu_id: (int(reserved), int(count))
        for gpu_id, reserved, count in session.execute(
            select(Allocation.gpu_id, func.sum(Allocation.reserved_mib), func.count())
            .where(Allocation.active.is_(True))
            .group_by(Allocation.gpu_id)
        )
    }
    pending = {
        job.id: job
        for job in session.scalars(
            select(Job).where(Job.state == "pending").options(selectinload(Job.attempts))
        )
    }
    snapshot = Snapshot(
        nodes=tuple(NodeView(n.id, n.name, n.state == "ready") for n in nodes),
        gpus=tuple(
            GpuView(
                id=gpu.id,
                node_id=gpu.node_id,
                index=gpu.index,
                model=gpu.model,
                memory_total_mib=gpu.memory_total_mib,
                reserved_mib=usage.get(gpu.id, (0, 0))[0],
                foreign_mib=gpu.memory_foreign_mib,
                healthy=gpu.healthy,
                jobs=usage.get(gpu.id, (0, 0))[1],
            )
            for gpu in gpus.values()
        ),
        pending=tuple(_pending_view(job) for job in pending.values()),
    )
    return snapshot, pending, gpus


def run_cycle(session: Session) -> Plan:
    """Place what can be placed now, inside the caller's transaction."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": SCHEDULER_LOCK_ID})
    snapshot, pending, gpus = read_snapshot(session)
    plan = place(snapshot)
    for placement in plan.placements:
        jobs.start_attempt(
            session=session,
            job=pending[placement.job_id],
            node_id=placement.node_id,
            gpus=[gpus[gpu_id] for gpu_id in placement.gpu_ids],
            reserved_mib=placement.reserved_mib,
        )
    for job_id, reason in plan.waiting.items():
        pending[job_id].reason = reason
    return plan


class SchedulerLoop:
    """Runs a cycle every `schedule_interval_s` on a background thread."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self._sessions = sessions
        self._interval_s = settings.schedule_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="colloc-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                with transaction(self._sessions) as session:
                    run_cycle(session)
            except Exception:  # the database may be restarting: try again next tick
                log.exception("scheduling cycle failed")
