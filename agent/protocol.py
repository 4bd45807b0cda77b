"""The messages between an agent and the server, defined once.

The agent builds and reads them; the server (`service/nodes/schemas.py`) validates
what agents send with them and answers with them. They live in the agent because
the agent speaks to the server only over HTTP and never imports `service`.

The bounds here are the server's: it refuses a message outside them (4xx). Free text
and times are the exceptions, since refusing one report would refuse the node's every
heartbeat after it: a job's own words end up in text (its command, its output), so an
over-long text is cut with a marker, and a time beyond what can be stored is clamped.
A figure the agent could not read (NVML cannot tell, a GPU fell off the bus) is None
on both sides, never 0: a GPU whose use is unknown must not look free.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    Base64Bytes,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

MAX_MIB = 16 * 1024 * 1024  # 16 TiB: no GPU holds more
MAX_GPUS = 64  # per node
TEXT_CHARS = 1024  # a notice's message, a GPU's health reason (gpus.health_reason's size)
REASON_CHARS = 4096  # why an attempt ended
INT32 = 2**31  # ids and exit codes are 32-bit integers in the database
LOG_CHUNK_MAX_BYTES = 256 * 1024
TRUNCATED = " [... truncated]"
# A node silent for its lease (HeartbeatReply.lease_s) loses its attempts to other nodes.
# Its agent stops them itself this many heartbeat intervals before the lease ends, timed
# from the sending of the last heartbeat that was answered (the server heard it later):
# one interval for the jobs to die (SIGTERM, then SIGKILL), one for the agent's sample
# loop and the server's clock. The server waits as long again before it places such a
# job anew, so a fenced attempt is dead before its next one starts.
FENCE_MARGIN_HEARTBEATS = 2

Stream = Literal["stdout", "stderr"]
Outcome = Literal["succeeded", "failed", "oom", "cancelled", "lost"]
NoticeKind = Literal["over_reservation", "unassigned_gpu"]
NoticeAction = Literal["warn", "kill", "report", "stop"]  # enforcement's, GPU confinement's


def _cut(limit: int) -> Callable[[object], object]:
    """Free text of at most `limit` characters, ending with a marker where it was cut."""

    def cut(value: object) -> object:
        if not isinstance(value, str) or len(value) <= limit:
            return value
        return value[: limit - len(TRUNCATED)] + TRUNCATED

    return cut


# The times the server takes: datetime's own range less a day at either end, so that a
# time at its edge converted to UTC (0001-01-01T00:00+14:00 is year 0 in UTC), or moved
# by less than a day (the utilization view's default `since` is an hour before `until`),
# never overflows. No stored time lies outside it, so clamping to it changes no answer.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)


def _in_utc(value: datetime) -> datetime:
    """An aware `value` in UTC, clamped to [EARLIEST, LATEST]."""
    try:
        value = value.astimezone(UTC)
    except OverflowError:  # within a day of datetime's limits
        return EARLIEST if value.year == 1 else LATEST
    return min(max(value, EARLIEST), LATEST)


Uuid = Annotated[str, StringConstraints(min_length=1, max_length=96)]
NodeName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
]
Mib = Annotated[int, Field(ge=0, le=MAX_MIB)]
Pct = Annotated[float, Field(ge=0, le=100)]
Text = Annotated[str, BeforeValidator(_cut(TEXT_CHARS))]
Reason = Annotated[str, BeforeValidator(_cut(REASON_CHARS))]
Id = Annotated[int, Field(ge=1, le=INT32 - 1)]
UtcTime = Annotated[AwareDatetime, AfterValidator(_in_utc)]


def sum_known(a: int | None, b: int | None) -> int | None:
    """a + b; unknown (None) where either is."""
    return None if a is None or b is None else a + b


class Request(BaseModel):
    """A message an agent sends: anything the server does not know is refused."""

    model_config = ConfigDict(extra="forbid")


class Reply(BaseModel):
    """A message the server answers with: fields a newer server adds are ignored."""


# -- registration --------------------------------------------------------------------


class GpuKind(Request):
    """What a GPU is, as NVML names and measures it; alike for every GPU of a kind (a
    cluster file's `gpus` entry). The estimator describes the GPU from these: its
    compute capability, the driver, the CUDA version that driver supports (12040 for
    12.4), and its bare CUDA context as the agent measured it; None where unknown."""

    model: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    # what jobs can have: the memory less what the driver and firmware reserve, where
    # NVML says (agent/backends/nvml.py); a GPU's `memory_used_mib` is of the same
    memory_total_mib: int = Field(ge=1, le=MAX_MIB)
    compute_capability: (
        Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]?\.[0-9]{1,2}$")] | None
    ) = None
    driver_version: (
        Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Za-z0-9._-]+$")] | None
    ) = None
    cuda_driver_version: int | None = Field(default=None, ge=1000, le=999_999)
    context_mib: int | None = Field(default=None, ge=0, le=64 * 1024)


class GpuInfo(GpuKind):
    """One GPU of a node as registration reports it; fixed while the agent runs."""

    uuid: Uuid
    index: int = Field(ge=0, le=1023)


class NodeRegister(Request):
    name: NodeName
    agent_version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    gpus: list[GpuInfo] = Field(max_length=MAX_GPUS)


class NodeRegistered(Reply):
    node_id: int
    heartbeat_interval_s: float
    # as HeartbeatReply.lease_s: a fresh agent can fence before any heartbeat is answered
    lease_s: float | None = None


# -- heartbeats ----------------------------------------------------------------------


class GpuState(Request):
    """A GPU's last reading. `memory_used_mib` must be stated, None where it could not
    be read; `memory_foreign_mib` (processes that are no job of this agent) is None
    where one of them holds memory the driver cannot attribute."""

    uuid: Uuid
    memory_used_mib: Mib | None
    memory_foreign_mib: Mib | None = 0
    utilization_pct: Pct | None = 0.0
    memory_utilization_pct: Pct | None = None
    temperature_c: float | None = Field(default=None, ge=-100, le=250)
    power_w: float | None = Field(default=None, ge=0, le=100_000)
    mig_enabled: bool | None = None
    healthy: bool = True
    health_reason: Text | None = None  # why the agent holds it unhealthy


class Notice(Request):
    """Something the agent did or saw about an attempt; `seq` counts per attempt.
    `used_mib` is None where the driver could not say what the job held."""

    seq: int = Field(ge=1, le=1024)
    kind: NoticeKind
    gpu_uuid: Uuid
    used_mib: Mib | None
    reserved_mib: Mib
    action: NoticeAction
    message: Text


class LogChunk(Request):
    """Bytes `offset`.. of one of the attempt's output streams, base64 encoded."""

    stream: Stream
    offset: int = Field(ge=0, le=2**62)
    data: Annotated[Base64Bytes, Field(max_length=LOG_CHUNK_MAX_BYTES)]


class AttemptReport(Request):
    """What an agent knows of one attempt it was given. A GPU whose use by the attempt
    the driver could not attribute is left out of `current_mib_by_gpu` and
    `peak_mib_by_gpu`; in `unassigned_mib_by_gpu` its use is None."""

    job_id: Id
    attempt: Id
    state: Literal["running", "exited"]
    started_at: UtcTime | None = None
    finished_at: UtcTime | None = None
    exit_code: int | None = Field(default=None, ge=-INT32, le=INT32 - 1)
    outcome: Outcome | None = None
    reason: Reason | None = None
    peak_mib_by_gpu: dict[Uuid, Mib] = Field(default_factory=dict, max_length=MAX_GPUS)
    current_mib_by_gpu: dict[Uuid, Mib] = Field(default_factory=dict, max_length=MAX_GPUS)
    notices: list[Notice] = Field(default_factory=list, max_length=64)
    logs: list[LogChunk] = Field(default_factory=list, max_length=4)
    # memory the attempt's processes hold on GPUs of this node it was not given
    unassigned_mib_by_gpu: dict[Uuid, Mib | None] = Field(default_factory=dict, max_length=MAX_GPUS)


class Heartbeat(Request):
    gpus: list[GpuState] = Field(max_length=MAX_GPUS)
    attempts: list[AttemptReport] = Field(default_factory=list, max_length=10_000)


class AttemptRef(Reply):
    job_id: int
    attempt: int


class Assignment(Reply):
    job_id: int
    attempt: int
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    gpu_uuids: list[str]
    account: str  # the Unix account the job runs as (where the agent switches users)
    reserved_mib: int
    reserved_mib_by_gpu: dict[str, int]


class LogOffsets(Reply):
    """Up to which byte the server holds each stream of an attempt's output."""

    job_id: int
    attempt: int
    stdout: int
    stderr: int


class HeartbeatReply(Reply):
    assignments: list[Assignment]
    cancellations: list[AttemptRef]
    acknowledged: list[AttemptRef]
    log_offsets: list[LogOffsets]
    log_keep_bytes: int
    heartbeat_interval_s: float
    # the server gives a silent node's attempts away after this long: the agent stops
    # them itself before then (self-fencing); None from servers that do not say
    lease_s: float | None = None


def wire(message: BaseModel) -> dict[str, object]:
    """A message as JSON sends it; fields left at their defaults by whoever built it
    are left out, as older servers refuse fields they do not know."""
    return message.model_dump(mode="json", exclude_unset=True)
