"""The usage samples table."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, UtcDateTime


class UsageSample(Base):
    """Memory on one GPU model at one instant: the whole model's (`owner` NULL: GPUs,
    capacity, reservations, jobs' observed use, foreign use) or one user's share of it
    (reservations and observed use of that user's jobs)."""

    __tablename__ = "usage_samples"
    __table_args__ = (Index("ix_usage_samples_at_model", "at", "gpu_model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    gpu_model: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str | None] = mapped_column(String(128))
    gpus: Mapped[int] = mapped_column(default=0)
    capacity_mib: Mapped[int] = mapped_column(default=0)
    reserved_mib: Mapped[int]
    used_mib: Mapped[int]
    foreign_mib: Mapped[int] = mapped_column(default=0)
