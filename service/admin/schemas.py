"""Response bodies of the admin queries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class GpuAllocationRead(BaseModel):
    job_id: int
    job_name: str
    owner: str
    attempt: int
    reserved_mib: int
    used_mib: int | None


class GpuRead(BaseModel):
    uuid: str
    index: int
    model: str
    memory_total_mib: int
    compute_capability: str | None  # as the agent reported the device and its stack
    driver_version: str | None
    cuda_driver_version: int | None
    context_mib: int | None  # bare CUDA context the agent measured
    memory_reserved_mib: int
    memory_used_mib: int | None  # None: the agent could not read it (then all foreign)
    memory_foreign_mib: int
    memory_free_mib: int
    utilization_pct: float | None
    memory_utilization_pct: float | None
    temperature_c: float | None
    power_w: float | None
    mig_enabled: bool | None
    healthy: bool
    health_reason: str | None
    allocations: list[GpuAllocationRead]


class NodeRead(BaseModel):
    id: int
    name: str
    state: str
    admin_state: str  # active | cordoned | draining (service/nodes/admin.py)
    drain_deadline: datetime | None
    agent_version: str
    registered_at: datetime
    last_heartbeat_at: datetime
    gpus: list[GpuRead]


class ClusterRead(BaseModel):
    nodes: list[NodeRead]


class EventRead(BaseModel):
    id: int
    at: datetime
    kind: str
    job_id: int | None
    node_id: int | None
    message: str
    data: dict[str, Any]


class EventList(BaseModel):
    events: list[EventRead]
    total: int  # events matching the filters, whatever page was read


class UsagePoint(BaseModel):
    """Mean memory over one step; per user only reservations and observed use are set."""

    at: datetime
    gpus: float
    capacity_mib: float
    reserved_mib: float
    used_mib: float
    foreign_mib: float


class UsageSeries(BaseModel):
    key: str  # the GPU model or the user
    points: list[UsagePoint]


class UtilizationRead(BaseModel):
    group_by: str
    since: datetime
    until: datetime
    step_s: float
    sample_interval_s: float
    series: list[UsageSeries]
