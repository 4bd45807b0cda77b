"""One scheduling cycle: read a snapshot from the database, place, commit the plan.

The cycle runs in one transaction. On PostgreSQL it first takes a transaction-level
advisory lock, which heartbeats (the other writers of reservations) take too, so
scheduler replicas sharing a database take turns and never commit plans made from a
stale view: no GPU is ever promised twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pydantic import ValidationError
from sqlalchemy import select, text
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, selectinload, sessionmaker

from estimator.estimate import Estimator, proven_peaks
from service.config import Settings
from service.db import transaction, utcnow
from service.errors import ApiError
from service.estimates.service import EstimatorState
from service.jobs import service as jobs
from service.jobs.models import ACTIVE_ATTEMPT_STATES, Attempt, Job
from service.nodes.models import Gpu, Node
from service.periodic import Periodic
from service.scheduler.placement import Explanation, Scheduler, explain
from service.scheduler.snapshot import (
    GpuView,
    NodeView,
    PendingJob,
    Plan,
    RunningJob,
    Snapshot,
    pending_job,
    room_by_model,
)

log = logging.getLogger(__name__)

SCHEDULER_LOCK_ID = 0x636F6C6C  # "coll"


def lock_placements(session: Session) -> None:
    """Serialise reservation changes across replicas (PostgreSQL; SQLite's writes already
    are, by BEGIN IMMEDIATE)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": SCHEDULER_LOCK_ID})


def _pending_view(job: Job, room_mib: dict[str, int]) -> PendingJob:
    models = job.spec.get("gpu_models")
    return pending_job(
        id=job.id,
        priority=job.priority,
        gpus=job.gpus,
        memory_mib=job.memory_mib,
        upper_mib={e.gpu_model: e.upper_mib for e in job.estimates},
        floor_mib=job.reservation_floor_mib or 0,
        gpu_models=frozenset(models) if models else None,
        owner=job.owner,
        queue=job.queue,
        not_before=job.not_before,
        proven_mib=proven_peaks({e.gpu_model: e for e in job.estimates}),
        room_mib=room_mib,
    )


def _fill_estimates(session: Session, estimator: Estimator, job: Job, models: list[str]) -> None:
    """Estimate a training job on GPU models that joined the cluster after it."""
    if job.memory_mib is not None or not job.spec.get("training"):
        return
    missing = [m for m in models if m not in {e.gpu_model for e in job.estimates}]
    if not missing:
        return
    training = jobs.training_spec(job)
    assert training is not None
    estimates = jobs.estimate_for(estimator, training, missing, job.owner)
    with session.begin_nested():  # what this job wrote goes if it fails
        jobs.store_estimates(session, job, estimates)
    session.refresh(job, ["estimates"])


def _pending_views(
    session: Session,
    estimator: Estimator | None,
    pending: list[Job],
    gpus: list[Gpu],
    headroom: int,
) -> list[PendingJob]:
    """The waiting jobs as placement sees them; one job never stops the cycle for the
    others. A job whose spec is bad (stored before it could be refused) fails alone,
    with the reason; one that meets an unexpected error (a fault of the server's, which
    a fix or a restart may cure) waits, with the reason, and is left out of this cycle."""
    models = sorted({g.model for g in gpus})
    room = room_by_model(((g.model, g.memory_total_mib) for g in gpus), headroom)
    views = []
    for job in pending:
        try:
            if estimator is not None:
                _fill_estimates(session, estimator, job, models)
            views.append(_pending_view(job, room))
        except (OperationalError, InterfaceError):
            raise  # the database, not the job: the cycle is retried
        except (ApiError, ValidationError) as exc:  # the spec's fault, for good
            jobs.fail_unschedulable(session=session, job=job, problem=str(exc))
        except Exception as exc:
            jobs.hold_unschedulable(session=session, job=job, problem=repr(exc))
            log.exception("job %d left out of the cycle", job.id)
    return views


def _active_attempts(session: Session) -> list[Attempt]:
    return list(
        session.scalars(
            select(Attempt)
            .where(Attempt.state.in_(ACTIVE_ATTEMPT_STATES))
            .options(selectinload(Attempt.allocations), selectinload(Attempt.job))
        )
    )


def _gpu_views(gpus: list[Gpu], active: list[Attempt]) -> tuple[GpuView, ...]:
    """Each GPU with the reservations and job count of the attempts active on it."""
    reserved: dict[int, int] = {}
    count: dict[int, int] = {}
    for attempt in active:
        for allocation in attempt.allocations:
            if allocation.active:
                gpu_id = allocation.gpu_id
                reserved[gpu_id] = reserved.get(gpu_id, 0) + allocation.reserved_mib
                count[gpu_id] = count.get(gpu_id, 0) + 1
    return tuple(
        GpuView(
            id=gpu.id,
            node_id=gpu.node_id,
            index=gpu.index,
            model=gpu.model,
            memory_total_mib=gpu.memory_total_mib,
            reserved_mib=reserved.get(gpu.id, 0),
            used_mib=max(0, gpu.memory_used_mib - gpu.memory_foreign_mib),
            foreign_mib=gpu.memory_foreign_mib,
            utilization_pct=gpu.utilization_pct,
            healthy=gpu.healthy,
            jobs=count.get(gpu.id, 0),
            uuid=gpu.uuid,
        )
        for gpu in gpus
    )


def gpu_views(session: Session) -> dict[int, GpuView]:
    """Every GPU as the scheduler accounts for it, by id."""
    views = _gpu_views(list(session.scalars(select(Gpu))), _active_attempts(session))
    return {view.id: view for view in views}


def _running(attempt: Attempt) -> RunningJob:
    job = attempt.job
    live = [a for a in attempt.allocations if a.active]
    return RunningJob(
        id=job.id,
        priority=job.priority,
        owner=job.owner,
        queue=job.queue,
        gpu_ids=tuple(a.gpu_id for a in live),
        reserved_mib=max((a.reserved_mib for a in live), default=0),
        preemptible=bool(job.spec.get("preemptible")) and not job.preempt_requested,
    )


def read_snapshot(
    session: Session, headroom_mib: int, estimator: Estimator | None = None
) -> tuple[Snapshot, dict[int, Job], dict[int, Gpu]]:
    """The snapshot, plus the rows it was read from (to commit a plan against).

    Nodes and their GPUs come from one statement, so a node registering meanwhile is
    seen whole or not at all."""
    rows = session.execute(select(Node, Gpu).outerjoin(Gpu, Gpu.node_id == Node.id)).all()
    nodes = {node.id: node for node, _gpu in rows}
    gpus = {gpu.id: gpu for _node, gpu in rows if gpu is not None}
    pending = list(
        session.scalars(
            select(Job)
            .where(Job.state == "pending")
            .options(selectinload(Job.attempts), selectinload(Job.estimates))
        )
    )
    views = _pending_views(session, estimator, pending, list(gpus.values()), headroom_mib)
    active = _active_attempts(session)
    snapshot = Snapshot(
        nodes=tuple(NodeView(n.id, n.name, n.state == "ready") for n in nodes.values()),
        gpus=_gpu_views(list(gpus.values()), active),
        pending=tuple(views),
        running=tuple(_running(attempt) for attempt in active),
        now=utcnow(),
    )
    placeable = {view.id for view in views}
    return snapshot, {job.id: job for job in pending if job.id in placeable}, gpus


def run_cycle(session: Session, scheduler: Scheduler, estimator: Estimator | None = None) -> Plan:
    """Place what can be placed now, inside the caller's transaction."""
    lock_placements(session)
    snapshot, pending, gpus = read_snapshot(session, scheduler.config.headroom_mib, estimator)
    plan = scheduler.place(snapshot)
    for placement in plan.placements:
        jobs.start_attempt(
            session=session,
            job=pending[placement.job_id],
            node_id=placement.node_id,
            gpus=[gpus[gpu_id] for gpu_id in placement.gpu_ids],
            reserved_mib=placement.reserved_mib,
            why=f"score {placement.score}",
        )
    for job_id, reason in plan.waiting.items():
        pending[job_id].reason = reason
    for victim, for_job in plan.preemptions.items():
        jobs.preempt(session=session, job=jobs.get(session=session, job_id=victim), for_job=for_job)
    return plan


def explain_job(
    session: Session, scheduler: Scheduler, job_id: int, estimator: Estimator | None = None
) -> Explanation:
    snapshot, pending, _gpus = read_snapshot(session, scheduler.config.headroom_mib, estimator)
    if job_id not in pending:  # it failed, or was left out, as its estimates were made
        job = jobs.get(session=session, job_id=job_id)
        return Explanation(job_id, job.reason or job.state, ())
    return explain(scheduler, snapshot, job_id)


class SchedulerLoop:
    """Runs a cycle every `schedule_interval_s` on a background thread, and, every
    `estimator_refit_interval_s` when new peaks came in, a refit on another one (training
    takes seconds; cycles go on meanwhile)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        settings: Settings,
        scheduler: Scheduler,
        estimators: EstimatorState,
        on_cycle: Callable[[float], None] | None = None,
        before_cycle: Callable[[Session], object] | None = None,
    ) -> None:
        self._sessions = sessions
        self._on_cycle = on_cycle  # told each successful cycle's duration in seconds
        self._before_cycle = before_cycle  # runs before each cycle, in its own transaction
        self._refit_interval_s = settings.estimator_refit_interval_s
        self._scheduler = scheduler
        self._estimators = estimators
        self._loop = Periodic("scheduling cycle", settings.schedule_interval_s, self._tick)
        self._refit: threading.Thread | None = None
        self._last_refit = time.monotonic()

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _tick(self) -> None:
        try:
            if self._before_cycle is not None:  # committed whatever the cycle does
                with transaction(self._sessions) as session:
                    self._before_cycle(session)
            started = time.perf_counter()
            with transaction(self._sessions) as session:
                run_cycle(session, self._scheduler, self._estimators.sync(session))
            if self._on_cycle is not None:
                self._on_cycle(time.perf_counter() - started)
        finally:  # a refit is due whether or not the cycle went through
            self._maybe_refit()

    def _maybe_refit(self) -> None:
        due = time.monotonic() - self._last_refit >= self._refit_interval_s
        if not self._refit_interval_s or not due or (self._refit and self._refit.is_alive()):
            return
        self._last_refit = time.monotonic()
        self._refit = threading.Thread(target=self._refit_now, name="colloc-refit", daemon=True)
        self._refit.start()

    def _refit_now(self) -> None:
        try:
            with self._sessions() as session:  # refit commits as it goes
                if self._estimators.has_new_observations(session):
                    self._estimators.refit(session)
                    session.commit()
        except Exception:
            log.exception("scheduled estimator refit failed")
