"""Request and response bodies for jobs (the job spec of DESIGN.md)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AliasPath,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from estimator.estimate import FIXED_TERMS, Estimate
from estimator.spec import TrainingSpec
from service.config import JOB_PRIORITY_RANGE, TimeLimitS
from service.scheduler.states import AttemptState, JobState

Name = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")]
Argument = Annotated[str, StringConstraints(max_length=4096)]
# a job's command as lists show it, at most this many characters: a line of a wide table
COMMAND_SHOWN = 200
EnvName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]


class JobCreate(BaseModel):
    """A job as users submit it (YAML or JSON)."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    command: list[Argument] = Field(min_length=1, max_length=256)
    gpus: int = Field(default=1, ge=1, le=64)
    gpu_models: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] | None = (
        Field(default=None, min_length=1, max_length=32)
    )
    # users up to their queue's maximum (COLLOC_QUEUE_MAX_PRIORITY), admins any
    priority: int = Field(default=0, ge=JOB_PRIORITY_RANGE[0], le=JOB_PRIORITY_RANGE[1])
    queue: Name = "default"
    memory_mib: int | None = Field(default=None, ge=1, le=16 * 1024 * 1024)
    max_attempts: int | None = Field(default=None, ge=1, le=20)
    env: dict[EnvName, Argument] = Field(default_factory=dict, max_length=128)
    workdir: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = None
    training: TrainingSpec | None = None  # what the estimator reads
    preemptible: bool = False  # may be stopped (and requeued) for higher-priority jobs
    time_limit: TimeLimitS | None = None  # seconds an attempt may run (or "1h30m")

    @model_validator(mode="after")
    def _gpus_hold_ranks(self) -> JobCreate:
        """A training spec split over several ranks puts one on each of the job's GPUs:
        the job holds them all, or (a job on one node) a share of a larger split that
        its GPUs divide. One rank, the default, is taken as every GPU running the spec,
        as plain data parallelism does."""
        ranks = self.training.parallelism.ranks if self.training else 1
        if ranks > 1 and ranks % self.gpus:
            raise ValueError(
                f"training.parallelism spans {ranks} GPUs (dp x tp x pp x cp), and the "
                f"job's {self.gpus} GPUs do not divide it: set gpus to {ranks} or a "
                "divisor of it, or describe the job's own split"
            )
        return self


class JobPriority(BaseModel):
    """A job's new priority (admins only)."""

    model_config = ConfigDict(extra="forbid")

    priority: int = Field(ge=JOB_PRIORITY_RANGE[0], le=JOB_PRIORITY_RANGE[1])


class TrustedPeaks(BaseModel):
    """How many of a job's observed peaks now answer for every owner's jobs."""

    job_id: int
    trusted_peaks: int


def _spec(key: str) -> AliasPath:
    """Where a field the job was submitted with is read from (its stored spec)."""
    return AliasPath("spec", key)


class AttemptGpu(BaseModel):
    """One GPU of an attempt, read from its allocation."""

    model_config = ConfigDict(from_attributes=True)

    uuid: str = Field(validation_alias=AliasPath("gpu", "uuid"))
    index: int = Field(validation_alias=AliasPath("gpu", "index"))
    model: str = Field(validation_alias=AliasPath("gpu", "model"))
    reserved_mib: int
    used_mib: int | None = None  # what the attempt was last seen using on this GPU


class AttemptRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    number: int
    state: AttemptState
    node: str = Field(validation_alias=AliasPath("node", "name"))
    gpus: list[AttemptGpu] = Field(validation_alias="allocations")
    reserved_mib: int
    placed_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    reason: str | None
    peak_mib: int | None

    @field_validator("gpus")
    @classmethod
    def _by_index(cls, gpus: list[AttemptGpu]) -> list[AttemptGpu]:
        return sorted(gpus, key=lambda gpu: gpu.index)


class JobFields(BaseModel):
    """What a job's list entry and its full view share."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    owner: str
    queue: str
    priority: int
    state: JobState
    gpus: int
    gpu_models: list[str] | None = Field(default=None, validation_alias=_spec("gpu_models"))
    memory_mib: int | None
    reservation_floor_mib: int | None
    max_attempts: int
    preemptible: bool = Field(default=False, validation_alias=_spec("preemptible"))
    cancel_requested: bool
    held: bool
    time_limit_s: int | None
    not_before: datetime | None
    exit_code: int | None
    reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    attempts: list[AttemptRead]


class JobSummary(JobFields):
    """A job as lists show it: without its spec (up to megabytes of training spec,
    environment and arguments), its command shortened to COMMAND_SHOWN characters."""

    command: str = Field(validation_alias=_spec("command"))

    @field_validator("command", mode="before")
    @classmethod
    def _shortened(cls, command: list[str]) -> str:
        line = shlex.join(command)
        return line if len(line) <= COMMAND_SHOWN else line[: COMMAND_SHOWN - 1] + "…"


class JobRead(JobFields):
    """The API view of a job, its attempts and their GPUs (`JobRead.model_validate(job)`)."""

    command: list[str] = Field(validation_alias=_spec("command"))
    estimates: list[Estimate]
    spec: dict[str, Any]  # the job as submitted (GPU model names made canonical)

    @field_validator("estimates", mode="before")
    @classmethod
    def _by_model(cls, stored: Iterable[Any]) -> list[Estimate]:
        """The job's estimate rows as the estimator's answers, by GPU model (a row keeps
        the breakdown, not its fixed-cost sum: `fixed_mib` is added up from it)."""
        estimates = [Estimate.model_validate(row, from_attributes=True) for row in stored]
        for estimate in estimates:
            estimate.fixed_mib = sum(estimate.breakdown_mib.get(t, 0) for t in FIXED_TERMS)
        return sorted(estimates, key=lambda estimate: estimate.gpu_model)


class JobList(BaseModel):
    """A page of jobs, summarised: `GET /v1/jobs/{id}` has each one whole."""

    jobs: list[JobSummary]
    total: int


class GpuVerdictRead(BaseModel):
    node: str
    gpu_index: int
    model: str
    free_mib: int
    demand_mib: int | None
    fits: bool
    reasons: list[str]
    score: float | None
    held_for_job: int | None


class ExplanationRead(BaseModel):
    """Why a job waits (every GPU, with numbers), or where and why it was placed."""

    job_id: int
    state: JobState
    summary: str
    gpus: list[GpuVerdictRead]
