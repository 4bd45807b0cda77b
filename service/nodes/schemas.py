"""Bodies exchanged with node agents: registration and heartbeats."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import (
    AwareDatetime,
    Base64Bytes,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)


def _storable(limit: int | None = None) -> Callable[[object], object]:
    """A string as the database can keep it: without NUL characters (PostgreSQL's text
    holds none) and, where `limit` is given, cut to that many characters. A job writes
    what ends up in these (its command, its OOM line): refusing the report would refuse
    the node's every heartbeat after it."""

    def clean(value: object) -> object:
        if not isinstance(value, str):
            return value
        value = value.replace("\x00", "")
        return value[:limit] if limit is not None else value

    return clean


Uuid = Annotated[str, BeforeValidator(_storable()), StringConstraints(min_length=1, max_length=96)]
MiB = Annotated[int, Field(ge=0, le=16 * 1024 * 1024)]
Text = Annotated[str, BeforeValidator(_storable(1024))]  # Gpu.health_reason's size
Stream = Literal["stdout", "stderr"]
LOG_CHUNK_MAX_BYTES = 256 * 1024


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuInfo(Strict):
    uuid: Uuid
    index: int = Field(ge=0, le=1023)
    model: Annotated[
        str, BeforeValidator(_storable()), StringConstraints(min_length=1, max_length=128)
    ]
    memory_total_mib: int = Field(ge=1, le=16 * 1024 * 1024)
    # the device and its stack as the agent saw them (older agents send none of it)
    compute_capability: (
        Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]?\.[0-9]{1,2}$")] | None
    ) = None
    driver_version: (
        Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Za-z0-9._-]+$")] | None
    ) = None
    cuda_driver_version: int | None = Field(default=None, ge=1000, le=999_999)  # 12040
    context_mib: int | None = Field(default=None, ge=0, le=64 * 1024)  # bare CUDA context


class NodeRegister(Strict):
    name: Annotated[
        str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    ]
    agent_version: Annotated[
        str, BeforeValidator(_storable()), StringConstraints(min_length=1, max_length=64)
    ]
    gpus: list[GpuInfo] = Field(max_length=64)


class NodeRegistered(BaseModel):
    node_id: int
    heartbeat_interval_s: float


class GpuState(Strict):
    uuid: Uuid
    memory_used_mib: MiB
    memory_foreign_mib: MiB = 0
    utilization_pct: float = Field(default=0.0, ge=0, le=100)
    memory_utilization_pct: float | None = Field(default=None, ge=0, le=100)
    temperature_c: float | None = Field(default=None, ge=-100, le=250)
    power_w: float | None = Field(default=None, ge=0, le=100_000)
    mig_enabled: bool | None = None
    healthy: bool = True
    health_reason: Text | None = None  # why the agent holds it unhealthy


class AttemptRef(BaseModel):
    job_id: int
    attempt: int


class Notice(Strict):
    """Something the agent did or saw about an attempt; `seq` counts per attempt."""

    seq: int = Field(ge=1, le=1024)
    kind: Literal["over_reservation", "unassigned_gpu"]
    gpu_uuid: Uuid
    used_mib: MiB
    reserved_mib: MiB
    action: Literal["warn", "kill", "report", "stop"]  # enforcement's, GPU confinement's
    message: Text


class LogChunk(Strict):
    """Bytes `offset`.. of one of the attempt's output streams, base64 encoded."""

    stream: Stream
    offset: int = Field(ge=0, le=2**62)
    data: Base64Bytes

    @field_validator("data")
    @classmethod
    def _bounded(cls, data: bytes) -> bytes:
        if len(data) > LOG_CHUNK_MAX_BYTES:
            raise ValueError(f"a log chunk holds at most {LOG_CHUNK_MAX_BYTES} bytes")
        return data


class AttemptReport(Strict):
    """What an agent knows of one attempt it was given."""

    job_id: int = Field(ge=1, le=2**31 - 1)
    attempt: int = Field(ge=1, le=2**31 - 1)
    state: Literal["running", "exited"]
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    outcome: Literal["succeeded", "failed", "oom", "cancelled", "lost"] | None = None
    reason: Annotated[str, BeforeValidator(_storable(4096))] | None = None
    peak_mib_by_gpu: dict[Uuid, MiB] = Field(default_factory=dict, max_length=64)
    current_mib_by_gpu: dict[Uuid, MiB] = Field(default_factory=dict, max_length=64)
    notices: list[Notice] = Field(default_factory=list, max_length=64)
    logs: list[LogChunk] = Field(default_factory=list, max_length=4)
    # memory the attempt's processes hold on GPUs of this node it was not given
    unassigned_mib_by_gpu: dict[Uuid, MiB] = Field(default_factory=dict, max_length=64)


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
    account: str  # the Unix account the job runs as (where the agent switches users)
    reserved_mib: int
    reserved_mib_by_gpu: dict[str, int]


class LogOffsets(BaseModel):
    """Up to which byte the server holds each stream of an attempt's output."""

    job_id: int
    attempt: int
    stdout: int
    stderr: int


class HeartbeatReply(BaseModel):
    assignments: list[Assignment]
    cancellations: list[AttemptRef]
    acknowledged: list[AttemptRef]
    log_offsets: list[LogOffsets]
    log_keep_bytes: int
    heartbeat_interval_s: float
