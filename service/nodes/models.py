"""Tables for nodes and GPUs."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.db import Base, UtcDateTime


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    state: Mapped[str] = mapped_column(String(16))  # ready | lost
    # an admin's say (service/nodes/admin.py): active | cordoned | draining; only an
    # active node gets new placements
    admin_state: Mapped[str] = mapped_column(String(16), default="active", server_default="active")
    # a draining node's running jobs are requeued once this passes (None: they finish)
    drain_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime())
    agent_version: Mapped[str] = mapped_column(String(64))
    registered_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime())

    gpus: Mapped[list[Gpu]] = relationship(back_populates="node", order_by="Gpu.index")


class Gpu(Base):
    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), index=True)
    uuid: Mapped[str] = mapped_column(String(96), unique=True)
    index: Mapped[int]
    model: Mapped[str] = mapped_column(String(128))
    memory_total_mib: Mapped[int]
    # what the agent reported of the device and its stack (None: older agent, or unknown)
    compute_capability: Mapped[str | None] = mapped_column(String(8))  # "9.0"
    driver_version: Mapped[str | None] = mapped_column(String(64))
    cuda_driver_version: Mapped[int | None]  # e.g. 12040 for CUDA 12.4
    context_mib: Mapped[int | None]  # the bare CUDA context the agent measured
    # the last reading; None where the agent could not read it (NVML could not tell)
    memory_used_mib: Mapped[int | None] = mapped_column(default=0)
    # what the scheduler takes off free memory besides its jobs' use: processes it did
    # not start, use it cannot attribute, the whole GPU while its use is unknown
    memory_foreign_mib: Mapped[int] = mapped_column(default=0)
    utilization_pct: Mapped[float | None] = mapped_column(default=0.0)
    memory_utilization_pct: Mapped[float | None]
    temperature_c: Mapped[float | None]
    power_w: Mapped[float | None]
    mig_enabled: Mapped[bool | None]
    healthy: Mapped[bool] = mapped_column(default=True)
    health_reason: Mapped[str | None] = mapped_column(String(1024))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())

    node: Mapped[Node] = relationship(back_populates="gpus")

    @property
    def jobs_used_mib(self) -> int:
        """What Colloc's jobs hold here by the last reading: its use less foreign use
        (none where the use is unknown: the GPU is then all foreign)."""
        if self.memory_used_mib is None:
            return 0
        return max(0, self.memory_used_mib - self.memory_foreign_mib)

    @property
    def busy_pct(self) -> float:
        """Utilisation as the scheduler's cap reads it: where the GPU cannot say how
        busy it is, fully busy, so no job is packed beside another there."""
        return 100.0 if self.utilization_pct is None else self.utilization_pct
