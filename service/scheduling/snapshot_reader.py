"""Database rows -> the core's Snapshot. A read: it writes nothing.

Estimates a waiting job lacks (GPU models that joined the cluster after it), and those
made stale by what the cluster observed since (`Estimator.stale`), are made in memory
and handed back with the snapshot; the cycle's write phase stores them, explain
only shows them. A job the reading cannot turn into a view is handed back too, with
its problem, for the write phase to fail or hold.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Row, Select, func, select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from estimator.estimate import Estimate, Estimator, proven_peaks
from service.db import utcnow
from service.errors import ApiError
from service.jobs import submission as jobs
from service.jobs.models import Allocation, Attempt, Job, JobEstimate
from service.jobs.submission import MadeEstimates
from service.nodes.models import Gpu, Node
from service.scheduler.admission import could_run, distinct_nodes
from service.scheduler.snapshot import (
    GpuView,
    NodeView,
    PendingJob,
    RunningJob,
    Snapshot,
    pending_job,
    room_by_model,
)
from service.scheduler.states import ACTIVE_ATTEMPT_STATES, JobState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unschedulable:
    """A waiting job left out of the snapshot, and why. `for_good`: its spec is at fault
    (stored before it could be refused), so it fails; otherwise the server met an
    unexpected error on it (a fix or a restart may cure), so it waits."""

    job_id: int
    problem: str
    for_good: bool


@dataclass(frozen=True)
class WaitingRow:
    """What the write phase needs of a waiting job in the snapshot."""

    id: int
    attempts: int  # how many it had: a new one is numbered next
    reason: str | None  # as stored: rewritten only when it changes


@dataclass(frozen=True)
class SnapshotRows:
    """A snapshot with what the rows it was read from say beyond it (to write a plan
    against), the estimates made for it and the jobs it left out."""

    snapshot: Snapshot
    jobs: dict[int, WaitingRow]  # the waiting jobs in the snapshot, by id
    gpus: dict[int, GpuView]
    new_estimates: dict[int, MadeEstimates]  # by job id
    unschedulable: dict[int, Unschedulable]  # by job id


@dataclass
class _Stored:
    """A stored estimate, as much of it as placement reads."""

    peak_mib: int
    upper_mib: int
    method: str
    basis: str | None  # what it was made on (`Estimator.basis`)


# A waiting job's columns the snapshot reads: no ORM object is built for it (at
# thousands of jobs and GPUs a second, building them was most of a cycle's reading).
_WAITING = (
    Job.id,
    Job.priority,
    Job.gpus,
    Job.memory_mib,
    Job.reservation_floor_mib,
    Job.spec,
    Job.owner,
    Job.queue,
    Job.not_before,
    Job.reason,
)


def _estimated(job: Any) -> bool:
    """Whether the job is placed by the estimator's figures: a training spec, no claim."""
    return job.memory_mib is None and bool(job.spec.get("training"))


@dataclass(frozen=True)
class _Failed:
    """Why a spec's estimates could not be made, and the basis they were tried on."""

    error: Exception
    basis: str


# A read's answers by spec, owner and GPU models (`_answer_key`): a queue holds many
# jobs of one spec, made stale by one run, and each is made (or fails) once.
_Answers = dict[str, MadeEstimates | _Failed]


def _answer_key(job: Any, wanted: list[str]) -> str:
    return json.dumps([job.spec["training"], job.owner, wanted], sort_keys=True)


def _made(estimator: Estimator, job: Any, wanted: list[str], made: _Answers) -> MadeEstimates:
    """The job's estimates on the `wanted` GPU models, from this read's `made` where
    they were made (or failed: raises as they did). The basis is read first: a run
    the estimator takes in meanwhile leaves them stale, to be made again."""
    key = _answer_key(job, wanted)
    if key not in made:
        training = jobs.training_spec(job)
        assert training is not None
        basis = estimator.basis(training)
        try:
            made[key] = MadeEstimates(
                jobs.estimate_for(estimator, training, wanted, job.owner), basis
            )
        except (OperationalError, InterfaceError):
            raise
        except Exception as exc:
            made[key] = _Failed(exc, basis)
    answer = made[key]
    if isinstance(answer, _Failed):
        raise answer.error
    return answer


# The last read's failed answers, by answer key: the basis each failed on. A job that
# runs on its own estimates while those for new GPU models cannot be made has nothing
# stored that says so, and is tried again each read; its failure is logged only when
# new (the last read did not meet it on that basis). A later read keeps only the keys it
# met; whichever thread reads last sets it, which at worst logs a failure again.
_last_failures: dict[str, str] = {}


def _made_or_failed(
    estimator: Estimator, job: Any, wanted: list[str], made: _Answers, failing: str
) -> MadeEstimates | _Failed | None:
    """`_made`'s answer, or for a job that has estimates to fall back on, why it failed
    (None: before a basis was read), logged once for the jobs of one spec while it fails
    on one basis, with what `failing` says the job does meanwhile: as a warning where
    the estimator refused the spec, as an error where it broke."""
    key = _answer_key(job, wanted)
    tried = key in made
    try:
        return _made(estimator, job, wanted, made)
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:
        answer = made.get(key)
        known = isinstance(answer, _Failed) and _last_failures.get(key) == answer.basis
        if not tried and not known:
            refused = isinstance(exc, (ApiError, ValidationError))
            log.log(
                logging.WARNING if refused else logging.ERROR,
                "job %d, and any waiting job of its spec, %s",
                job.id,
                failing,
                exc_info=True,
            )
        return answer


def _remade(
    estimator: Estimator,
    job: Any,
    kept: Mapping[str, _Stored],
    models: list[str],
    made: _Answers,
) -> MadeEstimates | None:
    """A waiting job's stale estimates made again on every GPU model (None: they stand).
    A job was admitted with the estimates it has, so a remake that fails keeps them,
    judged on the basis it failed on: it is tried again once that moves, not every
    cycle (and logged once for the jobs of one spec)."""
    failing = "keeps its estimates: they could not be made again"
    answer = _made_or_failed(estimator, job, sorted({*models, *kept}), made, failing)
    return MadeEstimates({}, answer.basis) if isinstance(answer, _Failed) else answer


def _new_estimates(
    estimator: Estimator,
    job: Any,
    kept: Mapping[str, _Stored],
    models: list[str],
    ran_before: bool,
    could: Callable[[PendingJob], bool],
    room: dict[str, int],
    made: _Answers,
) -> MadeEstimates | None:
    """A training job's estimates on GPU models it has none for, and on all of them once
    those it has are stale (runs of its architecture ended since they were made, or
    another calibration is active): a job is placed by what the cluster learned while
    it waited, so that one job's OOM does not repeat in the next of its kind. Estimates
    an attempt was placed with (`ran_before`) stay what it was judged by; its retry
    goes by the floor its end set. A job admitted with estimates whose new models' can
    not be made runs on the models it has them for meanwhile; they are tried again each
    read, and the failure logged once for the jobs of one spec while its basis stands."""
    if not _estimated(job):
        return None
    remade = None
    # a job's estimates are stored together, on one basis (`store_estimates`)
    if kept and not ran_before and estimator.stale(next(iter(kept.values())).basis):
        remade = _remade(estimator, job, kept, models, made)
        if remade is not None and not could(_pending_view(job, {**kept, **remade.by_model}, room)):
            # remade, it fits no GPU: the estimates it was admitted with stand, judged
            # on this basis (not remade again until it moves), and its run tells
            new = {m: e for m, e in remade.by_model.items() if m not in kept}
            remade = MadeEstimates(new, remade.basis)
    missing = [m for m in models if m not in kept and (remade is None or m not in remade.by_model)]
    if not missing:
        return remade
    if not kept:
        more: MadeEstimates | _Failed | None = _made(estimator, job, missing, made)
    else:  # admitted with the estimates it has, it runs on those models meanwhile
        failing = (
            "has none on GPU models that joined since its own were made: they could not be made"
        )
        more = _made_or_failed(estimator, job, missing, made, failing)
    if not isinstance(more, MadeEstimates):
        return remade
    base = remade.by_model if remade is not None else {}
    return MadeEstimates({**base, **more.by_model}, more.basis)


def _pending_view(
    job: Any, estimates: Mapping[str, _Stored | Estimate], room_mib: dict[str, int]
) -> PendingJob:
    models = job.spec.get("gpu_models")
    return pending_job(
        id=job.id,
        priority=job.priority,
        gpus=job.gpus,
        memory_mib=job.memory_mib,
        upper_mib={model: e.upper_mib for model, e in estimates.items()},
        floor_mib=job.reservation_floor_mib or 0,
        gpu_models=frozenset(models) if models else None,
        owner=job.owner,
        queue=job.queue,
        not_before=job.not_before,
        proven_mib=proven_peaks(estimates),
        room_mib=room_mib,
        peak_mib={model: e.peak_mib for model, e in estimates.items()},
    )


@dataclass(frozen=True)
class Held:
    """What active attempts hold: per GPU, the memory reserved and how many hold it;
    per attempt, its GPUs and its largest reservation."""

    reserved_mib: dict[int, int]
    jobs: dict[int, int]
    gpus_of: dict[int, list[int]]
    largest_mib: dict[int, int]


def _rows(session: Session, statement: Select[Any]) -> Sequence[Row[Any]]:
    """`statement`'s rows, fetched at once from the session's connection, pending changes
    flushed first as `session.execute` would. Fetching 4,000 GPUs' rows took 13 ms so,
    24 through `session.execute` (its per-row ORM processing, which columns do not
    need) and 20 row by row (psycopg 3.3, SQLAlchemy 2.0, PostgreSQL 15, loaded 2 cores)."""
    if session.autoflush:
        session.flush()
    return session.connection().execute(statement).all()


def held_now(session: Session) -> Held:
    """What active attempts hold now, from one statement over their live allocations."""
    rows = _rows(
        session,
        select(Allocation.attempt_id, Allocation.gpu_id, Allocation.reserved_mib)
        .join(Attempt, Attempt.id == Allocation.attempt_id)
        .where(Attempt.state.in_(ACTIVE_ATTEMPT_STATES), Allocation.active.is_(True))
        .order_by(Allocation.id),
    )
    held = Held({}, {}, {}, {})
    for attempt_id, gpu_id, mib in rows:
        held.reserved_mib[gpu_id] = held.reserved_mib.get(gpu_id, 0) + mib
        held.jobs[gpu_id] = held.jobs.get(gpu_id, 0) + 1
        held.gpus_of.setdefault(attempt_id, []).append(gpu_id)
        held.largest_mib[attempt_id] = max(held.largest_mib.get(attempt_id, 0), mib)
    return held


# A node's columns, then its GPUs' (None for a node without one), in the order
# `_gpu_view` unpacks them; one statement, so a node registering meanwhile is seen
# whole or not at all.
_CLUSTER = (
    select(
        Node.id,
        Node.name,
        Node.state,
        Node.admin_state,
        Gpu.id,
        Gpu.index,
        Gpu.model,
        Gpu.memory_total_mib,
        Gpu.memory_used_mib,
        Gpu.memory_foreign_mib,
        Gpu.utilization_pct,
        Gpu.healthy,
        Gpu.uuid,
    )
    .outerjoin(Gpu, Gpu.node_id == Node.id)
    .order_by(Node.id, Gpu.id)
)

# The last read's GPU views, by what each was made from: its row and what is held on
# it. A view is a function of that key alone, so whichever session, database or thread
# read it, an equal key may take it; each read keeps only the keys it met.
_last_views: dict[tuple[Any, ...], GpuView] = {}


def read_cluster(session: Session, held: Held) -> tuple[list[NodeView], dict[int, GpuView]]:
    """Every node, and every GPU by id as placement counts it with what `held` holds.

    At 4,000 GPUs a cycle, making views was most of the reading: rows are unpacked by
    position, each node's view made once, and a GPU whose row and holdings are as the
    last read found them keeps its view (at idle, every GPU whose reported memory and
    load did not change)."""
    global _last_views
    last, views = _last_views, {}
    reserved, jobs = held.reserved_mib, held.jobs
    nodes: list[NodeView] = []
    gpus: dict[int, GpuView] = {}
    for row in _rows(session, _CLUSTER):
        node_id, name, state, admin_state, gpu_id = row[:5]
        if not nodes or nodes[-1].id != node_id:  # cordoned or draining: no new placements
            nodes.append(NodeView(node_id, name, state == "ready" and admin_state == "active"))
        if gpu_id is None:
            continue
        key = (*row, reserved.get(gpu_id, 0), jobs.get(gpu_id, 0))  # a tuple: compared in C
        view = last.get(key)
        if view is None:
            view = _gpu_view(key)
        gpus[gpu_id] = views[key] = view
    _last_views = views
    return nodes, gpus


def _gpu_view(key: tuple[Any, ...]) -> GpuView:
    """A GPU's view from its `_CLUSTER` row and the memory and jobs held on it."""
    (
        node_id, _, _, _,
        gpu_id, index, model, total, used, foreign, utilization, healthy, uuid,
        reserved_mib, jobs,
    ) = key  # fmt: skip
    return GpuView(
        gpu_id,
        node_id,
        index,
        model,
        total,
        reserved_mib,
        # as Gpu.jobs_used_mib and Gpu.busy_pct read them
        0 if used is None else max(0, used - foreign),
        foreign,
        100.0 if utilization is None else utilization,
        healthy,
        jobs,
        uuid,
    )


def _running(session: Session, held: Held) -> tuple[RunningJob, ...]:
    """The active attempts' jobs, as quotas and preemption see them."""
    rows = _rows(
        session,
        select(
            Attempt.id,
            Job.id,
            Job.priority,
            Job.owner,
            Job.queue,
            Job.spec,
            Job.preempt_requested,
        )
        .join(Job, Job.id == Attempt.job_id)
        .where(Attempt.state.in_(ACTIVE_ATTEMPT_STATES))
        .order_by(Attempt.id),
    )
    gpus_of, largest_mib = held.gpus_of, held.largest_mib
    return tuple(
        RunningJob(
            job_id,
            priority,
            owner,
            queue,
            tuple(gpus_of.get(attempt_id, ())),
            largest_mib.get(attempt_id, 0),
            bool(spec.get("preemptible")) and not preempt_requested,
        )
        for attempt_id, job_id, priority, owner, queue, spec, preempt_requested in rows
    )


def _stored_estimates(session: Session) -> dict[int, dict[str, _Stored]]:
    """The waiting jobs' stored estimates, by job id and GPU model."""
    rows = _rows(
        session,
        select(JobEstimate.job_id, JobEstimate.gpu_model, JobEstimate.peak_mib)
        .add_columns(JobEstimate.upper_mib, JobEstimate.method, JobEstimate.basis)
        .join(Job, Job.id == JobEstimate.job_id)
        .where(Job.state == JobState.PENDING),
    )
    stored: dict[int, dict[str, _Stored]] = {}
    for job_id, model, peak_mib, upper_mib, method, basis in rows:
        stored.setdefault(job_id, {})[model] = _Stored(peak_mib, upper_mib, method, basis)
    return stored


def _attempt_counts(session: Session) -> dict[int, int]:
    """How many attempts each waiting job has had (none: absent)."""
    rows = _rows(
        session,
        select(Attempt.job_id, func.count())
        .join(Job, Job.id == Attempt.job_id)
        .where(Job.state == JobState.PENDING)
        .group_by(Attempt.job_id),
    )
    return {job_id: count for job_id, count in rows}


def read_snapshot(
    session: Session, headroom_mib: int, estimator: Estimator | None = None
) -> SnapshotRows:
    """The snapshot placement decides on; with `estimator`, waiting jobs are estimated
    on the GPU models they lack estimates for.

    Columns, not ORM objects, one statement per kind of row. One job never stops the
    reading for the others."""
    held = held_now(session)
    nodes, gpus = read_cluster(session, held)
    waiting = _rows(
        session,
        select(*_WAITING)
        .where(Job.state == JobState.PENDING, Job.held.is_(False))  # held: until released
        .order_by(Job.id),
    )
    stored = _stored_estimates(session)
    attempts = _attempt_counts(session)
    models = sorted({g.model for g in gpus.values()})
    room = room_by_model(((g.model, g.memory_total_mib) for g in gpus.values()), headroom_mib)
    cluster = distinct_nodes((g.node_id, g.model, g.memory_total_mib) for g in gpus.values())

    def could(view: PendingJob) -> bool:
        return could_run(view, cluster, headroom_mib)

    views: list[PendingJob] = []
    placeable: dict[int, WaitingRow] = {}
    new_estimates: dict[int, MadeEstimates] = {}
    answers: _Answers = {}  # `_made`'s, shared by this read's jobs
    unschedulable: dict[int, Unschedulable] = {}
    for job in waiting:
        kept = stored.get(job.id, {})
        try:
            made = (
                _new_estimates(
                    estimator, job, kept, models, job.id in attempts, could, room, answers
                )
                if estimator is not None
                else None
            )
            views.append(_pending_view(job, {**kept, **(made.by_model if made else {})}, room))
        except (OperationalError, InterfaceError):
            raise  # the database, not the job: the cycle is retried
        except (ApiError, ValidationError) as exc:
            unschedulable[job.id] = Unschedulable(job.id, str(exc), for_good=True)
            continue
        except Exception as exc:
            unschedulable[job.id] = Unschedulable(job.id, repr(exc), for_good=False)
            log.exception("job %d left out of the snapshot", job.id)
            continue
        placeable[job.id] = WaitingRow(job.id, attempts.get(job.id, 0), job.reason)
        if made is not None:
            new_estimates[job.id] = made
    global _last_failures
    _last_failures = {key: a.basis for key, a in answers.items() if isinstance(a, _Failed)}
    snapshot = Snapshot(
        nodes=tuple(nodes),
        gpus=tuple(gpus.values()),
        pending=tuple(views),
        running=_running(session, held),
        now=utcnow(),
    )
    return SnapshotRows(snapshot, placeable, gpus, new_estimates, unschedulable)
