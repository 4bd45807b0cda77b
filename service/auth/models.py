"""The API tokens table: only a hash of each token is stored."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, UtcDateTime


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    # a user's name (the owner of the jobs it submits), or the node an agent token serves
    name: Mapped[str] = mapped_column(String(128), index=True)
    role: Mapped[str] = mapped_column(String(16))  # user | admin | agent
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # SHA-256, hex
    prefix: Mapped[str] = mapped_column(String(16))  # shown in listings to tell tokens apart
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class UnixAccount(Base):
    """The Unix account a token name's jobs run as on the nodes, where it is not the name."""

    __tablename__ = "unix_accounts"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)  # a job owner's
    account: Mapped[str] = mapped_column(String(32))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
