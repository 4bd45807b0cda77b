"""Job lifecycle: submission, cancellation, placement and attempt outcomes.

Every function here changes state inside the caller's transaction and records the
matching event, so a state change and its audit entry commit together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from estimator.analytical.model import SpecError
from estimator.estimate import Estimate, Estimator, proven_peaks
from estimator.gpus import GPU_MODELS, canonical_gpu_name
from estimator.spec import TrainingSpec
from service.config import Settings
from service.db import utcnow
from service.errors import ApiError, not_found
from service.events.service import record
from service.filters import JobFilters
from service.jobs import observations
from service.jobs.models import (
    ACTIVE_ATTEMPT_STATES,
    FINAL_JOB_STATES,
    Allocation,
    Attempt,
    Job,
    JobEstimate,
)
from service.jobs.schemas import AttemptGpu, AttemptRead, JobCreate, JobList, JobRead
from service.nodes.models import Gpu
from service.scheduler.admission import can_ever_fit
from service.scheduler.reservations import (
    followed_reservation,
    oom_retry_floor,
    retry_backoff_s,
)
from service.scheduler.snapshot import pending_job, room_by_model


def _cluster_gpus(session: Session) -> list[tuple[int, str, int]]:
    """(node id, model, memory total) of every GPU ever registered."""
    rows = session.execute(select(Gpu.node_id, Gpu.model, Gpu.memory_total_mib))
    return [(node_id, model, total) for node_id, model, total in rows]


def _canonical_models(requested: list[str], known: Sequence[str]) -> list[str]:
    resolved: list[str] = []
    unknown: list[str] = []
    for name in requested:
        canonical = canonical_gpu_name(name, tuple(known))
        if canonical is None:
            unknown.append(name)
        elif canonical not in resolved:
            resolved.append(canonical)
    if unknown:
        choices = sorted({*(m.name for m in GPU_MODELS), *known})
        raise ApiError(
            422,
            "unknown_gpu_model",
            f"unknown GPU model(s): {', '.join(unknown)}",
            {"unknown": unknown, "known": choices},
        )
    return resolved


def _check_can_ever_fit(
    spec: JobCreate,
    models: list[str] | None,
    cluster: list[tuple[int, str, int]],
    demand: Callable[[str], int],
    headroom_mib: int,
) -> None:
    """Refuse a job no node of the registered cluster could ever hold."""
    if not cluster:
        return  # nothing registered yet: the job waits for nodes
    if can_ever_fit(
        gpus=spec.gpus, models=models, cluster=cluster, demand=demand, headroom_mib=headroom_mib
    ):
        return
    eligible = [(node, m, total) for node, m, total in cluster if not models or m in models]
    largest = max((total for _n, _m, total in eligible), default=0)
    needs = sorted({demand(m) for _n, m, _t in eligible}) or [0]
    wanted = f"{spec.gpus} GPU(s)" + (f" with {needs[0]} MiB each" if needs[0] else "")
    where = f" of model {', '.join(models)}" if models else ""
    raise ApiError(
        422,
        "never_fits",
        f"no node in the cluster can ever hold {wanted}{where}",
        {"largest_gpu_mib": largest, "gpus_requested": spec.gpus},
    )


# What a spec is estimated on at submission when no GPU is registered yet, only to find
# out whether the estimator can read it, so that a job it cannot estimate is refused
# then rather than found out by the scheduler once nodes join. A spec's terms do not
# depend on the GPU but for its CUDA context; this is the GPU the packaged calibration's
# measurements were taken on (estimator/learned/measurements.py: GPUMemNet's A100 runs).
VALIDATION_GPU = "NVIDIA A100-SXM4-40GB"


def estimate_for(
    estimator: Estimator, training: TrainingSpec, models: Sequence[str], owner: str | None
) -> dict[str, Estimate]:
    """Estimates per GPU model, from the history `owner`'s jobs may rely on; a spec the
    estimator cannot use is the client's error."""
    seen = dataclasses.replace(estimator, history=estimator.history.seen_by(owner))
    try:
        return {model: seen.estimate(training, model) for model in models}
    except SpecError as exc:
        raise ApiError(
            422, "invalid_training_spec", f"training: {exc}", {"problems": exc.problems}
        ) from exc
    except (ArithmeticError, TypeError, ValueError) as exc:  # sizes past what it computes
        raise ApiError(
            422, "invalid_training_spec", f"training: the estimator cannot use it ({exc})"
        ) from exc


# Estimates are stored in 32-bit columns; anything near this never fits a GPU anyway.
MAX_STORED_MIB = 2**31 - 1


def _storable(mib: int) -> int:
    """`mib` within what a column holds and a memory figure can be (never negative)."""
    return min(max(mib, 0), MAX_STORED_MIB)


def store_estimates(session: Session, job: Job, estimates: dict[str, Estimate]) -> None:
    for model, estimate in estimates.items():
        session.add(
            JobEstimate(
                job_id=job.id,
                gpu_model=model,
                peak_mib=_storable(estimate.peak_mib),
                upper_mib=_storable(estimate.upper_mib),
                coverage=estimate.coverage,
                method=estimate.method,
                model_version=estimate.model_version,
                breakdown_mib={k: _storable(v) for k, v in estimate.breakdown_mib.items()},
            )
        )


def create(
    *,
    session: Session,
    job_in: JobCreate,
    owner: str,
    settings: Settings,
    estimator: Estimator,
    idempotency_key: str | None = None,
    admin: bool = False,
) -> tuple[Job, bool]:
    """Submit a job; returns it and whether it is new (False: an idempotent replay).

    A job with a `training` spec is estimated on every GPU model in the cluster now (on
    VALIDATION_GPU when there is none, to refuse a spec it cannot estimate); models that
    join later are estimated by the scheduler when it first needs them. Only an `admin`
    may give a job a priority above its queue's maximum.
    """
    if not admin:
        check_priority(settings, job_in.queue, job_in.priority)
    spec = job_in.model_dump(mode="json")
    if idempotency_key is not None:
        existing = session.scalar(
            select(Job).where(Job.owner == owner, Job.idempotency_key == idempotency_key)
        )
        if existing is not None:
            if existing.spec != spec:
                raise ApiError(
                    409,
                    "idempotency_conflict",
                    f"Idempotency-Key {idempotency_key!r} was used for a different job "
                    f"({existing.id})",
                )
            return existing, False
    cluster = _cluster_gpus(session)
    known = sorted({m for _n, m, _t in cluster})
    models = None
    if job_in.gpu_models is not None:
        models = _canonical_models(job_in.gpu_models, known)
    estimates: dict[str, Estimate] = {}
    if job_in.training is not None:
        estimates = estimate_for(
            estimator, job_in.training, models or known or [VALIDATION_GPU], owner
        )
        if not (models or known):
            estimates = {}  # made only to check the spec: nothing of this GPU is here

    view = pending_job(  # the demand placement will see
        id=0,
        priority=0,
        gpus=job_in.gpus,
        memory_mib=job_in.memory_mib,
        upper_mib={model: e.upper_mib for model, e in estimates.items()},
        floor_mib=0,
        proven_mib=proven_peaks(estimates),
        room_mib=room_by_model(((m, t) for _n, m, t in cluster), settings.memory_headroom_mib),
    )
    _check_can_ever_fit(
        job_in, models, cluster, lambda m: view.demand_for(m) or 0, settings.memory_headroom_mib
    )
    now = utcnow()
    job = Job(
        name=job_in.name,
        owner=owner,
        queue=job_in.queue,
        priority=job_in.priority,
        state="pending",
        spec={**spec, "gpu_models": models},
        gpus=job_in.gpus,
        memory_mib=job_in.memory_mib,
        reservation_floor_mib=None,
        max_attempts=job_in.max_attempts or settings.default_max_attempts,
        cancel_requested=False,
        preempt_requested=False,
        idempotency_key=idempotency_key,
        created_at=now,
        updated_at=now,
    )
    session.add(job)
    session.flush()
    store_estimates(session, job, estimates)
    record(session=session, kind="job.submitted", job_id=job.id, message=f"job {job.id} submitted")
    return job, True


def check_priority(settings: Settings, queue: str, priority: int) -> None:
    """Refuse a priority above what users may set in `queue`."""
    most = settings.max_priority(queue)
    if priority > most:
        raise ApiError(
            422,
            "priority_too_high",
            f"priority {priority} is above {most}, the most a user may set in queue "
            f"{queue!r} (COLLOC_QUEUE_MAX_PRIORITY); an admin can raise it",
            {"priority": priority, "max_priority": most, "queue": queue},
        )


def set_priority(*, session: Session, job: Job, priority: int, by: str) -> Job:
    """An admin changes a job's priority (pending or running: it orders the queue and
    decides who may preempt whom from the next cycle on)."""
    if job.state in FINAL_JOB_STATES:
        raise ApiError(409, "already_finished", f"job {job.id} already ended ({job.state})")
    old, job.priority = job.priority, priority
    job.updated_at = utcnow()
    record(
        session=session,
        kind="job.priority",
        job_id=job.id,
        message=f"priority changed from {old} to {priority} by {by}",
        data={"from": old, "to": priority, "by": by},
    )
    return job


PROBLEM_MAX_CHARS = 4096  # as much of a failure's reason as agents may send


def fail_unschedulable(*, session: Session, job: Job, problem: str) -> None:
    """End a waiting job the scheduler cannot handle (a spec stored before it could be
    refused, an estimate that fails): it alone fails, with the reason, and the cycle
    goes on for the others."""
    now = utcnow()
    job.state = "failed"
    # the problem may quote the spec: kept storable (no NUL) and readable (bounded)
    job.reason = f"cannot be scheduled: {problem.replace(chr(0), '')[:PROBLEM_MAX_CHARS]}"
    job.finished_at = job.updated_at = now
    record(session=session, kind="job.failed", job_id=job.id, message=job.reason)


def hold_unschedulable(*, session: Session, job: Job, problem: str) -> None:
    """Keep a waiting job the scheduler met an unexpected error on waiting, saying why
    (an event when the reason changes, not every cycle)."""
    reason = f"waiting: the scheduler cannot handle it now ({problem.replace(chr(0), '')})"
    reason = reason[:PROBLEM_MAX_CHARS]
    if job.reason != reason:
        job.reason = reason
        record(session=session, kind="job.unschedulable", job_id=job.id, message=reason)


def training_spec(job: Job) -> TrainingSpec | None:
    raw = job.spec.get("training")
    return TrainingSpec.model_validate(raw) if raw else None


def get(*, session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise not_found("job", job_id)
    return job


def list_jobs(
    *, session: Session, filters: JobFilters, limit: int = 100, offset: int = 0
) -> tuple[list[Job], int]:
    """Jobs, newest first, with the total matching count."""
    query = select(Job)
    if filters.states:
        query = query.where(Job.state.in_(filters.states))
    if filters.owner is not None:
        query = query.where(Job.owner == filters.owner)
    if filters.queue is not None:
        query = query.where(Job.queue == filters.queue)
    if filters.gpu_model is not None:
        ran_there = (
            select(Attempt.job_id)
            .join(Allocation, Allocation.attempt_id == Attempt.id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .where(Gpu.model == filters.gpu_model)
        )
        query = query.where(Job.id.in_(ran_there))
    if filters.created.since is not None:
        query = query.where(Job.created_at >= filters.created.since)
    if filters.created.until is not None:
        query = query.where(Job.created_at < filters.created.until)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    page = query.order_by(Job.id.desc()).limit(limit).offset(offset)
    jobs = session.scalars(page.options(*_READ_OPTIONS)).all()
    return list(jobs), total


def cancel(*, session: Session, job: Job) -> Job:
    """Cancel a pending job at once; ask the agent to stop an active one."""
    if job.state in FINAL_JOB_STATES:
        raise ApiError(409, "already_finished", f"job {job.id} already ended ({job.state})")
    now = utcnow()
    if job.state == "pending":
        job.state = "cancelled"
        job.finished_at = now
        job.reason = "cancelled before it was placed"
        record(session=session, kind="job.cancelled", job_id=job.id, message=job.reason)
    elif not job.cancel_requested:
        job.cancel_requested = True
        record(
            session=session,
            kind="job.cancel_requested",
            job_id=job.id,
            message=f"cancellation of job {job.id} sent to its agent",
        )
    job.updated_at = now
    return job


def start_attempt(
    *,
    session: Session,
    job: Job,
    node_id: int,
    gpus: list[Gpu],
    reserved_mib: Sequence[int],
    why: str = "",
) -> Attempt:
    """Place a pending job: a new attempt holding `reserved_mib[i]` on `gpus[i]`."""
    now = utcnow()
    attempt = Attempt(
        job_id=job.id,
        number=len(job.attempts) + 1,
        node_id=node_id,
        state="placed",
        reserved_mib=max(reserved_mib),
        placed_at=now,
    )
    session.add(attempt)
    job.attempts.append(attempt)
    for gpu, mib in zip(gpus, reserved_mib, strict=True):
        session.add(Allocation(attempt=attempt, gpu_id=gpu.id, reserved_mib=mib))
    job.state = "placed"
    job.reason = None
    job.updated_at = now
    where = ", ".join(
        f"{gpu.model} #{gpu.index} ({gpu.uuid}) with {mib} MiB"
        for gpu, mib in zip(gpus, reserved_mib, strict=True)
    )
    record(
        session=session,
        kind="job.placed",
        job_id=job.id,
        node_id=node_id,
        message=f"attempt {attempt.number} placed on {where}" + (f"; {why}" if why else ""),
        data={"attempt": attempt.number, "gpus": [gpu.uuid for gpu in gpus]},
    )
    return attempt


def preempt(*, session: Session, job: Job, for_job: int) -> None:
    """Ask the agent to stop `job` so that `for_job` can have its GPUs; it waits again."""
    if job.preempt_requested or job.state not in ACTIVE_ATTEMPT_STATES:
        return
    job.preempt_requested = True
    job.updated_at = utcnow()
    record(
        session=session,
        kind="job.preempting",
        job_id=job.id,
        message=f"preempted to make room for job {for_job}",
        data={"for_job": for_job},
    )


def mark_running(*, session: Session, attempt: Attempt, started_at: datetime | None) -> None:
    if attempt.state != "placed":
        return
    attempt.state = "running"
    attempt.started_at = started_at or utcnow()
    attempt.job.state = "running"
    attempt.job.updated_at = utcnow()
    record(
        session=session,
        kind="job.running",
        job_id=attempt.job_id,
        node_id=attempt.node_id,
        message=f"attempt {attempt.number} started",
    )


def track_usage(
    *,
    session: Session,
    attempt: Attempt,
    peak_mib_by_gpu: dict[str, int],
    settings: Settings,
    current_mib_by_gpu: dict[str, int] | None = None,
) -> None:
    """Keep what a running attempt uses now, and let its reservation follow its peak.

    It grows at once when the job passes it, and shrinks to the observed peak plus the
    margin once that peak has held for `reservation_stable_s`, so packing improves as
    jobs reveal themselves.
    """
    for allocation in attempt.allocations:
        current = (current_mib_by_gpu or {}).get(allocation.gpu.uuid)
        if current is not None:
            allocation.used_mib = current
    if not peak_mib_by_gpu:
        return
    now = utcnow()
    peak = max(peak_mib_by_gpu.values())
    if peak > (attempt.peak_mib or 0):
        attempt.peak_mib = peak
        attempt.peak_changed_at = now
    steady_since = attempt.peak_changed_at or attempt.started_at or now
    steady_s = (now - steady_since).total_seconds()
    rules = settings.reservation_rules()
    for allocation in attempt.allocations:
        used = peak_mib_by_gpu.get(allocation.gpu.uuid)
        if used is None:
            continue
        target = followed_reservation(
            rules, used_mib=used, reserved_mib=allocation.reserved_mib, steady_s=steady_s
        )
        if target is not None:
            grow = used > allocation.reserved_mib
            record(
                session=session,
                kind="job.reservation",
                job_id=attempt.job_id,
                node_id=attempt.node_id,
                message=f"reservation on GPU {allocation.gpu.uuid} "
                f"{'grown' if grow else 'shrunk'} from {allocation.reserved_mib} to {target} "
                f"MiB (peak {used} MiB" + (")" if grow else f", steady for {steady_s:.0f} s)"),
            )
            allocation.reserved_mib = target
    attempt.reserved_mib = max(a.reserved_mib for a in attempt.allocations)


def end_attempt(
    *,
    session: Session,
    attempt: Attempt,
    outcome: str,
    settings: Settings,
    exit_code: int | None = None,
    reason: str | None = None,
    peak_mib_by_gpu: dict[str, int] | None = None,
    finished_at: datetime | None = None,
) -> None:
    """Close an attempt: release its GPUs, keep its peaks, and settle the job.

    A preempted attempt sends the job back to the queue. An `oom` or `lost` attempt is
    retried while the job's attempt budget lasts (preempted attempts do not count),
    after a back-off that doubles with each failure; after an OOM no later attempt
    reserves less than the factor times what this one needed.
    """
    if attempt.state not in ACTIVE_ATTEMPT_STATES:
        return
    job = attempt.job
    if job.preempt_requested and outcome != "succeeded":
        outcome = "preempted"
    elif job.cancel_requested and outcome != "succeeded":
        outcome = "cancelled"
    now = utcnow()
    peaks = observations.store(
        session=session,
        attempt=attempt,
        outcome=outcome,
        peak_mib_by_gpu=peak_mib_by_gpu or {},
        now=now,
        finished_at=finished_at or now,
        settings=settings,
    )
    attempt.state = outcome
    attempt.finished_at = finished_at or now
    attempt.exit_code = exit_code
    attempt.reason = reason
    attempt.peak_mib = max(peaks) if peaks else attempt.peak_mib
    for allocation in attempt.allocations:
        allocation.active = False
    job.updated_at = now
    job.exit_code = exit_code
    job.preempt_requested = False
    message = f"attempt {attempt.number} ended {outcome}" + (f": {reason}" if reason else "")
    record(
        session=session,
        kind=f"job.{outcome}",
        job_id=job.id,
        node_id=attempt.node_id,
        message=message,
        data={"attempt": attempt.number, "exit_code": exit_code, "peak_mib": attempt.peak_mib},
    )
    if outcome == "preempted":
        _requeue(session, job, "preempted; waiting to run again", now)
        return
    tries = sum(1 for a in job.attempts if a.state != "preempted")
    retry = outcome in ("oom", "lost") and tries < job.max_attempts
    if retry and outcome == "oom":
        floor = oom_retry_floor(
            settings.reservation_rules(),
            reserved_mib=attempt.reserved_mib,
            peak_mib=attempt.peak_mib or 0,
            available_mib=_available_mib(session, attempt),
        )
        job.reservation_floor_mib = least = max(floor, job.reservation_floor_mib or 0)
        retry = can_ever_fit(  # as admission asks it: a gang needs its GPUs on one node
            gpus=job.gpus,
            models=job.spec.get("gpu_models"),
            cluster=_cluster_gpus(session),
            demand=lambda _model: least,
            headroom_mib=settings.memory_headroom_mib,
        )
        reason = (
            f"requeued with at least {least} MiB per GPU"
            if retry
            else f"needs at least {least} MiB on each of {job.gpus} GPU(s) of one node, "
            "more than any eligible GPU has on a node with that many"
        )
    elif retry:
        reason = "requeued after the attempt was lost"
    if retry:
        failures = sum(1 for a in job.attempts if a.state in ("oom", "lost"))
        backoff = retry_backoff_s(settings.reservation_rules(), failures)
        job.not_before = now + timedelta(seconds=backoff)
        _requeue(
            session,
            job,
            f"{reason}, not before {backoff:g} s (attempt {tries + 1} of {job.max_attempts})",
            now,
        )
        return
    job.state = outcome
    job.finished_at = now
    job.reason = reason


def _available_mib(session: Session, attempt: Attempt) -> int:
    """What the attempt could have had on its tightest GPU: a CUDA OOM means it needed
    more (capacity less foreign memory and its neighbours' reservations)."""
    available = []
    for allocation in attempt.allocations:
        neighbours = session.scalar(
            select(func.coalesce(func.sum(Allocation.reserved_mib), 0)).where(
                Allocation.gpu_id == allocation.gpu_id,
                Allocation.active.is_(True),
                Allocation.attempt_id != attempt.id,
            )
        )
        gpu = allocation.gpu
        available.append(gpu.memory_total_mib - gpu.memory_foreign_mib - int(neighbours or 0))
    return min(available, default=0)


def _requeue(session: Session, job: Job, reason: str, now: datetime) -> None:
    job.state = "pending"
    job.reason = reason
    job.updated_at = now
    record(session=session, kind="job.requeued", job_id=job.id, message=reason)


_READ_OPTIONS = (
    selectinload(Job.attempts).options(
        selectinload(Attempt.node),
        selectinload(Attempt.allocations).selectinload(Allocation.gpu),
    ),
    selectinload(Job.estimates),
)


def to_read(job: Job) -> JobRead:
    """The API view of a job, its attempts and their GPUs."""
    return JobRead(
        id=job.id,
        name=job.name,
        owner=job.owner,
        queue=job.queue,
        priority=job.priority,
        state=job.state,
        command=job.spec["command"],
        gpus=job.gpus,
        gpu_models=job.spec.get("gpu_models"),
        memory_mib=job.memory_mib,
        reservation_floor_mib=job.reservation_floor_mib,
        max_attempts=job.max_attempts,
        preemptible=bool(job.spec.get("preemptible")),
        cancel_requested=job.cancel_requested,
        not_before=job.not_before,
        exit_code=job.exit_code,
        reason=job.reason,
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
        attempts=[
            AttemptRead(
                number=attempt.number,
                state=attempt.state,
                node=attempt.node.name,
                gpus=[
                    AttemptGpu(
                        uuid=a.gpu.uuid,
                        index=a.gpu.index,
                        model=a.gpu.model,
                        reserved_mib=a.reserved_mib,
                        used_mib=a.used_mib,
                    )
                    for a in sorted(attempt.allocations, key=lambda a: a.gpu.index)
                ],
                reserved_mib=attempt.reserved_mib,
                placed_at=attempt.placed_at,
                started_at=attempt.started_at,
                finished_at=attempt.finished_at,
                exit_code=attempt.exit_code,
                reason=attempt.reason,
                peak_mib=attempt.peak_mib,
            )
            for attempt in job.attempts
        ],
        estimates=[
            Estimate(
                gpu_model=e.gpu_model,
                peak_mib=e.peak_mib,
                upper_mib=e.upper_mib,
                coverage=e.coverage,
                method=e.method,
                breakdown_mib=e.breakdown_mib,
                model_version=e.model_version,
            )
            for e in sorted(job.estimates, key=lambda e: e.gpu_model)
        ],
        spec=job.spec,
    )


def to_list(jobs: list[Job], total: int) -> JobList:
    return JobList(jobs=[to_read(job) for job in jobs], total=total)
