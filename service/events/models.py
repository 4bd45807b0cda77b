"""The events table."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, UtcDateTime


class Event(Base):
    __tablename__ = "events"
    # the audit log pages by id (`after_id`): an id SQLite gave again after pruning
    # would be skipped by a reader past it (migration 0011; PostgreSQL never reuses)
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    kind: Mapped[str] = mapped_column(String(48), index=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), index=True)
    node_id: Mapped[int | None] = mapped_column(ForeignKey("nodes.id"), index=True)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
