"""The states a job and its attempts go through, defined once: the database stores these
strings, the API and /metrics show them, filters and the dashboard list them."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "pending"
    PLACED = "placed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OOM = "oom"
    CANCELLED = "cancelled"
    LOST = "lost"
    TIMEOUT = "timeout"  # ran past its time limit; not retried


class AttemptState(StrEnum):
    PLACED = "placed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OOM = "oom"
    CANCELLED = "cancelled"
    LOST = "lost"
    TIMEOUT = "timeout"  # stopped by the server at its job's time limit
    PREEMPTED = "preempted"  # stopped for a higher-priority job; the job waits again


ACTIVE_ATTEMPT_STATES = (AttemptState.PLACED, AttemptState.RUNNING)
FINAL_JOB_STATES = (
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.OOM,
    JobState.CANCELLED,
    JobState.LOST,
    JobState.TIMEOUT,
)
# attempts that failed for want of memory or of their node: the job may try again
RETRIED_ATTEMPT_STATES = (AttemptState.OOM, AttemptState.LOST)
ENDED_ATTEMPT_STATES = tuple(state for state in AttemptState if state not in ACTIVE_ATTEMPT_STATES)
