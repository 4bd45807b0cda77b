"""The pure attempt-lifecycle rules, on the cases no scripted run reaches cheaply."""

from __future__ import annotations

from service.scheduler.lifecycle import (
    AttemptEnd,
    Decision,
    Ending,
    GpuHeld,
    JobHistory,
    ReservationRules,
    ended_as,
    retry_factor,
    retry_ratio,
    settle,
)
from service.scheduler.states import AttemptState, JobState

RULES = ReservationRules(oom_factor=1.5, oom_backoff_s=10.0)
# one node of two 16000 MiB GPUs, one of two 24000, one with a single 40000
CLUSTER = [(1, "small", 16000)] * 2 + [(2, "mid", 24000)] * 2 + [(3, "big", 40000)]
EMPTY_GPU = GpuHeld(memory_total_mib=16000, foreign_mib=0, neighbours_mib=0)


def decide(
    outcome: AttemptState,
    earlier: list[AttemptState],
    *,
    floor_mib: int | None = None,
    gpus: list[GpuHeld] | None = None,
    reserved_mib: int = 4000,
    peak_mib: int = 9000,
    job_gpus: int = 1,
    retry_ratios: tuple[float, ...] = (),
) -> Decision:
    return settle(
        RULES,
        ending=Ending(outcome, "agent's reason", reserved_mib, peak_mib, gpus or [EMPTY_GPU]),
        job=JobHistory(
            gpus=job_gpus, gpu_models=None, max_attempts=4, floor_mib=floor_mib, earlier=earlier
        ),
        cluster=CLUSTER,
        headroom_mib=0,
        retry_ratios=retry_ratios,
    )


def test_the_back_off_doubles_with_each_failure_and_preemptions_are_free() -> None:
    lost = decide(AttemptState.LOST, [AttemptState.PREEMPTED, AttemptState.OOM])
    # two failures: 10 x 2; the preempted attempt counts toward neither budget nor back-off
    assert lost == Decision(
        JobState.PENDING,
        "requeued after the attempt was lost, not before 20 s (attempt 3 of 4)",
        None,
        20.0,
    )
    spent = decide(AttemptState.LOST, [AttemptState.OOM, AttemptState.LOST, AttemptState.OOM])
    assert spent == Decision(JobState.LOST, "agent's reason", None, None)


def test_a_preempted_attempt_requeues_at_once_keeping_the_floor() -> None:
    assert decide(AttemptState.PREEMPTED, [AttemptState.OOM], floor_mib=7000) == Decision(
        JobState.PENDING, "preempted; waiting to run again", 7000, None
    )


def test_the_oom_floor_comes_from_the_tightest_gpu_and_never_drops() -> None:
    tight = GpuHeld(memory_total_mib=16000, foreign_mib=1000, neighbours_mib=5000)  # 10000
    loose = GpuHeld(memory_total_mib=16000, foreign_mib=0, neighbours_mib=0)
    # max(reserved 4000, peak 9000, tightest 10000) x 1.5
    assert decide(AttemptState.OOM, [], gpus=[loose, tight]).floor_mib == 15000
    assert decide(AttemptState.OOM, [], floor_mib=20000, gpus=[tight]).floor_mib == 20000


def test_the_oom_floor_never_asks_more_than_the_largest_gpu_gives() -> None:
    # 1.5 x 30000 is more than any GPU has, but the lone 40000 one gives more than 30000
    assert decide(AttemptState.OOM, [], peak_mib=30000).floor_mib == 40000
    # a gang of two cannot have it: two 24000 GPUs on one node give no more than 24000
    gang = decide(AttemptState.OOM, [], peak_mib=24000, job_gpus=2)
    assert (gang.job_state, gang.floor_mib) == (JobState.OOM, 36000)
    assert gang.reason is not None and "on each of 2 GPU(s) of one node" in gang.reason


def test_the_last_try_of_a_job_that_outgrew_its_reservation_gets_the_largest_gpu() -> None:
    """Its estimate was wrong by an unknown amount: its attempts must not run out while
    a GPU could still run it alone."""
    last = decide(AttemptState.OOM, [AttemptState.OOM, AttemptState.LOST])
    assert last.job_state == JobState.PENDING and last.floor_mib == 40000
    assert decide(AttemptState.OOM, [AttemptState.OOM] * 2, job_gpus=2).floor_mib == 24000


def test_a_job_squeezed_out_by_its_neighbours_asks_the_factor_more_then_a_gpu_whole() -> None:
    """Squeezed before its peak, what it needs beyond what it held is unknown: on its
    last try it runs alone (a spiky job, reserved 14,766 MiB beside neighbours that had
    outgrown theirs, then needing 21,564, failed for want of attempts before)."""
    # it reserved 9000 and reached 5000, but its neighbours left it only 8000
    squeezed = GpuHeld(memory_total_mib=16000, foreign_mib=0, neighbours_mib=8000)
    first = decide(AttemptState.OOM, [], gpus=[squeezed], reserved_mib=9000, peak_mib=5000)
    assert first.floor_mib == 13500  # 1.5 x 9000
    last = decide(
        AttemptState.OOM, [AttemptState.OOM] * 2, gpus=[squeezed], reserved_mib=9000, peak_mib=5000
    )
    assert last.job_state == JobState.PENDING and last.floor_mib == 40000


def test_a_job_that_needed_more_than_every_gpu_has_fails() -> None:
    alone = GpuHeld(memory_total_mib=40000, foreign_mib=0, neighbours_mib=0)
    spent = decide(AttemptState.OOM, [], gpus=[alone], reserved_mib=30000, peak_mib=40000)
    assert spent.job_state == JobState.OOM and spent.floor_mib == 60000


def test_an_attempt_asked_to_stop_ended_as_asked_unless_it_succeeded() -> None:
    def ended(outcome: AttemptState, preempt: bool, cancel: bool) -> AttemptState:
        return ended_as(outcome, preempt_requested=preempt, cancel_requested=cancel)

    assert ended(AttemptState.FAILED, True, True) == AttemptState.PREEMPTED
    assert ended(AttemptState.OOM, False, True) == AttemptState.CANCELLED
    assert ended(AttemptState.SUCCEEDED, True, True) == AttemptState.SUCCEEDED
    assert ended(AttemptState.FAILED, False, False) == AttemptState.FAILED


def test_an_attempt_past_its_time_limit_ends_timeout_even_if_also_preempted() -> None:
    """A requeue or preemption asked after the time limit did not reset it: the job
    does not wait again with its time spent."""
    for preempt in (True, False):
        ended = ended_as(
            AttemptState.CANCELLED, preempt_requested=preempt, cancel_requested=True, timed_out=True
        )
        assert ended == AttemptState.TIMEOUT
    assert (
        ended_as(
            AttemptState.SUCCEEDED, preempt_requested=True, cancel_requested=True, timed_out=True
        )
        == AttemptState.SUCCEEDED
    )


def test_a_job_that_succeeded_after_an_oom_shows_how_far_it_went_on_to_need() -> None:
    def end(outcome: AttemptState, peak: int | None, needed: int | None = None) -> AttemptEnd:
        return AttemptEnd(outcome, peak, needed)

    oom = end(AttemptState.OOM, 7000, 8000)
    done = end(AttemptState.SUCCEEDED, 12000)
    assert retry_ratio([end(AttemptState.SUCCEEDED, 5000)]) is None  # it never died
    assert retry_ratio([oom]) is None  # nothing shown since
    assert retry_ratio([oom, done]) == 1.5
    # a later OOM's need is set by the step its retry took: only the success counts,
    # over the first OOM's need
    again = end(AttemptState.OOM, 9000, 16000)
    assert retry_ratio([oom, again]) is None
    assert retry_ratio([oom, again, done]) == 1.5
    # what a job cut short used is not what it reaches: only a success's peak counts
    assert retry_ratio([oom, end(AttemptState.TIMEOUT, 30000)]) is None
    assert retry_ratio([end(AttemptState.PREEMPTED, 3000), oom, done]) == 1.5
    # an OOM kept before its need was recorded, or with none, teaches nothing
    assert retry_ratio([end(AttemptState.OOM, 7000), done]) is None
    assert retry_ratio([end(AttemptState.OOM, 0, -500), done]) is None


def test_the_retry_step_is_the_cluster_s_once_enough_jobs_showed_it_and_never_less() -> None:
    assert retry_factor(RULES, [3.0] * 18) == 1.5  # too few for a bound: as configured
    # 19 jobs: the conformal quantile at 95% is the largest of them
    assert retry_factor(RULES, [1.1] * 18 + [2.5]) == 2.5
    # 39: the second largest, so one odd job no longer sets it
    assert retry_factor(RULES, [1.1] * 37 + [2.0, 9.0]) == 2.0
    assert retry_factor(RULES, [1.05] * 40) == 1.5  # never below what is configured


def test_a_retry_after_an_oom_takes_the_cluster_s_step() -> None:
    # max(reserved 4000, peak 9000, the empty 16000 GPU) x the learned 2.0, which the
    # 40000 GPU gives
    learned = decide(AttemptState.OOM, [], retry_ratios=(1.1,) * 18 + (2.0,))
    assert learned.floor_mib == 32000
    assert learned.reason is not None and "at least 32000 MiB" in learned.reason


def test_a_job_that_can_never_run_again_is_failed_at_the_configured_step() -> None:
    """The learned step is for retries that can run: a job that needed more than every
    GPU has fails with its floor the configured factor more (no absurd figure)."""
    alone = GpuHeld(memory_total_mib=40000, foreign_mib=0, neighbours_mib=0)
    spent = decide(
        AttemptState.OOM,
        [],
        gpus=[alone],
        reserved_mib=30000,
        peak_mib=40000,
        retry_ratios=(1.1,) * 18 + (30000.0,),
    )
    assert spent.job_state == JobState.OOM and spent.floor_mib == 60000
