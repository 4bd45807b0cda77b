"""The table of log chunks."""

from __future__ import annotations

from sqlalchemy import BigInteger, ForeignKey, Index, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base


class LogChunk(Base):
    """Bytes `offset` to `offset + size` of one output stream of an attempt."""

    __tablename__ = "log_chunks"
    __table_args__ = (Index("ix_log_chunks_attempt_stream", "attempt_id", "stream", "offset"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"))
    stream: Mapped[str] = mapped_column(String(8))
    offset: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int]
    data: Mapped[bytes] = mapped_column(LargeBinary)
