"""A job's attempts, as the scheduler places them and agents report them: every
function changes state inside the caller's transaction and records the matching
event, so a state change and its audit entry commit together. What an ended attempt
means for its job is decided by the pure rules of `service/scheduler/lifecycle.py`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from service.config import Settings
from service.db import lock_placements, utcnow
from service.errors import ApiError
from service.events.service import record
from service.jobs import observations
from service.jobs.models import Allocation, Attempt, Job, Observation
from service.nodes.makeup import cluster_gpus
from service.scheduler.lifecycle import (
    RETRY_RATIOS_KEPT,
    AttemptEnd,
    Ending,
    GpuHeld,
    JobHistory,
    ended_as,
    followed_reservation,
    oom_needed_mib,
    retry_ratio,
    settle,
)
from service.scheduler.states import (
    ACTIVE_ATTEMPT_STATES,
    FINAL_JOB_STATES,
    AttemptState,
    JobState,
)

PROBLEM_MAX_CHARS = 4096  # as much of a failure's reason as agents may send
# An OOM's retry step reads the latest of this many retry ratios, the cluster's, for
# those its owner may learn from: ten times as many as it keeps, which bounds the read
# (2,000 index rows) where an owner has few of them
RETRY_RATIOS_READ = 10 * RETRY_RATIOS_KEPT


def fail_unschedulable(*, session: Session, job: Job, problem: str) -> None:
    """End a waiting job the scheduler cannot handle (a spec stored before it could be
    refused, an estimate that fails): it alone fails, with the reason, and the cycle
    goes on for the others."""
    now = utcnow()
    job.state = JobState.FAILED
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


def cancel(*, session: Session, job: Job) -> Job:
    """Cancel a pending job at once; ask the agent to stop an active one. The job is
    read again under the placement lock whatever state it was read in: a heartbeat may
    have just requeued a running one (its attempt lost), which is then pending and
    cancelled at once, never placed again."""
    _lock_against_placement(session, job)
    if job.state in FINAL_JOB_STATES:
        raise ApiError(409, "already_finished", f"job {job.id} already ended ({job.state})")
    now = utcnow()
    if job.state == JobState.PENDING:
        job.state = JobState.CANCELLED
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


def time_limit_for(settings: Settings, queue: str, asked_s: int | None) -> int | None:
    """A new job's time limit: what its spec asks, else its queue's default; more than
    its queue's maximum is refused."""
    limit = asked_s or settings.default_time_limit_s(queue)
    most = settings.max_time_limit_s(queue)
    if most is not None and (limit is None or limit > most):
        if asked_s is None:
            return most  # no default for the queue: its maximum is the limit
        raise ApiError(
            422,
            "time_limit_too_long",
            f"time limit {limit} s is above {most} s, the most in queue {queue!r} "
            "(COLLOC_QUEUE_MAX_TIME_LIMIT_S)",
            {"time_limit": limit, "max_time_limit": most, "queue": queue},
        )
    return limit


def hold(*, session: Session, job: Job, by: str) -> Job:
    """Keep a pending job from being scheduled until it is released."""
    _lock_against_placement(session, job)
    if job.state != JobState.PENDING:
        raise ApiError(
            409, "not_pending", f"job {job.id} is {job.state}: only a pending job is held"
        )
    _set_held(session=session, job=job, held=True, by=by)
    return job


def _lock_against_placement(session: Session, job: Job) -> None:
    """Take the placement lock and read `job` again as its holder sees it: a scheduling
    cycle holds the lock from its snapshot to its write, so a job held or cancelled while
    it waits is never placed by a cycle that read it before."""
    lock_placements(session)
    session.refresh(job)


def release(*, session: Session, job: Job, by: str) -> Job:
    """Let a held job be scheduled again."""
    _set_held(session=session, job=job, held=False, by=by)
    return job


def _set_held(*, session: Session, job: Job, held: bool, by: str) -> None:
    """Hold or release a job, saying who did it; nothing happens (no event) when it
    already is so, so that repeating either is harmless."""
    if job.held == held:
        return
    job.held = held
    job.reason = f"held by {by}" if held else f"released by {by}"
    job.updated_at = utcnow()
    kind = "job.held" if held else "job.released"
    record(session=session, kind=kind, job_id=job.id, message=job.reason)


def requeue(*, session: Session, job: Job, why: str) -> Job:
    """Stop a placed or running job's attempt and let the job wait again: the
    preemption path (its agent is told to stop it; it ends `preempted`, not counted
    against the job's attempts). Under the placement lock, read again, as cancel does:
    a heartbeat that requeued the job meanwhile leaves no stop request on a pending job
    for its next attempt."""
    _lock_against_placement(session, job)
    if job.state not in (JobState.PLACED, JobState.RUNNING):
        raise ApiError(
            409,
            "not_active",
            f"job {job.id} is {job.state}: only a placed or running job is requeued",
        )
    if not job.preempt_requested:
        job.preempt_requested = True
        job.updated_at = utcnow()
        record(session=session, kind="job.requeue_requested", job_id=job.id, message=why)
    return job


def stop_overdue(*, session: Session, now: datetime) -> list[int]:
    """Tell the agents of attempts running past their job's time limit to stop them
    (through cancellation; the attempt then ends `timeout`). Returns the jobs stopped."""
    rows = session.execute(
        select(Attempt, Job)
        .join(Job, Job.id == Attempt.job_id)
        .where(
            Attempt.state == AttemptState.RUNNING,
            Job.time_limit_s.is_not(None),
            Job.timed_out.is_(False),
        )
    ).all()
    stopped = []
    for attempt, job in rows:
        assert job.time_limit_s is not None and attempt.started_at is not None
        if now - attempt.started_at < timedelta(seconds=job.time_limit_s):
            continue
        job.timed_out = job.cancel_requested = True
        job.updated_at = now
        record(
            session=session,
            kind="job.time_limit",
            job_id=job.id,
            node_id=attempt.node_id,
            message=f"attempt {attempt.number} ran past its time limit of "
            f"{job.time_limit_s} s: its agent is told to stop it",
        )
        stopped.append(job.id)
    return stopped


def preempt(*, session: Session, job: Job, for_job: int) -> None:
    """Ask the agent to stop `job` so that `for_job` can have its GPUs; it waits again."""
    if job.preempt_requested or job.state not in (JobState.PLACED, JobState.RUNNING):
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


def _agent_time(attempt: Attempt, reported: datetime | None, now: datetime) -> datetime:
    """A time an attempt's agent reports (its start, its end) as the server keeps it:
    as reported where it lies between the attempt's start (or, not started yet, its
    placement) and now by the server's own clock, else now, when the server heard of it
    (within a heartbeat of the event). Agents' clocks are not trusted: a node's clock
    behind or ahead would otherwise decide its jobs' time limits (stopped `timeout` as
    they start, or run past their limit by the skew), run times (whether a peak is
    credible) and when their output is dropped. Replaced rather than clamped, so that a
    clock behind by more than a run keeps the run's length (both ends are when the
    server heard them) instead of squeezing it to nothing against its start."""
    earliest = attempt.started_at or attempt.placed_at
    if reported is None or not earliest <= reported <= now:
        return now
    return reported


def mark_running(*, session: Session, attempt: Attempt, started_at: datetime | None) -> None:
    """A placed attempt its agent reports started, at `started_at` as far as the server's
    clock allows (_agent_time)."""
    if attempt.state != AttemptState.PLACED:
        return
    now = utcnow()
    attempt.state = AttemptState.RUNNING
    attempt.started_at = _agent_time(attempt, started_at, now)
    attempt.job.state = JobState.RUNNING
    attempt.job.updated_at = now
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
    outcome: AttemptState,
    settings: Settings,
    exit_code: int | None = None,
    reason: str | None = None,
    peak_mib_by_gpu: dict[str, int] | None = None,
    finished_at: datetime | None = None,
) -> None:
    """Close an attempt: release its GPUs, keep its peaks, and settle the job as the
    lifecycle rules decide (done, failed, or waiting again). It ended at `finished_at`
    (its agent's) as far as the server's clock allows (_agent_time)."""
    if attempt.state not in ACTIVE_ATTEMPT_STATES:
        return
    job = attempt.job
    outcome = ended_as(
        outcome,
        preempt_requested=job.preempt_requested,
        cancel_requested=job.cancel_requested,
        timed_out=job.timed_out,
    )
    now = utcnow()
    finished_at = _agent_time(attempt, finished_at, now)
    peaks = observations.store(
        session=session,
        attempt=attempt,
        outcome=outcome,
        peak_mib_by_gpu=peak_mib_by_gpu or {},
        now=now,
        finished_at=finished_at,
        settings=settings,
    )
    held = _gpus_held(session, attempt)
    earlier = [AttemptState(a.state) for a in job.attempts if a is not attempt]
    attempt.state = outcome
    attempt.finished_at = finished_at
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
    ending = Ending(outcome, reason, attempt.reserved_mib, attempt.peak_mib or 0, held)
    if outcome == AttemptState.OOM:
        attempt.needed_mib = oom_needed_mib(ending)
    _note_retry_ratio(attempt)
    decision = settle(
        settings.reservation_rules(),
        ending=ending,
        job=JobHistory(
            gpus=job.gpus,
            gpu_models=job.spec.get("gpu_models"),
            max_attempts=job.max_attempts,
            floor_mib=job.reservation_floor_mib,
            earlier=earlier,
        ),
        cluster=cluster_gpus(session),
        headroom_mib=settings.memory_headroom_mib,
        retry_ratios=_retry_ratios(session, job.owner) if outcome == AttemptState.OOM else (),
    )
    job.reservation_floor_mib = decision.floor_mib
    if decision.backoff_s is not None:
        job.not_before = now + timedelta(seconds=decision.backoff_s)
    if decision.job_state == JobState.PENDING:
        _requeue(session, job, decision.reason or "", now)
        return
    job.state = decision.job_state
    job.finished_at = now
    job.reason = decision.reason


def _note_retry_ratio(attempt: Attempt) -> None:
    """Keep what the attempt, as it ended, shows of how far its job went on to need
    after an OOM (`retry_ratio`: set on a success after one)."""
    ends = [
        AttemptEnd(AttemptState(a.state), a.peak_mib, a.needed_mib)
        for a in attempt.job.attempts
        if a.number <= attempt.number
    ]
    attempt.retry_ratio = retry_ratio(ends)


def _retry_ratios(session: Session, owner: str) -> list[float]:
    """The RETRY_RATIOS_KEPT latest `retry_ratio`s (by when their attempt was placed)
    that `owner`'s retries learn from: their own jobs', and those of jobs whose peaks an
    admin stands behind (the owner is an admin, or an admin vouched for the job), so one
    user's jobs, dying and then growing, raise no other user's step (with auth on).
    Unlike the estimator's history it does not ask a peak to be credible, which takes a
    training spec: a job given by its memory claim runs out of memory as truly.
    Among the cluster's latest RETRY_RATIOS_READ only, so that an OOM's read is bounded
    however long the history and however few of it are the owner's."""
    trusted = (
        select(Observation.id)
        .where(Observation.attempt_id == Attempt.id, Observation.trusted.is_(True))
        .exists()
    )
    recent = (
        select(Attempt.id)
        .where(Attempt.retry_ratio.is_not(None))
        .order_by(Attempt.id.desc())
        .limit(RETRY_RATIOS_READ)
        .subquery()
    )
    latest = (
        select(Attempt.retry_ratio)
        .join(recent, recent.c.id == Attempt.id)
        .join(Job, Job.id == Attempt.job_id)
        .where(or_(Job.owner == owner, trusted))
        .order_by(Attempt.id.desc())
        .limit(RETRY_RATIOS_KEPT)
    )
    return [float(ratio) for ratio in session.scalars(latest) if ratio is not None]


def _gpus_held(session: Session, attempt: Attempt) -> list[GpuHeld]:
    """The attempt's GPUs as it ended: capacity, foreign memory, and what its active
    neighbours reserve there."""
    held = []
    for allocation in attempt.allocations:
        neighbours = session.scalar(
            select(func.coalesce(func.sum(Allocation.reserved_mib), 0)).where(
                Allocation.gpu_id == allocation.gpu_id,
                Allocation.active.is_(True),
                Allocation.attempt_id != attempt.id,
            )
        )
        gpu = allocation.gpu
        held.append(GpuHeld(gpu.memory_total_mib, gpu.memory_foreign_mib, int(neighbours or 0)))
    return held


def _requeue(session: Session, job: Job, reason: str, now: datetime) -> None:
    job.state = JobState.PENDING
    job.reason = reason
    job.updated_at = now
    record(session=session, kind="job.requeued", job_id=job.id, message=reason)


def hold_off_rerun(*, job: Job, settings: Settings, now: datetime) -> None:
    """Keep a job whose attempt ended while its node may still run it (lost with its
    node, taken back unstarted) from being placed again before that node's agent has
    surely stopped it: it fences its jobs `fence_margin_s` before the lease ends, and the
    job waits as long again after (agent/protocol.py's FENCE_MARGIN_HEARTBEATS)."""
    until = now + timedelta(seconds=settings.fence_margin_s())
    if job.state == JobState.PENDING and (job.not_before is None or job.not_before < until):
        job.not_before = until


def take_back_unstarted(*, session: Session, settings: Settings, now: datetime) -> list[int]:
    """End `lost` the placed attempts their node has not started within
    `launch_timeout_s` (a node that heartbeats but never launches would keep them placed
    for ever), so their jobs are requeued while their attempts last. Returns the jobs."""
    deadline = now - timedelta(seconds=settings.launch_timeout_s)
    stale = list(
        session.scalars(
            select(Attempt).where(
                Attempt.state == AttemptState.PLACED, Attempt.placed_at < deadline
            )
        )
    )
    if stale:
        lock_placements(session)  # reservations are released here
        for attempt in stale:  # a heartbeat may have started one before the lock was ours
            session.refresh(attempt)
        stale = [attempt for attempt in stale if attempt.state == AttemptState.PLACED]
    for attempt in stale:
        reason = (
            f"not started by node {attempt.node.name} within {settings.launch_timeout_s:g} s "
            "of its placement (launch_timeout_s): taken back"
        )
        record(
            session=session,
            kind="job.launch_timeout",
            job_id=attempt.job_id,
            node_id=attempt.node_id,
            message=f"attempt {attempt.number} {reason}",
        )
        end_attempt(
            session=session,
            attempt=attempt,
            outcome=AttemptState.LOST,
            settings=settings,
            reason=reason,
        )
        hold_off_rerun(job=attempt.job, settings=settings, now=now)
    return [attempt.job_id for attempt in stale]


def accept_late_success(
    *,
    session: Session,
    attempt: Attempt,
    exit_code: int | None,
    finished_at: datetime | None,
    peak_mib_by_gpu: dict[str, int],
) -> None:
    """An attempt that ended `lost` because its node was unreachable, and that the node,
    back again, reports succeeded: a success is a success, and the job is not run again.

    It wins over what became of the job meanwhile, except a user's cancellation: the job
    ends succeeded, and a newer attempt is withdrawn (ends `cancelled`: a placed one is
    never sent to its agent, a running one's agent is told to stop it, as it is no
    longer active). The peaks were kept as the lost attempt's when it ended."""
    job = attempt.job
    if attempt.state != AttemptState.LOST or job.state == JobState.CANCELLED:
        return
    now = utcnow()
    newer = [
        a for a in job.attempts if a.number > attempt.number and a.state in ACTIVE_ATTEMPT_STATES
    ]
    if newer:
        lock_placements(session)  # their reservations are released here
    for other in newer:
        other.state = AttemptState.CANCELLED
        other.finished_at = now
        other.reason = f"withdrawn: attempt {attempt.number} had succeeded (reported late)"
        for allocation in other.allocations:
            allocation.active = False
        record(
            session=session,
            kind="job.cancelled",
            job_id=job.id,
            node_id=other.node_id,
            message=f"attempt {other.number} ended cancelled: {other.reason}",
            data={"attempt": other.number},
        )
    attempt.state = AttemptState.SUCCEEDED
    attempt.exit_code = job.exit_code = exit_code
    attempt.finished_at = _agent_time(attempt, finished_at, now)
    attempt.peak_mib = max(peak_mib_by_gpu.values(), default=attempt.peak_mib)
    attempt.reason = "succeeded while its node was unreachable (reported late)"
    _note_retry_ratio(attempt)
    job.state = JobState.SUCCEEDED
    job.finished_at = job.updated_at = now
    job.reason = attempt.reason
    job.not_before = None
    job.cancel_requested = job.preempt_requested = False
    record(
        session=session,
        kind="job.late_success",
        job_id=job.id,
        node_id=attempt.node_id,
        message=f"attempt {attempt.number} {attempt.reason}; the job is not run again",
        data={
            "attempt": attempt.number,
            "exit_code": exit_code,
            "withdrawn": [a.number for a in newer],
        },
    )
