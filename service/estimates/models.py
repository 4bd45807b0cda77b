"""Calibration versions the cluster trained from its own observed peaks, and the
fixed-cost offsets it learned per environment (GPU model and driver)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, UtcDateTime


class EstimatorVersion(Base):
    """One trained calibration; exactly one (or none: the packaged one) is active."""

    __tablename__ = "estimator_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    active: Mapped[bool] = mapped_column(default=False)
    observations: Mapped[int]  # cluster peaks it was trained with
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    calibration: Mapped[str] = mapped_column(Text)  # the artifact's calibration JSON


class FixedCostOffset(Base):
    """One environment's residuals (`estimator/offsets.py`): the newest finished runs'
    observed peak over the offset-free estimate, and the offset they give."""

    __tablename__ = "fixed_cost_offsets"

    id: Mapped[int] = mapped_column(primary_key=True)
    environment: Mapped[str] = mapped_column(String(256), unique=True)
    gpu_model: Mapped[str] = mapped_column(String(128))
    driver_version: Mapped[str | None] = mapped_column(String(64))
    residuals: Mapped[list[list[float | str]]] = mapped_column(JSON)  # [[residual, model, voter]]
    observations: Mapped[int]  # runs seen in all (the newest are kept)
    offset_mib: Mapped[float]  # as last computed (0 until enough runs)
    last_observation_id: Mapped[int]  # every observation up to it was taken in
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
