"""Calibration versions the cluster trained from its own observed peaks."""

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
