"""Bodies exchanged with node agents: registration and heartbeats."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

Uuid = Annotated[str, StringConstraints(min_length=1, max_length=96)]
MiB = Annotated[int, Field(ge=0, le=16 * 1024 * 1024)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuInfo(Strict):
    uuid: Uuid
    index: int = Field(ge=0, le=1023)
    model: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    memory_total_mib: int = Field(ge=1, le=16 * 1024 * 1024)


class NodeRegister(Strict):
    name: Annotated[
        str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    ]
    agent_version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    gpus: list[GpuInfo] = Field(max_length=64)


class NodeRegistered(BaseModel):
    node_id: int
    heartbeat_interval_s: float


class GpuState(Strict):
    uuid: Uuid
    memory_used_mib: MiB
    memory_foreign_mib: MiB = 0
    utilization_pct: float = Field(default=0.0, ge=0, le=100)
    healthy: bool = True


class AttemptRef(BaseModel):
    job_id: int
    attempt: int


class AttemptReport(Strict):
    """What an agent knows of one attempt it was given."""

    job_id: int = Field(ge=1, le=2**31 - 1)
    attempt: int = Field(ge=1, le=2**31 - 1)
    state: Literal["running", "exited"]
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    outcome: Literal["succeeded", "failed", "oom", "cancelled"] | None = None
    reason: Annotated[str, StringConstraints(max_length=4096)] | None = None
    peak_mib_by_gpu: dict[Uuid, MiB] = Field(default_factory=dict, max_length=64)


class Heartbeat(Strict):
    gpus: list[GpuState] = Field(max_length=64)
    attempts: list[AttemptReport] = Field(default_factory=list, max_length=10_000)


class Assignment(BaseModel):
    job_id: int
    attempt: int
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    gpu_uuids: list[str]
    reserved_mib: int


class HeartbeatReply(BaseModel):
    assignments: list[Assignment]
    cancellations: list[AttemptRef]
    acknowledged: list[AttemptRef]
    heartbeat_interval_s: float
