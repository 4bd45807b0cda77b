"""The pure attempt-lifecycle rules, on the cases no scripted run reaches cheaply."""

from __future__ import annotations

from service.scheduler.lifecycle import (
    Decision,
    Ending,
    GpuHeld,
    JobHistory,
    ReservationRules,
    ended_as,
    settle,
)
from service.scheduler.states import AttemptState, JobState

RULES = ReservationRules(oom_factor=1.5, oom_backoff_s=10.0)
ONE_NODE = [(1, "big", 40000), (1, "big", 40000)]
EMPTY_GPU = GpuHeld(memory_total_mib=16000, foreign_mib=0, neighbours_mib=0)


def decide(
    outcome: AttemptState,
    earlier: list[AttemptState],
    *,
    floor_mib: int | None = None,
    gpus: list[GpuHeld] | None = None,
) -> Decision:
    return settle(
        RULES,
        ending=Ending(outcome, "agent's reason", 4000, 9000, gpus or [EMPTY_GPU]),
        job=JobHistory(
            gpus=1, gpu_models=None, max_attempts=4, floor_mib=floor_mib, earlier=earlier
        ),
        cluster=ONE_NODE,
        headroom_mib=0,
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
