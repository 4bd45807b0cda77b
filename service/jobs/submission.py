"""Submitting a job: its GPU model names made canonical, its estimates made and kept,
and admission (a job no node could ever hold, or a priority above its queue's, is
refused). Only an admin moves a job's priority later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from estimator.analytical.model import SpecError
from estimator.estimate import Estimate, Estimator, proven_peaks
from estimator.gpus import GPU_MODELS, canonical_gpu_name
from estimator.spec import TrainingSpec
from service.config import Settings
from service.db import utcnow
from service.errors import ApiError
from service.events.service import record
from service.jobs.lifecycle import time_limit_for
from service.jobs.models import Job, JobEstimate
from service.jobs.schemas import JobCreate
from service.nodes.makeup import cluster_gpus
from service.scheduler.admission import can_ever_fit
from service.scheduler.snapshot import pending_job, room_by_model
from service.scheduler.states import FINAL_JOB_STATES, JobState


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


@dataclasses.dataclass(frozen=True)
class MadeEstimates:
    """A job's estimates per GPU model, and the basis they were made on
    (`Estimator.basis`), kept with them."""

    by_model: dict[str, Estimate]
    basis: str


def _estimate_values(model: str, estimate: Estimate, basis: str) -> dict[str, Any]:
    """A `job_estimates` row's columns but its job's."""
    return {
        "gpu_model": model,
        "peak_mib": _storable(estimate.peak_mib),
        "upper_mib": _storable(estimate.upper_mib),
        "coverage": estimate.coverage,
        "method": estimate.method,
        "model_version": estimate.model_version,
        "breakdown_mib": {k: _storable(v) for k, v in estimate.breakdown_mib.items()},
        "basis": basis,
    }


# `store_estimates`' statements, run on the session's connection as core statements
# (executemany: one for every row)
_ESTIMATE_REPLACED = delete(JobEstimate).where(
    JobEstimate.job_id == bindparam("j"), JobEstimate.gpu_model == bindparam("m")
)
_ESTIMATES_REBASED = (
    update(JobEstimate).where(JobEstimate.job_id == bindparam("j")).values(basis=bindparam("b"))
)


def store_estimates(session: Session, made: Mapping[int, MadeEstimates]) -> None:
    """Keep each job's `made` estimates (by job id) in place of any it had on those GPU
    models; its other estimates count as judged on the new basis too (they stand).

    Three statements for all the jobs, each run for many rows at once: one run that
    ends can make a whole queue's estimates stale, and 1,000 jobs stored one by one
    took most of a cycle (`bench/scheduler_cycle.py --live`). They run on the session's
    connection, after its pending changes, and leave its ORM objects as they were: a
    caller holds no `JobEstimate` of these jobs."""
    if not made:
        return
    session.flush()
    connection = session.connection()
    replaced = [{"j": job_id, "m": model} for job_id, new in made.items() for model in new.by_model]
    if replaced:
        connection.execute(_ESTIMATE_REPLACED, replaced)
    connection.execute(
        _ESTIMATES_REBASED, [{"j": job_id, "b": new.basis} for job_id, new in made.items()]
    )
    rows = [
        {"job_id": job_id, **_estimate_values(model, estimate, new.basis)}
        for job_id, new in made.items()
        for model, estimate in new.by_model.items()
    ]
    if rows:
        connection.execute(insert(JobEstimate), rows)


def create(
    *,
    session: Session,
    job_in: JobCreate,
    owner: str,
    settings: Settings,
    estimator: Callable[[], Estimator],
    idempotency_key: str | None = None,
    admin: bool = False,
) -> tuple[Job, bool]:
    """Submit a job; returns it and whether it is new (False: an idempotent replay).

    The cluster is read as its cached make-up (`service.nodes.makeup`), so a submit
    costs the same whatever the cluster's size. A job with a `training` spec is
    estimated on every GPU model in the cluster now (on
    VALIDATION_GPU when there is none, to refuse a spec it cannot estimate); models that
    join later are estimated by the scheduler when it first needs them. `estimator` is
    called only then: bringing it up to date reads the database. Only an `admin`
    may give a job a priority above its queue's maximum.
    """
    if not admin:
        check_priority(settings, job_in.queue, job_in.priority)
    time_limit_s = time_limit_for(settings, job_in.queue, job_in.time_limit)
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
    cluster = cluster_gpus(session)
    known = sorted({m for _n, m, _t in cluster})
    models = None
    if job_in.gpu_models is not None:
        models = _canonical_models(job_in.gpu_models, known)
    estimates: dict[str, Estimate] = {}
    basis = ""
    if job_in.training is not None:
        current = estimator()
        estimates = estimate_for(
            current, job_in.training, models or known or [VALIDATION_GPU], owner
        )
        basis = current.basis(job_in.training)
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
        peak_mib={model: e.peak_mib for model, e in estimates.items()},
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
        state=JobState.PENDING,
        spec={**spec, "gpu_models": models},
        gpus=job_in.gpus,
        memory_mib=job_in.memory_mib,
        reservation_floor_mib=None,
        max_attempts=job_in.max_attempts or settings.default_max_attempts,
        cancel_requested=False,
        preempt_requested=False,
        time_limit_s=time_limit_s,
        idempotency_key=idempotency_key,
        created_at=now,
        updated_at=now,
        # its relations given, so that answering with the job reads nothing back
        attempts=[],
        estimates=[JobEstimate(**_estimate_values(m, e, basis)) for m, e in estimates.items()],
    )
    session.add(job)
    session.flush()
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


def training_spec(job: Job) -> TrainingSpec | None:
    raw = job.spec.get("training")
    return TrainingSpec.model_validate(raw) if raw else None
