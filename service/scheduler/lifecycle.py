"""What happens once a job's attempt runs and ends: its reservation follows what it uses,
and its end decides the job's next state (done, failed, or waiting again with a floor
and a back-off). Pure, so the service (`service/jobs/lifecycle.py`) and the trace-driven
simulator apply exactly the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from estimator.learned.calibration import conformal_quantile, min_conformal_points
from service.scheduler.admission import can_ever_fit
from service.scheduler.states import RETRIED_ATTEMPT_STATES, AttemptState, JobState

# The retry step after an OOM covers what this share of the cluster's jobs went on to
# need, as the estimator's upper bound covers this share of runs (estimator/learned):
# a retry that falls short dies again, its GPU time lost.
RETRY_COVERAGE = 0.95
# The retry step learns from the latest jobs that ran again after an OOM, so that it
# follows the cluster's stack as it changes (a cuDNN or PyTorch upgrade moves spikes).
RETRY_RATIOS_KEPT = 200


@dataclass(frozen=True)
class ReservationRules:
    """The settings these rules read (service/config.py documents each)."""

    margin: float = 0.10  # reservation_margin
    stable_s: float = 120.0  # reservation_stable_s
    oom_factor: float = 1.2  # oom_reservation_factor: the least step after an OOM
    oom_backoff_s: float = 10.0  # oom_backoff_s


def followed_reservation(
    rules: ReservationRules, *, used_mib: int, reserved_mib: int, steady_s: float
) -> int | None:
    """The new reservation of a running job that peaked at `used_mib`, or None to keep it.

    It grows at once when the job passes it, and shrinks to the peak plus the margin once
    that peak has held for `stable_s`, so packing improves as jobs reveal themselves.
    """
    target = math.ceil(round(used_mib * (1 + rules.margin), 6))
    if used_mib > reserved_mib:
        return target
    if steady_s >= rules.stable_s and target < reserved_mib:
        return target
    return None


def oom_retry_floor(*, factor: float, needed_mib: int, last_try: bool, largest_mib: int) -> int:
    """The least a retry after an OOM reserves per GPU, for a job that needed more than
    `needed_mib` where the most one eligible GPU can give it is `largest_mib`.

    `factor` more (`retry_factor`), but never more than the largest GPU gives, so that a
    job does not fail for want of a GPU while one could give it more than it needed. On
    its last try it gets the largest GPU whole, whether it outgrew its reservation (its
    estimate was wrong by an unknown amount) or ran out within it, squeezed before it
    reached its own peak (what it needs beyond what it held is unknown too): shared, a
    GPU could fail it either way, and it would fail for want of attempts while some GPU
    could run it alone. With no GPU giving more than it needed, `factor` more (the job
    cannot run again)."""
    least = math.ceil(needed_mib * factor)
    if needed_mib >= largest_mib:
        return least
    if last_try:
        return largest_mib
    return min(least, largest_mib)


def oom_needed_mib(ending: Ending) -> int:
    """What an attempt that died of a CUDA OOM needed more than: its reservation, what it
    reached, or what its tightest GPU could have given it, whichever is most."""
    return max(ending.reserved_mib, ending.peak_mib, _available_mib(ending.gpus))


@dataclass(frozen=True)
class AttemptEnd:
    """One of a job's attempts as the retry step learns from it."""

    outcome: AttemptState
    peak_mib: int | None  # the most it used on one GPU
    needed_mib: int | None  # an OOM's `oom_needed_mib`


def retry_ratio(attempts: Sequence[AttemptEnd]) -> float | None:
    """How far a job that died of an OOM went on to need beyond what it needed then: the
    peak of the attempt that succeeded (the last of `attempts`) over its first OOM's
    need. None for a job that did not die of an OOM, or did not succeed since.

    Only a success's peak is the job's need: a later OOM's need is only a bound from
    below, set by the step that retry took (a factor learned from it would feed on
    itself), and the peak of an attempt cut short is not what the job reaches."""
    if not attempts or attempts[-1].outcome != AttemptState.SUCCEEDED:
        return None
    first = next((a for a in attempts if a.outcome == AttemptState.OOM), None)
    peak, needed = attempts[-1].peak_mib, first.needed_mib if first else None
    if not peak or not needed or needed <= 0:
        return None
    return peak / needed


def retry_factor(rules: ReservationRules, ratios: Sequence[float]) -> float:
    """The step a retry after an OOM takes: the configured factor, or the cluster's own,
    where more.

    `ratios` are the `retry_ratio`s of the latest jobs that ran again after an OOM and
    succeeded. Once there are enough for a conformal bound at RETRY_COVERAGE (19), their
    conformal quantile is at least the next such job's ratio with that probability,
    where jobs' ratios are exchangeable (a success's peak does not depend on the step
    its retry took); from 39 on, no single job sets it. Spikes the estimator's
    measurements never showed (cuDNN benchmark workspaces, data-dependent shapes) are
    the stack's, so the cluster's jobs tell how far a job that died goes on to reach
    better than any constant does. Whose jobs teach whom is the caller's: the service
    learns a user's step from their own jobs and those whose peaks an admin stands
    behind.
    """
    if len(ratios) < min_conformal_points(RETRY_COVERAGE):
        return rules.oom_factor
    learned = conformal_quantile(np.asarray(ratios, dtype=np.float64), RETRY_COVERAGE)
    return max(rules.oom_factor, learned)


def retry_backoff_s(rules: ReservationRules, failures: int) -> float:
    """The wait before a retry, doubling with each failed attempt."""
    return float(rules.oom_backoff_s * 2.0 ** (failures - 1))


def ended_as(
    outcome: AttemptState,
    *,
    preempt_requested: bool,
    cancel_requested: bool,
    timed_out: bool = False,
) -> AttemptState:
    """How an attempt ended: one that was asked to stop and did not succeed ended
    timeout (it ran past its time limit), preempted (the scheduler or a requeue asked) or
    cancelled (its user asked). Past its limit it ends timeout even if a preemption or
    requeue was asked too: a job does not wait again with its time spent."""
    if outcome == AttemptState.SUCCEEDED:
        return outcome
    if timed_out:
        return AttemptState.TIMEOUT
    if preempt_requested:
        return AttemptState.PREEMPTED
    if cancel_requested:
        return AttemptState.CANCELLED
    return outcome


@dataclass(frozen=True)
class GpuHeld:
    """One GPU an attempt held as it ended."""

    memory_total_mib: int
    foreign_mib: int  # used by processes that are not jobs
    neighbours_mib: int  # reserved by the other jobs on it


@dataclass(frozen=True)
class Ending:
    """An attempt that ended, as observed."""

    outcome: AttemptState  # as `ended_as` tells it
    reason: str | None  # the agent's (or the server's) word on why
    reserved_mib: int  # its reservation per GPU (the largest)
    peak_mib: int  # the most it was seen to use on one GPU
    gpus: Sequence[GpuHeld]


@dataclass(frozen=True)
class JobHistory:
    """What the rules read of the job the attempt belongs to."""

    gpus: int
    gpu_models: Collection[str] | None  # the models it may run on (None: any)
    max_attempts: int
    floor_mib: int | None  # no attempt reserves less per GPU (after an OOM)
    earlier: Sequence[AttemptState]  # how its earlier attempts ended


@dataclass(frozen=True)
class Decision:
    """What becomes of the job."""

    job_state: JobState  # PENDING: it waits to run again
    reason: str | None
    floor_mib: int | None  # its reservation floor from now on
    backoff_s: float | None  # it waits this long before its next attempt (None: no wait)


def settle(
    rules: ReservationRules,
    *,
    ending: Ending,
    job: JobHistory,
    cluster: Sequence[tuple[int, str, int]],
    headroom_mib: int,
    retry_ratios: Sequence[float] = (),
) -> Decision:
    """The job's next state once `ending` closed its attempt on `cluster` ((node id,
    GPU model, memory MiB) per GPU), where the latest jobs that ran again after an OOM
    went on to need `retry_ratios` (`retry_ratio`) times what they needed then.

    A preempted attempt sends the job back to the queue. An `oom` or `lost` attempt is
    retried while the job's attempt budget lasts (preempted attempts do not count),
    after a back-off that doubles with each failure; after an OOM no later attempt
    reserves less than `oom_retry_floor` says at the `retry_factor`, and a job no node
    could give that much on as many GPUs as it needs fails instead of waiting for ever
    (its floor then says the configured factor more: the step the cluster's retries
    take is for jobs that can run again).
    """
    outcome = ending.outcome
    if outcome == AttemptState.PREEMPTED:
        return Decision(JobState.PENDING, "preempted; waiting to run again", job.floor_mib, None)
    ended = [*job.earlier, outcome]
    tries = sum(1 for state in ended if state != AttemptState.PREEMPTED)
    if outcome not in RETRIED_ATTEMPT_STATES or tries >= job.max_attempts:
        return Decision(JobState(outcome), ending.reason, job.floor_mib, None)
    floor = job.floor_mib
    if outcome == AttemptState.OOM:
        needed = oom_needed_mib(ending)
        largest = _largest_room_mib(job, cluster, headroom_mib)
        runs_again = needed < largest
        floor = max(
            oom_retry_floor(
                factor=retry_factor(rules, retry_ratios) if runs_again else rules.oom_factor,
                needed_mib=needed,
                last_try=tries + 1 >= job.max_attempts,
                largest_mib=largest,
            ),
            floor or 0,
        )
        if not runs_again or floor > largest:
            reason = (
                f"needs at least {floor} MiB on each of {job.gpus} GPU(s) of one node, "
                "more than any eligible GPU has on a node with that many"
            )
            return Decision(JobState.OOM, reason, floor, None)
        why = f"requeued with at least {floor} MiB per GPU"
    else:
        why = "requeued after the attempt was lost"
    failures = sum(1 for state in ended if state in RETRIED_ATTEMPT_STATES)
    backoff = retry_backoff_s(rules, failures)
    reason = f"{why}, not before {backoff:g} s (attempt {tries + 1} of {job.max_attempts})"
    return Decision(JobState.PENDING, reason, floor, backoff)


def _largest_room_mib(
    job: JobHistory, cluster: Sequence[tuple[int, str, int]], headroom_mib: int
) -> int:
    """The most one GPU can give the job, where a node has as many GPUs of its models
    giving that much as the job needs (0: nowhere), as admission counts them."""

    def gang_fits(room: int) -> bool:
        return can_ever_fit(
            gpus=job.gpus,
            models=job.gpu_models,
            cluster=cluster,
            demand=lambda _model: room,
            headroom_mib=headroom_mib,
        )

    sizes = {total - headroom_mib for _node, _model, total in cluster}
    return max((room for room in sizes if gang_fits(room)), default=0)


def _available_mib(gpus: Sequence[GpuHeld]) -> int:
    """What the attempt could have had on its tightest GPU: a CUDA OOM means it needed
    more (capacity less foreign memory and its neighbours' reservations)."""
    return min(
        (gpu.memory_total_mib - gpu.foreign_mib - gpu.neighbours_mib for gpu in gpus), default=0
    )
