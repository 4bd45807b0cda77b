"""Observed peaks: kept for every finished attempt, learned from only when credible.

Whether a peak is credible (estimator/history.py says what that takes) and whether it
is trusted (its owner is an admin, or an admin vouched for the job) is decided once,
when the attempt ends, and stored with it: the estimator's history, its refits and the
admin pages all read the same verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from estimator.history import credibility_problem, weights_mib
from estimator.spec import TrainingSpec
from service.auth.models import ApiToken
from service.config import Settings
from service.events.service import record
from service.jobs.models import Attempt, Job, Observation
from service.scheduler.states import AttemptState

# the column that holds why a peak is not learned from (models.Observation.doubt)
DOUBT_MAX_CHARS = 256


def _owner_is_admin(session: Session, owner: str, settings: Settings) -> bool:
    """Whether `owner` holds a live admin token (everyone is one with auth off)."""
    if settings.auth_disabled:
        return True
    admin = select(ApiToken.id).where(
        ApiToken.name == owner, ApiToken.role == "admin", ApiToken.revoked_at.is_(None)
    )
    return session.scalar(admin.limit(1)) is not None


def _weights_mib(job: Job) -> float | str:
    """What one GPU of the job holds of its model's weights, or why that is unknown."""
    raw = job.spec.get("training")
    if not raw:
        return "the job has no training spec"
    try:
        return weights_mib(TrainingSpec.model_validate(raw))
    except Exception as exc:  # a spec stored before it could be refused
        return f"its training spec cannot be estimated ({exc})"


def _doubt(
    outcome: AttemptState, peak_mib: int, ran_s: float, weights: Callable[[], float | str]
) -> str | None:
    """Why this peak is not one to learn from, or None. An OOM's peak only says the
    architecture needs more (it widens a bound, never lowers one): any non-zero one
    counts; other endings teach nothing."""
    if outcome == AttemptState.OOM:
        return None if peak_mib > 0 else "no GPU memory was seen in use"
    if outcome != AttemptState.SUCCEEDED:
        return f"the attempt ended {outcome}"
    held = weights()
    if isinstance(held, str):
        return held
    return credibility_problem(peak_mib=peak_mib, ran_s=ran_s, weights_mib=held)


def store(
    *,
    session: Session,
    attempt: Attempt,
    outcome: AttemptState,
    peak_mib_by_gpu: dict[str, int],
    now: datetime,
    finished_at: datetime,
    settings: Settings,
) -> list[int]:
    """Record the observed peak on each of the attempt's GPUs, with the verdict on it;
    returns the peaks kept."""
    job = attempt.job
    ran_s = (finished_at - (attempt.started_at or finished_at)).total_seconds()
    weights = functools.cache(lambda: _weights_mib(job))  # once, and only if needed
    trusted: bool | None = None
    peaks = []
    for allocation in attempt.allocations:
        peak = peak_mib_by_gpu.get(allocation.gpu.uuid)
        if peak is None:
            continue
        peak = max(peak, 0)
        peaks.append(peak)
        doubt = _doubt(outcome, peak, ran_s, weights)
        if doubt is not None:  # it may quote the spec: kept storable and within its column
            doubt = doubt.replace("\x00", "")[:DOUBT_MAX_CHARS]
        if trusted is None:
            trusted = _owner_is_admin(session, job.owner, settings)
        session.add(
            Observation(
                attempt_id=attempt.id,
                gpu_id=allocation.gpu_id,
                gpu_model=allocation.gpu.model,
                peak_mib=peak,
                created_at=now,
                credible=doubt is None,
                doubt=doubt,
                trusted=bool(trusted),
            )
        )
        if doubt is not None and outcome == AttemptState.SUCCEEDED and job.spec.get("training"):
            record(
                session=session,
                kind="job.observation_doubted",
                job_id=job.id,
                node_id=attempt.node_id,
                message=f"attempt {attempt.number}'s peak of {peak} MiB on "
                f"{allocation.gpu.model} is kept but not learned from: {doubt}",
            )
    return peaks


def trust(*, session: Session, job: Job) -> int:
    """An admin vouches for the job's observed peaks: they answer for every owner's jobs
    (credible ones only: trust does not make a `sleep` a training run). Returns how
    many peaks are trusted now."""
    attempts = select(Attempt.id).where(Attempt.job_id == job.id)
    session.execute(
        update(Observation).where(Observation.attempt_id.in_(attempts)).values(trusted=True)
    )
    count = len(
        session.scalars(
            select(Observation.id).where(
                Observation.attempt_id.in_(attempts), Observation.credible.is_(True)
            )
        ).all()
    )
    record(
        session=session,
        kind="job.observations_trusted",
        job_id=job.id,
        message=f"an admin trusts job {job.id}'s observed peaks ({count} credible)",
    )
    return count
