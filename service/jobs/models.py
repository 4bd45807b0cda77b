"""Tables for jobs, attempts, allocations and observed peaks."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Enum,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.db import Base, UtcDateTime
from service.nodes.models import Gpu, Node
from service.scheduler.states import AttemptState, JobState


def _state_column(states: type[StrEnum]) -> Any:
    """A state stored as its string (VARCHAR(16), as the migrations made it), read back
    as its enum member."""
    return mapped_column(
        Enum(
            states,
            native_enum=False,
            length=16,
            values_callable=lambda members: [member.value for member in members],
            validate_strings=True,
        ),
        index=True,
    )


# SQLite without AUTOINCREMENT gives a deleted newest row's id to the next row: a pruned
# job's id (and its attempts') would go to a new job that old references then name
# (migration 0011). PostgreSQL's sequences never give an id twice.
NEVER_REUSE_IDS = {"sqlite_autoincrement": True}


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("owner", "idempotency_key"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128), index=True)
    queue: Mapped[str] = mapped_column(String(64))
    priority: Mapped[int]
    state: Mapped[JobState] = _state_column(JobState)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    gpus: Mapped[int]
    memory_mib: Mapped[int | None]
    # Raised after an OOM: no later attempt reserves less than this per GPU.
    reservation_floor_mib: Mapped[int | None]
    max_attempts: Mapped[int]
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    # set when the scheduler preempts the job: its attempt ends `preempted` and the
    # job waits again, without spending its attempt budget
    preempt_requested: Mapped[bool] = mapped_column(default=False, server_default=false())
    not_before: Mapped[datetime | None] = mapped_column(UtcDateTime())  # OOM back-off
    # a held job stays pending but is not scheduled until released
    held: Mapped[bool] = mapped_column(default=False, server_default=false())
    # seconds an attempt may run (the spec's or its queue's default); None: no limit
    time_limit_s: Mapped[int | None]
    # set when the server stopped its attempt at the time limit: it ends `timeout`
    timed_out: Mapped[bool] = mapped_column(default=False, server_default=false())
    idempotency_key: Mapped[str | None] = mapped_column(String(128))
    exit_code: Mapped[int | None]
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())

    attempts: Mapped[list[Attempt]] = relationship(back_populates="job", order_by="Attempt.number")
    estimates: Mapped[list[JobEstimate]] = relationship(back_populates="job")


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("job_id", "number"),
        # the latest retry ratios, without a scan of every attempt (`_retry_ratios`)
        Index(
            "ix_attempts_retry_ratio",
            "id",
            postgresql_where=text("retry_ratio IS NOT NULL"),
            sqlite_where=text("retry_ratio IS NOT NULL"),
        ),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    number: Mapped[int]
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), index=True)
    state: Mapped[AttemptState] = _state_column(AttemptState)
    reserved_mib: Mapped[int]
    placed_at: Mapped[datetime] = mapped_column(UtcDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    exit_code: Mapped[int | None]
    reason: Mapped[str | None] = mapped_column(Text)
    peak_mib: Mapped[int | None]
    # an OOM's: what it needed more than (`oom_needed_mib`)
    needed_mib: Mapped[int | None]
    # a success after an OOM: its peak over that OOM's need, which retries learn from
    retry_ratio: Mapped[float | None]
    peak_changed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # the highest agent notice recorded for this attempt (re-sent notices are skipped)
    notice_seq: Mapped[int] = mapped_column(default=0, server_default="0")

    job: Mapped[Job] = relationship(back_populates="attempts")
    node: Mapped[Node] = relationship()
    allocations: Mapped[list[Allocation]] = relationship(back_populates="attempt")


class Allocation(Base):
    """GPU memory reserved for one attempt on one GPU while the attempt is active."""

    __tablename__ = "allocations"
    __table_args__ = (Index("ix_allocations_gpu_active", "gpu_id", "active"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    reserved_mib: Mapped[int]
    used_mib: Mapped[int | None]  # what the attempt was last seen using here
    active: Mapped[bool] = mapped_column(default=True)

    attempt: Mapped[Attempt] = relationship(back_populates="allocations")
    gpu: Mapped[Gpu] = relationship()


class Observation(Base):
    """The peak memory an agent saw for one attempt on one GPU.

    Every peak is kept; history and refits learn only from `credible` ones (why not:
    `doubt`), and one owner's answer for other owners' jobs only once `trusted` (the
    owner is an admin, or an admin vouched for the job) or corroborated (history.py).
    """

    __tablename__ = "observations"
    __table_args__ = (CheckConstraint("peak_mib >= 0", name="peak_mib_not_negative"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    gpu_model: Mapped[str] = mapped_column(String(128), index=True)
    peak_mib: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    credible: Mapped[bool] = mapped_column(default=False, server_default=false())
    doubt: Mapped[str | None] = mapped_column(String(256))
    trusted: Mapped[bool] = mapped_column(default=False, server_default=false())


class JobEstimate(Base):
    """The estimator's answer for a job on one GPU model, kept; the scheduler makes it
    again while the job waits if the `basis` it was made on is out of date (runs of its
    architecture ended or were vouched for since, or another calibration is active:
    `Estimator.stale`)."""

    __tablename__ = "job_estimates"
    __table_args__ = (
        UniqueConstraint("job_id", "gpu_model"),
        CheckConstraint("peak_mib >= 0", name="peak_mib_not_negative"),
        CheckConstraint("upper_mib >= 0", name="upper_mib_not_negative"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    gpu_model: Mapped[str] = mapped_column(String(128))
    peak_mib: Mapped[int]
    upper_mib: Mapped[int]
    coverage: Mapped[float]
    method: Mapped[str] = mapped_column(String(32))
    model_version: Mapped[str] = mapped_column(String(64))
    breakdown_mib: Mapped[dict[str, Any]] = mapped_column(JSON)
    basis: Mapped[str | None] = mapped_column(String(96))  # `Estimator.basis`; None: unknown

    job: Mapped[Job] = relationship(back_populates="estimates")
