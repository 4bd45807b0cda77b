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
    memory_used_mib: Mapped[int] = mapped_column(default=0)
    memory_foreign_mib: Mapped[int] = mapped_column(default=0)
    utilization_pct: Mapped[float] = mapped_column(default=0.0)
    memory_utilization_pct: Mapped[float | None]
    temperature_c: Mapped[float | None]
    power_w: Mapped[float | None]
    mig_enabled: Mapped[bool | None]
    healthy: Mapped[bool] = mapped_column(default=True)
    health_reason: Mapped[str | None] = mapped_column(String(1024))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())

    node: Mapped[Node] = relationship(back_populates="gpus")
